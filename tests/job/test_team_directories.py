"""A rendered job's user and groups can write where the platform's directory Job leaves its
team's directories, and nowhere else; and a team's pods mount no other team's tree.

The platform side is the directory Job's own script, run with mkdir, chown and chmod
recording what they would do; the job side is the rendered pod's securityContext. Between
them, the kernel's permission check (owner, group, other bits; setgid inheritance) is
modelled here, because no test machine can chown to a team's group.
"""

from __future__ import annotations

import stat
import subprocess
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any

import pytest

from config.kubernetes import FSX_MOUNT, team_namespace
from config.team_groups import TEAM_GID_BASE, TEAM_GID_SPAN, team_gid, team_gids, team_uid
from config.teams import (
    DATA_MOUNT,
    team_checkpoints_directory,
    team_directory,
    team_runs_directory,
)
from hpctl.job.plan import JobPlan
from hpctl.job.render import render_job
from platform_constructs.eks_fsx_volume import FsxStaticVolume, LustreFileSystem
from platform_constructs.team_workspace import directory_job, directory_script
from stacks.governance_stack import workspace_props
from tests.job.conftest import make_spec
from tests.support import bare_stack, imported_cluster, kubernetes_objects, template_of

TEAMS = ("research", "sandbox")
# A new FSx for Lustre file system's root: root's, 0755 (the Lustre default).
FILE_SYSTEM_ROOT = (0, 0, 0o755)
# What a process's umask leaves of a new directory's 0777 (the image's default, 022).
UMASK = 0o022


@dataclass(frozen=True)
class Inode:
    uid: int
    gid: int
    mode: int  # permission bits and setgid, no file type


@dataclass(frozen=True)
class Process:
    uid: int
    gid: int  # the primary group: new files get it outside setgid directories
    groups: frozenset[int]  # the primary group and the supplemental ones


Tree = dict[str, Inode]


def platform_tree(script: str) -> Tree:
    """What `script` leaves on a fresh file system: it runs in sh with mkdir, chown and chmod
    replaced by functions that print their arguments, which are then applied here."""
    stubs = 'mkdir() { echo "mkdir $*"; }\nchown() { echo "chown $*"; }\nchmod() { echo "chmod $*"; }\nls() { :; }\n'
    calls = subprocess.run(
        ["sh", "-c", stubs + script], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    tree: Tree = {FSX_MOUNT: Inode(*FILE_SYSTEM_ROOT)}
    for call in calls:
        command, *args = call.split()
        if command == "mkdir":
            assert args[0] == "-p"
            for path in args[1:]:
                for parent in reversed([PurePosixPath(path), *PurePosixPath(path).parents]):
                    if str(parent) not in tree and str(parent).startswith(FSX_MOUNT):
                        tree[str(parent)] = created(
                            tree, str(parent), Process(0, 0, frozenset({0}))
                        )
        elif command == "chown":
            owner, path = args
            uid, gid = (int(n) for n in owner.split(":"))
            tree[path] = replace(tree[path], uid=uid, gid=gid)
        elif command == "chmod":
            mode, path = args
            tree[path] = replace(tree[path], mode=int(mode, 8))
        else:
            raise AssertionError(f"unexpected command {call!r}")
    return tree


def allowed(inode: Inode, process: Process, want: int) -> bool:
    """The kernel's check: root passes; else the owner's bits, else the group's when the
    process is in the file's group, else the others' (`want`: 4 read, 2 write, 1 search)."""
    if process.uid == 0:
        return True
    if process.uid == inode.uid:
        bits = inode.mode >> 6
    elif inode.gid in process.groups:
        bits = inode.mode >> 3
    else:
        bits = inode.mode
    return bits & want == want


def created(tree: Tree, path: str, process: Process) -> Inode:
    """The directory `process` gets from mkdir `path`: its group is the parent's where the
    parent is setgid (and it inherits setgid), else the process's primary group."""
    parent = tree[str(PurePosixPath(path).parent)]
    setgid = bool(parent.mode & stat.S_ISGID)
    return Inode(
        uid=process.uid,
        gid=parent.gid if setgid else process.gid,
        mode=(0o777 & ~UMASK) | (stat.S_ISGID if setgid else 0),
    )


def make_directory(tree: Tree, path: str, process: Process) -> bool:
    """mkdir `path` as `process`: search on every ancestor, write and search on the parent."""
    parent = PurePosixPath(path).parent
    ancestors = [str(p) for p in reversed([parent, *parent.parents]) if str(p) in tree]
    if str(parent) not in tree:
        return False
    if not all(allowed(tree[a], process, 1) for a in ancestors):
        return False
    if not allowed(tree[str(parent)], process, 3):
        return False
    tree[path] = created(tree, path, process)
    return True


def pod_process(team: str) -> Process:
    """The user and groups of `team`'s rendered training pods."""
    return manifest_process(render_job(make_spec(team=team)))


def manifest_process(manifest: dict[str, Any]) -> Process:
    """The user and groups of a rendered job's pods."""
    context: dict[str, Any] = manifest["spec"]["replicaSpecs"][0]["template"]["spec"][
        "securityContext"
    ]
    return Process(
        uid=context["runAsUser"],
        gid=context["runAsGroup"],
        groups=frozenset({context["runAsGroup"], *context.get("supplementalGroups", ())}),
    )


def platform_script(team: str) -> str:
    """The script of the directory Job the governance stack gives `team`."""
    props = workspace_props(
        team, "ckpt", group_id=team_gids(TEAMS)[team], setup_image="busybox:1", tolerations=()
    )
    assert directory_job(props)["metadata"]["namespace"] == "default"
    (container,) = directory_job(props)["spec"]["template"]["spec"]["containers"]
    return str(container["command"][-1])


def full_tree() -> Tree:
    tree: Tree = {}
    for team in TEAMS:
        tree.update(platform_tree(platform_script(team)))
    return tree


def test_pods_run_as_their_teams_user_and_group() -> None:
    process = pod_process("research")
    assert process.uid == team_uid("research") != 0
    assert process.groups == {team_gid("research")}


def test_the_platform_leaves_each_team_its_own_directories() -> None:
    tree = full_tree()
    assert tree[f"{FSX_MOUNT}/teams"] == Inode(0, 0, 0o755)
    for team in TEAMS:
        for path in (
            team_directory(team),
            team_runs_directory(team),
            team_checkpoints_directory(team),
        ):
            assert tree[path] == Inode(team_uid(team), team_gid(team), 0o2770), path


@pytest.mark.parametrize("team", TEAMS)
def test_a_job_creates_its_directories_and_they_stay_its_teams(team: str) -> None:
    tree = full_tree()
    job = make_spec(team=team)
    process = pod_process(team)
    durable = JobPlan(job).tier_dir("durable")
    for path in (JobPlan(job).out_dir, durable):
        assert make_directory(tree, path, process), path
        # setgid: what the job creates belongs to the team's group, setgid in turn.
        assert tree[path].gid == team_gid(team)
        assert tree[path].mode & stat.S_ISGID
    # The job's own directory takes its files (the trainer's step directories).
    assert make_directory(tree, f"{durable}/step_00000100", process)


def test_a_job_cannot_write_or_read_another_teams_directories() -> None:
    tree = full_tree()
    research = pod_process("research")
    for path in (team_runs_directory("sandbox"), team_checkpoints_directory("sandbox")):
        assert not make_directory(tree, f"{path}/stolen", research)
        assert not allowed(tree[path], research, 4)
    # Nor add directories beside the teams'.
    assert not make_directory(tree, f"{FSX_MOUNT}/teams/other", research)
    assert not make_directory(tree, f"{FSX_MOUNT}/runs", research)


@pytest.mark.parametrize(
    "planted",
    [
        Inode(team_uid("sandbox"), team_gid("sandbox"), 0o2770),  # another team's
        Inode(0, TEAM_GID_BASE, 0o2770),  # a group nobody's pods carry
        Inode(0, team_gid("research"), 0o2750),  # the group cannot write
        Inode(team_uid("sandbox"), TEAM_GID_BASE, 0o2700),  # another team's user alone
        Inode(0, 0, 0o2775),  # root's group
    ],
)
def test_a_wrong_owner_or_mode_fails_the_check(planted: Inode) -> None:
    tree = full_tree()
    runs = team_runs_directory("research")
    tree[runs] = planted
    path = f"{runs}/llama-8b"
    ok = make_directory(tree, path, pod_process("research"))
    assert not (ok and tree[path].gid == team_gid("research"))


def test_the_script_is_idempotent() -> None:
    script = platform_script("research")
    assert platform_tree(script + script) == platform_tree(script)


def test_only_the_named_directories_change() -> None:
    # Never recursive: a rerun must not walk (or take back) what jobs wrote.
    script = directory_script(1234, 1234, ("/fsx/teams/x",))
    assert "-R" not in script and "find" not in script


def test_team_groups_are_stable_and_clear_of_the_image_and_system_groups() -> None:
    assert team_gid("research") == team_gid("research") != team_gid("sandbox")
    for team in ("a", "research", "sandbox", "r" * 40):
        assert TEAM_GID_BASE <= team_gid(team) < TEAM_GID_BASE + TEAM_GID_SPAN
    # Above nobody (65534), login users and the image's own user (10001).
    assert TEAM_GID_BASE > 65534
    assert team_uid("research") == team_gid("research")
    assert list(team_gids(["b", "a"])) == ["b", "a"]


def test_teams_that_hash_to_one_group_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("config.team_groups.team_gid", lambda team: TEAM_GID_BASE)
    with pytest.raises(ValueError, match="teams a and b hash to the same group"):
        team_gids(["a", "b"])


# ------------------------------------------------------------------ what a team's pods mount

FILE_SYSTEM = LustreFileSystem(
    file_system_id="fs-0123456789abcdef0",
    arn="arn:aws:fsx:us-east-1:111111111111:file-system/fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    mount_name="abcdefgh",
    capacity_gib=1200,
    data_path="/data",
)


def team_volumes() -> list[dict[str, Any]]:
    """The PersistentVolumes the governance stack's volume construct applies for TEAMS."""
    stack = bare_stack("Volumes")
    volume = FsxStaticVolume(
        stack, "Fsx", cluster=imported_cluster(stack), file_system=FILE_SYSTEM, namespaces=()
    )
    for team in TEAMS:
        volume.add_team(team_namespace(team), team_directory(team))
    objects = kubernetes_objects(template_of(stack).to_json())
    return [o for o in objects if o["kind"] == "PersistentVolume"]


def mounted(team: str, manifest: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Where the pods of `manifest`, run in `team`'s namespace, see which directory of the
    file system: pod path -> (file system path, read-only). A claim binds only the PV whose
    claimRef names it in the pod's own namespace."""
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    volumes = {
        (v["spec"]["claimRef"]["namespace"], v["spec"]["claimRef"]["name"]): v
        for v in team_volumes()
    }
    seen = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        if mount["name"] not in claims:
            continue
        volume = volumes[(team_namespace(team), claims[mount["name"]])]
        csi = volume["spec"]["csi"]
        mount_name = csi["volumeAttributes"]["mountname"]
        assert mount_name.startswith(FILE_SYSTEM.mount_name)
        path = mount_name.removeprefix(FILE_SYSTEM.mount_name) or "/"
        seen[mount["mountPath"]] = (path, "ro" in volume["spec"]["mountOptions"])
    return seen


@pytest.mark.parametrize("team", TEAMS)
def test_a_teams_pods_mount_its_own_tree_and_the_data_read_only(team: str) -> None:
    assert mounted(team, render_job(make_spec(team=team))) == {
        team_directory(team): (f"/teams/{team}", False),
        DATA_MOUNT: ("/data", True),
    }


def test_no_claim_of_a_team_namespace_reaches_another_teams_tree() -> None:
    for volume in team_volumes():
        namespace = volume["spec"]["claimRef"]["namespace"]
        path = volume["spec"]["csi"]["volumeAttributes"]["mountname"].removeprefix("abcdefgh")
        (team,) = (t for t in TEAMS if team_namespace(t) == namespace)
        assert path in (f"/teams/{team}", "/data")


def test_a_job_naming_another_claim_still_mounts_only_its_namespaces() -> None:
    # Claims are namespaced: a research job that names any claim gets research's volumes or
    # none (an unbound claim never starts the pod).
    manifest = render_job(make_spec(team="research", fsx_claim="fsx-data"))
    assert mounted("research", manifest) == {
        team_directory("research"): ("/data", True),
        DATA_MOUNT: ("/data", True),
    }


def test_the_volumes_of_one_namespace_have_handles_of_their_own() -> None:
    # One pod mounts both: one handle would hang it (kubernetes/kubernetes#132921).
    for team in TEAMS:
        handles = [
            v["spec"]["csi"]["volumeHandle"]
            for v in team_volumes()
            if v["spec"]["claimRef"]["namespace"] == team_namespace(team)
        ]
        assert len(set(handles)) == len(handles) == 2
