"""Behaviour of lifecycle/on_create.sh, run against a sandboxed node with stubbed commands."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from tests.lifecycle.conftest import (
    AL2_CONTAINERD_TOML,
    EBS_MOUNT,
    INSTANCE_STORE_MOUNT,
    NODEADM_CONTAINERD_TOML,
)

LIFECYCLE_SRC = Path(__file__).resolve().parents[2] / "lifecycle"

TIMESTAMPED = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} \[(INFO|WARN|ERROR)\] \[[a-z_]+\] "
)
KUBELET_FSTAB = (
    "/opt/sagemaker/kubelet /var/lib/kubelet none "
    "bind,nofail,x-systemd.requires-mounts-for=/opt/sagemaker 0 0"
)
DATA_ROOT = "/opt/sagemaker/containerd/data-root"
OWN_CONFIG = "/etc/containerd/hyperpod-lifecycle-config.toml"
CONTAINERD_DROPIN = "/etc/systemd/system/containerd.service.d/50-lifecycle-storage.conf"
KUBELET_DROPIN = "/etc/systemd/system/kubelet.service.d/50-lifecycle-storage.conf"
AL2_TEMPLATE = "/etc/eks/containerd/containerd-config.toml"


def assert_no_network_tools(sandbox):
    used = sorted({c[0] for c in sandbox.calls() if c[0] in sandbox.network_tools})
    assert used == [], f"network tools invoked: {used}"


def error_lines(sandbox):
    return [line for line in sandbox.log_text().splitlines() if "[ERROR]" in line]


def index_of(lines, wanted):
    assert wanted in lines, f"{wanted!r} not called; calls were:\n" + "\n".join(lines)
    return lines.index(wanted)


def containerd_root(sandbox, path):
    return tomllib.loads(sandbox.read(path))["root"]


# --- success paths --------------------------------------------------------------


@pytest.mark.parametrize("image", ["al2023", "al2"])
def test_gpu_node_with_ebs_volume_and_instance_store_uses_the_ebs_volume(sandbox, image):
    """The sandbox's default node: a GPU node (p5) with the group's EBS volume at
    /opt/sagemaker and its instance store at /opt/dlami/nvme."""
    sandbox.set_os(image)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout + result.stderr
    root = sandbox.root

    dropin = sandbox.read(CONTAINERD_DROPIN)
    assert "RequiresMountsFor=/opt/sagemaker" in dropin
    if image == "al2023":
        # nodeadm rewrites /etc/containerd/config.toml at every boot: it stays as nodeadm
        # wrote it, and containerd starts from the scripts' own copy with the new root.
        assert sandbox.read("/etc/containerd/config.toml") == NODEADM_CONTAINERD_TOML
        own = tomllib.loads(sandbox.read(OWN_CONFIG))
        nodeadm = tomllib.loads(NODEADM_CONTAINERD_TOML)
        assert own["root"] == DATA_ROOT
        assert {k: v for k, v in own.items() if k != "root"} == {
            k: v for k, v in nodeadm.items() if k != "root"
        }
        assert dropin.splitlines()[-3:] == [
            "[Service]",
            "ExecStart=",
            f"ExecStart=/usr/bin/containerd --config {OWN_CONFIG}",
        ]
        assert not sandbox.path(AL2_TEMPLATE).exists()
    else:
        toml = tomllib.loads(sandbox.read(AL2_TEMPLATE))
        assert toml["root"] == DATA_ROOT
        assert toml["state"] == "/run/containerd"
        assert (
            toml["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
            == "nvidia"
        )
        assert sandbox.read(AL2_TEMPLATE + ".pre-lifecycle") == AL2_CONTAINERD_TOML
        # The bootstrap's copy of the template, not the scripts' own file, is used.
        assert "[Service]" not in dropin
        assert not sandbox.path(OWN_CONFIG).exists()
    # Pre-loaded images were copied to the new root.
    assert (
        root / DATA_ROOT.lstrip("/") / "io.containerd.content.v1.content/blobs/sha256/pause"
    ).read_text() == "pause"

    # kubelet: AMI files copied, bind mount applied and persisted, unit ordered after it.
    assert (root / "opt/sagemaker/kubelet/kubeconfig").read_text() == "apiVersion: v1\n"
    fstab = sandbox.read("/etc/fstab").splitlines()
    assert fstab == ["UUID=0b7a-root / xfs defaults,noatime 1 1", KUBELET_FSTAB]
    assert "RequiresMountsFor=/var/lib/kubelet" in sandbox.read(KUBELET_DROPIN)

    calls = sandbox.call_lines()
    data, kubelet = sandbox.path("/opt/sagemaker"), sandbox.path("/var/lib/kubelet")
    stop_c, start_c = (
        index_of(calls, "systemctl stop containerd"),
        index_of(calls, "systemctl start containerd"),
    )
    stop_k, start_k = (
        index_of(calls, "systemctl stop kubelet"),
        index_of(calls, "systemctl start kubelet"),
    )
    mount = index_of(calls, f"mount --bind {data}/kubelet {kubelet}")
    assert stop_c < start_c < stop_k < mount < start_k
    assert "systemctl daemon-reload" in calls[stop_c:start_c]

    # Lustre without EFA: modules only, no LNet configuration.
    assert "modprobe lustre" in calls
    assert not any(c.startswith("lnetctl") for c in calls)
    assert sandbox.read("/etc/modules-load.d/lustre-lifecycle.conf") == "lustre\n"
    modprobe_conf = sandbox.read("/etc/modprobe.d/lustre-lifecycle.conf")
    assert "options ptlrpc ptlrpcd_per_cpt_max=64" in modprobe_conf
    assert "kefalnd" not in modprobe_conf

    # Logged to stdout and to the file HyperPod uploads, every line timestamped.
    log = sandbox.log_text().splitlines()
    assert log and all(TIMESTAMPED.match(line) for line in log), log
    assert log == result.stdout.splitlines()
    assert "data volume: the EBS volume at /opt/sagemaker" in sandbox.log_text()
    assert not sandbox.path(INSTANCE_STORE_MOUNT + "/containerd").exists()
    assert f"OS image {image}" in sandbox.log_text()
    assert "[stop] on_create.sh completed" in log[-1]
    assert_no_network_tools(sandbox)


# Where containerd and kubelet go for each disk layout: (EBS volume, instance store, data
# volume). None: the root volume.
LAYOUTS = {
    "ebs-only": (True, False, EBS_MOUNT),
    "instance-store-only": (False, True, INSTANCE_STORE_MOUNT),
    "both": (True, True, EBS_MOUNT),
    "neither": (False, False, None),
}


@pytest.mark.parametrize("gpus", [8, 0], ids=["gpu", "cpu"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_disk_layout_boots(sandbox, layout, gpus):
    """No layout fails a node, GPU or not; the data volume is the EBS volume when mounted,
    else the instance store, else the root volume; a second run changes nothing."""
    ebs, instance_store, data_volume = LAYOUTS[layout]
    sandbox.set_nvidia_gpus(gpus)
    sandbox.set_layout(ebs=ebs, instance_store=instance_store)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout + result.stderr
    calls = sandbox.call_lines()
    assert "sleep 5" not in calls  # every attached volume is mounted: nothing to wait for
    log = sandbox.log_text()
    if data_volume is None:
        assert (
            "[WARN] [data_volume] neither an EBS volume at /opt/sagemaker nor the instance" in log
        )
        assert "containerd and kubelet stay on the root volume" in log
        assert sandbox.read("/etc/containerd/config.toml") == NODEADM_CONTAINERD_TOML
        assert not sandbox.path(OWN_CONFIG).exists()
        assert not sandbox.path(CONTAINERD_DROPIN).exists()
        assert sandbox.read("/etc/fstab") == "UUID=0b7a-root / xfs defaults,noatime 1 1\n"
        assert not any(c.startswith(("mount ", "systemctl stop")) for c in calls)
    else:
        data_root = f"{data_volume}/containerd/data-root"
        assert containerd_root(sandbox, OWN_CONFIG) == data_root
        assert f"RequiresMountsFor={data_volume}" in sandbox.read(CONTAINERD_DROPIN)
        assert sandbox.read(data_root + "/io.containerd.content.v1.content/blobs/sha256/pause")
        assert sandbox.read("/etc/fstab").splitlines()[-1] == (
            f"{data_volume}/kubelet /var/lib/kubelet none "
            f"bind,nofail,x-systemd.requires-mounts-for={data_volume} 0 0"
        )
        kubelet = sandbox.path("/var/lib/kubelet")
        assert f"mount --bind {sandbox.path(data_volume)}/kubelet {kubelet}" in calls
        assert sandbox.read(f"{data_volume}/kubelet/kubeconfig") == "apiVersion: v1\n"
        for other in {EBS_MOUNT, INSTANCE_STORE_MOUNT} - {data_volume}:
            assert list(sandbox.path(other).iterdir()) == []
    assert "[stop] on_create.sh completed" in log.splitlines()[-1]

    after_first = sandbox.tree_hash()
    sandbox.reset_calls()
    assert sandbox.run().returncode == 0
    assert sandbox.tree_hash() == after_first
    assert not any(c.startswith(("systemctl stop", "mount ")) for c in sandbox.call_lines())


def test_success_with_efa_configures_lnet(sandbox):
    sandbox.write_config(
        fsx_efa_enabled=True,
        lustre_tuning={"max_dirty_mb": 2048, "at_max": 600},
        lustre_ping_nids=["10.1.2.3@efa"],
    )
    result = sandbox.run()
    assert result.returncode == 0, result.stdout + result.stderr

    modprobe_conf = sandbox.read("/etc/modprobe.d/lustre-lifecycle.conf").splitlines()
    assert "options kefalnd ipif_name=ens5" in modprobe_conf
    assert "options ptlrpc ptlrpcd_per_cpt_max=64" in modprobe_conf

    calls = sandbox.call_lines()
    efa_adds = [c for c in calls if c.startswith("lnetctl net add --net efa")]
    assert efa_adds == [
        f"lnetctl net add --net efa --if rdmap0{i}s0 --peer-credits 32" for i in range(4)
    ]
    order = [
        "modprobe lnet",
        "modprobe kefalnd",
        "modprobe ksocklnd",
        "lnetctl lnet configure",
        "lnetctl net add --net tcp --if ens5",
        efa_adds[0],
        "lnetctl udsp add --src efa --priority 0",
        "lnetctl set discovery 1",
        "modprobe lustre",
        "lctl set_param at_max=600",
        "lctl set_param max_dirty_mb=2048",
        "lctl ping 10.1.2.3@efa",
    ]
    positions = [index_of(calls, c) for c in order]
    assert positions == sorted(positions)
    assert_no_network_tools(sandbox)


def test_efa_devices_are_spread_and_interface_override_is_used(sandbox):
    sandbox.set_efa_devices(32)
    sandbox.write_config(fsx_efa_enabled=True, lnet_efa_max_interfaces=8, lnet_tcp_interface="eth7")
    assert sandbox.run().returncode == 0
    calls = sandbox.call_lines()
    assert [c.split()[6] for c in calls if c.startswith("lnetctl net add --net efa")] == [
        f"rdmap{i:02d}s0" for i in range(0, 32, 4)
    ]
    assert "lnetctl net add --net tcp --if eth7" in calls
    assert not any(c.startswith("ip ") for c in calls)
    assert "options kefalnd ipif_name=eth7" in sandbox.read("/etc/modprobe.d/lustre-lifecycle.conf")


def test_al2_live_config_is_updated_too_and_idle_units_are_not_started(sandbox):
    sandbox.set_os("al2")
    # No top-level root yet, a commented one, and a table-level `root` that must stay.
    sandbox.write(
        "/etc/containerd/config.toml",
        (
            'version = 2\n# root = "/old"\n\n[grpc]\naddress = "/run/x.sock"\n\n'
            '[plugins."io.containerd.runtime.v1.linux"]\nroot = "/run/runc-root"\n'
        ),
    )
    result = sandbox.run(STUB_ACTIVE_UNITS="")
    assert result.returncode == 0, result.stdout
    live = sandbox.read("/etc/containerd/config.toml")
    parsed = tomllib.loads(live)
    assert parsed["root"] == DATA_ROOT
    assert parsed["plugins"]["io.containerd.runtime.v1.linux"]["root"] == "/run/runc-root"
    assert '# root = "/old"' in live
    assert live.index('root = "/opt') < live.index("[grpc]")
    assert containerd_root(sandbox, AL2_TEMPLATE) == DATA_ROOT
    calls = sandbox.call_lines()
    assert not any(re.match(r"systemctl (stop|start|restart) ", c) for c in calls)


def test_al2023_containerd_v3_config_gets_the_root_too(sandbox):
    """containerd 2 on Amazon Linux 2023: nodeadm writes a version 3 config; `root` is a
    top-level key there too."""
    v3 = NODEADM_CONTAINERD_TOML.replace("version = 2", "version = 3").replace(
        '"io.containerd.grpc.v1.cri"', '"io.containerd.cri.v1.runtime"'
    )
    sandbox.write("/etc/containerd/config.toml", v3)
    assert sandbox.run().returncode == 0
    own = tomllib.loads(sandbox.read(OWN_CONFIG))
    assert (own["version"], own["root"]) == (3, DATA_ROOT)
    assert sandbox.read("/etc/containerd/config.toml") == v3


def test_root_volume_only_node_still_runs_the_lustre_step(sandbox):
    sandbox.set_layout(ebs=False, instance_store=False)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert "modprobe lustre" in sandbox.call_lines()


def test_ebs_volume_not_yet_mounted_is_waited_for_then_the_instance_store_is_used(sandbox):
    """Both attached, the EBS volume never mounted: wait for it, then take the instance
    store (already mounted, so no further wait)."""
    sandbox.set_mounted(INSTANCE_STORE_MOUNT)
    sandbox.write_config(mount_wait_seconds=10)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert sandbox.call_lines().count("sleep 5") == 2
    log = sandbox.log_text()
    assert "waiting for /opt/sagemaker to be mounted" in log
    assert "/opt/sagemaker is not mounted after 10s although its disks are attached" in log
    assert "data volume: the instance store at /opt/dlami/nvme" in log
    assert containerd_root(sandbox, OWN_CONFIG) == "/opt/dlami/nvme/containerd/data-root"


def test_gpu_node_whose_volumes_never_mount_stays_on_the_root_volume(sandbox):
    """Disks attached but nothing mounted within mount_wait_seconds: one shared wait, a WARN
    line, and the node still joins."""
    sandbox.set_mounted()
    sandbox.write_config(mount_wait_seconds=10)
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert sandbox.call_lines().count("sleep 5") == 2
    assert "stay on the root volume" in sandbox.log_text()
    assert not sandbox.path(OWN_CONFIG).exists()


def test_data_left_by_an_earlier_root_volume_is_replaced(sandbox):
    """An AMI update replaces the root volume but keeps a secondary EBS volume: what the
    previous image left under /opt/sagemaker is removed and seeded again, once."""
    sandbox.write(DATA_ROOT + "/io.containerd.metadata.v1.bolt/meta.db", "old image")
    sandbox.write("/opt/sagemaker/kubelet/pods/old-pod", "old pod")
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert not sandbox.path(DATA_ROOT + "/io.containerd.metadata.v1.bolt").exists()
    assert not sandbox.path("/opt/sagemaker/kubelet/pods").exists()
    assert sandbox.path(DATA_ROOT + "/io.containerd.content.v1.content/blobs/sha256/pause")
    log = sandbox.log_text()
    assert f"{DATA_ROOT} was left by an earlier root volume: removing it" in log
    assert "/opt/sagemaker/kubelet was left by an earlier root volume" in log
    # What this root volume seeded stays: a second run keeps the data.
    sandbox.write(DATA_ROOT + "/new-layer", "pulled after the first run")
    sandbox.run()
    assert sandbox.read(DATA_ROOT + "/new-layer") == "pulled after the first run"


def test_steps_can_be_switched_off(sandbox):
    sandbox.write_config(
        containerd_on_data_volume=False, kubelet_on_data_volume=False, lustre_enabled=False
    )
    before = sandbox.tree_hash()
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert sandbox.tree_hash() == before
    assert sandbox.calls() == []


def test_unknown_config_field_is_a_warning(sandbox):
    config = json.loads(sandbox.config_path.read_text())
    config["cluster_name"] = "demo"
    sandbox.config_path.write_text(json.dumps(config))
    result = sandbox.run()
    assert result.returncode == 0, result.stdout
    assert "[WARN] [main] config: unknown field 'cluster_name' ignored" in sandbox.log_text()


def test_stderr_reaches_the_uploaded_log(sandbox):
    """What a command prints on stderr outside `run` (here cp, backing up /etc/fstab) lands
    in /var/log/provision/provisioning.log, the file HyperPod ships to CloudWatch."""
    result = sandbox.run(STUB_FAIL="cp -p *")
    assert result.returncode != 0
    log = sandbox.log_text()
    assert "stub: simulated failure of: cp -p" in log
    assert "stub: simulated failure of: cp -p" in result.stderr
    assert "[stop] on_create.sh failed" in error_lines(sandbox)[-1]


# --- idempotence -----------------------------------------------------------------


@pytest.mark.parametrize("efa", [False, True], ids=["tcp", "efa"])
def test_second_run_changes_nothing(sandbox, efa):
    sandbox.write_config(fsx_efa_enabled=efa)
    first = sandbox.run()
    assert first.returncode == 0, first.stdout + first.stderr
    after_first = sandbox.tree_hash()
    sandbox.reset_calls()

    second = sandbox.run()
    assert second.returncode == 0, second.stdout + second.stderr
    assert sandbox.tree_hash() == after_first
    assert sandbox.read("/etc/fstab").count("/var/lib/kubelet") == 1
    assert sandbox.log_text().count("[start] on_create.sh") == 2  # appended, not truncated
    calls = sandbox.call_lines()
    assert not any(
        re.match(r"(systemctl (stop|start|daemon-reload)|mount |lnetctl (net add|udsp))", c)
        for c in calls
    ), calls
    assert_no_network_tools(sandbox)


# --- failure paths ---------------------------------------------------------------

STORAGE_FAILURES = [
    # (command that fails, text the ERROR line must contain)
    ("lsblk -d *", "'lsblk -d -n -o MODEL' failed"),
    ("systemctl stop containerd", "'systemctl stop containerd' failed"),
    ("systemctl daemon-reload", "'systemctl daemon-reload' failed"),
    ("systemctl start containerd", "'systemctl start containerd' failed"),
    ("systemctl stop kubelet", "'systemctl stop kubelet' failed"),
    ("mount --bind *", "'mount --bind"),
    ("systemctl start kubelet", "'systemctl start kubelet' failed"),
]


@pytest.mark.parametrize("pattern,message", STORAGE_FAILURES, ids=[c[0] for c in STORAGE_FAILURES])
def test_failing_storage_command_stops_the_script(sandbox, pattern, message):
    result = sandbox.run(STUB_FAIL=pattern, STUB_FAIL_RC=7)
    assert result.returncode != 0
    errors = error_lines(sandbox)
    assert any(message in line and "(exit 7)" in line for line in errors), errors
    assert "[stop] on_create.sh failed" in errors[-1]
    assert "simulated failure" in sandbox.log_text()  # the command's own output is logged
    assert_no_network_tools(sandbox)


# Lustre-step failures skip the storage steps: they are covered above and only slow the run
# down.
LUSTRE = {"containerd_on_data_volume": False, "kubelet_on_data_volume": False}
EFA = dict(LUSTRE, fsx_efa_enabled=True)

LUSTRE_FAILURES = [
    # (command that fails, config overrides, text the ERROR line must contain)
    ("modprobe lustre", LUSTRE, "'modprobe lustre' failed"),
    ("modprobe lnet", EFA, "'modprobe lnet' failed"),
    ("modprobe kefalnd", EFA, "'modprobe kefalnd' failed"),
    ("ip *", EFA, "'ip -o -4 route show default' failed"),
    ("lnetctl lnet configure", EFA, "'lnetctl lnet configure' failed"),
    ("lnetctl net show", EFA, "'lnetctl net show' failed"),
    ("lnetctl net add --net tcp *", EFA, "'lnetctl net add --net tcp --if ens5' failed"),
    ("lnetctl net add --net efa *", EFA, "'lnetctl net add --net efa --if rdmap00s0"),
    ("lnetctl udsp *", EFA, "'lnetctl udsp add --src efa --priority 0' failed"),
    ("lnetctl set discovery *", EFA, "'lnetctl set discovery 1' failed"),
    (
        "lctl set_param *",
        dict(LUSTRE, lustre_tuning={"max_dirty_mb": 2048}),
        "'lctl set_param max_dirty_mb=2048' failed",
    ),
    (
        "lctl ping *",
        dict(LUSTRE, lustre_ping_nids=["10.1.2.3@tcp"]),
        "'lctl ping 10.1.2.3@tcp' failed",
    ),
]


def assert_lustre_failed_best_effort(sandbox, result, message):
    """The node still provisions (exit 0, no wait for the upload) and its log says, in ERROR
    lines, what failed and what the node lacks."""
    assert result.returncode == 0, result.stdout
    errors = error_lines(sandbox)
    assert any(message in line for line in errors), errors
    assert any(
        "[lustre] step failed" in line and "FSx for Lustre volumes will not mount" in line
        for line in errors
    ), errors
    assert errors[-1].endswith(
        "[main] [stop] on_create.sh completed; failed best-effort steps: lustre"
    ), errors
    assert not any(c.startswith("sleep") for c in sandbox.call_lines())


@pytest.mark.parametrize(
    "pattern,overrides,message", LUSTRE_FAILURES, ids=[c[0] for c in LUSTRE_FAILURES]
)
def test_failing_lustre_command_is_logged_and_the_node_still_joins(
    sandbox, pattern, overrides, message
):
    """A Lustre failure would repeat on every replacement node (the AMI's modules, the
    group's EFA setup), so failing on_create would only loop node replacements: like the
    AWS sample script, the step is best effort."""
    sandbox.write_config(**overrides)
    result = sandbox.run(STUB_FAIL=pattern, STUB_FAIL_RC=7)
    assert_lustre_failed_best_effort(sandbox, result, message)
    assert any(message in line and "(exit 7)" in line for line in error_lines(sandbox))
    assert "simulated failure" in sandbox.log_text()
    assert_no_network_tools(sandbox)


def efa_enabled_without_devices(s):
    s.set_efa_devices(0)
    s.write_config(**EFA)


def efa_enabled_without_default_route(s):
    s.write_config(**EFA)
    s.env["STUB_IP_ROUTE"] = ""


LUSTRE_ENVIRONMENT_FAILURES = [
    (efa_enabled_without_devices, "no EFA device exists under /sys/class/infiniband"),
    (efa_enabled_without_default_route, "no default-route interface found"),
]


@pytest.mark.parametrize(
    "setup,message",
    LUSTRE_ENVIRONMENT_FAILURES,
    ids=[f.__name__ for f, _ in LUSTRE_ENVIRONMENT_FAILURES],
)
def test_lustre_step_on_an_unsuitable_node_is_best_effort(sandbox, setup, message):
    setup(sandbox)
    assert_lustre_failed_best_effort(sandbox, sandbox.run(), message)


def test_lustre_failure_after_the_storage_steps_leaves_services_alone(sandbox):
    result = sandbox.run(STUB_FAIL="modprobe lustre")
    assert result.returncode == 0, result.stdout
    calls = sandbox.call_lines()
    # Each unit was stopped and started exactly once by its own step, and the storage
    # steps' work stays.
    assert calls.count("systemctl start containerd") == 1
    assert calls.count("systemctl start kubelet") == 1
    assert "starting" not in sandbox.log_text()
    assert containerd_root(sandbox, OWN_CONFIG) == DATA_ROOT


def test_failure_waits_for_log_upload(sandbox):
    result = sandbox.run(STUB_FAIL="mount --bind *", LIFECYCLE_FAILURE_DELAY_SECONDS=60)
    assert result.returncode != 0
    calls = sandbox.call_lines()
    assert calls[-2:] == ["sync", "sleep 60"]


SERVICE_WINDOW_FAILURES = [
    # (command failing while a unit is stopped, the unit, the command that failed)
    ("cp -a *", "containerd", "cp -a --one-file-system"),
    ("systemctl daemon-reload", "containerd", "systemctl daemon-reload"),
    ("cp -a --one-file-system */var/lib/kubelet *", "kubelet", "cp -a --one-file-system"),
    ("mount --bind *", "kubelet", "mount --bind"),
]


@pytest.mark.parametrize(
    "pattern,unit,failed", SERVICE_WINDOW_FAILURES, ids=[c[0] for c in SERVICE_WINDOW_FAILURES]
)
def test_failure_while_a_service_is_stopped_starts_it_again(sandbox, pattern, unit, failed):
    result = sandbox.run(STUB_FAIL=pattern, STUB_FAIL_RC=7)
    assert result.returncode != 0
    calls = sandbox.call_lines()
    stop = index_of(calls, f"systemctl stop {unit}")
    failure = max(i for i, c in enumerate(calls) if c.startswith(failed))
    assert stop < failure
    # Started again after the failure, once, and before the wait for the log upload.
    assert calls[failure + 1 :] == [f"systemctl start {unit}", "sync", "sleep 0"], calls
    log = sandbox.log_text()
    assert f"failure while {unit} was stopped: starting {unit} again" in log
    assert f"started {unit} again" in log
    assert "[stop] on_create.sh failed" in error_lines(sandbox)[-1]


def test_service_that_does_not_start_again_is_logged(sandbox):
    result = sandbox.run(STUB_FAIL="mount --bind *;systemctl start kubelet", STUB_FAIL_RC=7)
    assert result.returncode != 0
    assert sandbox.call_lines()[-3:] == ["systemctl start kubelet", "sync", "sleep 0"]
    errors = error_lines(sandbox)
    assert any("could not start kubelet again (exit 7)" in line for line in errors), errors
    assert "[stop] on_create.sh failed" in errors[-1]


def test_init_failure_still_waits_for_log_upload(sandbox):
    # lifecycle_init rejects the sandbox root before the log file exists.
    result = sandbox.run(LIFECYCLE_ROOT="relative/dir", LIFECYCLE_FAILURE_DELAY_SECONDS=60)
    assert result.returncode != 0
    assert sandbox.call_lines() == ["sync", "sleep 60"]
    assert "[stop] on_create.sh failed with exit 1" in result.stdout.splitlines()[-1]


def test_not_running_as_root_still_waits_for_log_upload(tmp_path):
    """The real root check, with no sandbox root: run as an unprivileged user."""
    prefix = Path(tempfile.mkdtemp(prefix="lifecycle-nonroot-"))
    try:
        prefix.chmod(0o755)
        shutil.copytree(
            LIFECYCLE_SRC, prefix / "lifecycle", ignore=shutil.ignore_patterns("__pycache__")
        )
        bin_dir = prefix / "bin"
        bin_dir.mkdir()
        calls = prefix / "calls.log"
        calls.touch()
        calls.chmod(0o666)
        for name in ("sync", "sleep"):
            stub = bin_dir / name
            stub.write_text(f'#!/usr/bin/env bash\necho "{name} $*" >>"{calls}"\n')
            stub.chmod(0o755)
        command = ["bash", str(prefix / "lifecycle/on_create.sh")]
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            # util-linux ships setpriv on every Debian-based machine this project runs on.
            assert setpriv is not None, (
                "running as root needs setpriv (util-linux) to drop privileges"
            )
            command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        env = {
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LIFECYCLE_FAILURE_DELAY_SECONDS": "60",
        }
        result = subprocess.run(
            command, cwd=prefix, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0
        lines = result.stdout.splitlines()
        assert any("[ERROR] [init] must run as root" in line for line in lines), (
            result.stdout + result.stderr
        )
        assert "[stop] on_create.sh failed with exit 1" in lines[-1]
        assert calls.read_text().splitlines() == ["sync ", "sleep 60"]
    finally:
        shutil.rmtree(prefix)


def al2023_without_nodeadm_config(s):
    s.path("/etc/containerd/config.toml").unlink()


def al2_without_bootstrap_template(s):
    s.set_os("al2")
    s.path(AL2_TEMPLATE).unlink()
    s.write("/etc/containerd/config.toml", AL2_CONTAINERD_TOML)


def unsupported_os_image(s):
    s.write("/etc/os-release", 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n')


def kubelet_dir_is_symlink(s):
    shutil.rmtree(s.path("/var/lib/kubelet"))
    s.write("/var/lib/kubelet.real/kubeconfig", "")
    s.path("/var/lib/kubelet").symlink_to("kubelet.real")


def config_file_missing(s):
    s.config_path.unlink()


ENVIRONMENT_FAILURES = [
    # (node setup, text the ERROR line must contain)
    (
        al2023_without_nodeadm_config,
        "Amazon Linux 2023 without /etc/containerd/config.toml: nodeadm has not configured",
    ),
    (al2_without_bootstrap_template, f"Amazon Linux 2 without {AL2_TEMPLATE}"),
    (unsupported_os_image, "unsupported OS image ID=ubuntu VERSION_ID=22.04"),
    (kubelet_dir_is_symlink, "/var/lib/kubelet is a symlink"),
    (config_file_missing, "config file not found"),
]
# Found before containerd or kubelet is touched: the node is left as the AMI made it.
FAILS_BEFORE_ANY_CHANGE = {
    al2023_without_nodeadm_config,
    al2_without_bootstrap_template,
    unsupported_os_image,
    config_file_missing,
}


@pytest.mark.parametrize(
    "setup,message", ENVIRONMENT_FAILURES, ids=[f.__name__ for f, _ in ENVIRONMENT_FAILURES]
)
def test_unusable_node_fails_loudly(sandbox, setup, message):
    """Exit non-zero with the reason in an ERROR line of the uploaded log, then wait for the
    upload: HyperPod reports the instance as failed and names the CloudWatch stream."""
    setup(sandbox)
    before = sandbox.tree_hash()
    result = sandbox.run()
    assert result.returncode != 0
    errors = error_lines(sandbox)
    assert any(message in line for line in errors), errors
    assert "[stop] on_create.sh failed" in errors[-1]
    assert sandbox.call_lines()[-2:] == ["sync", "sleep 0"]
    if setup in FAILS_BEFORE_ANY_CHANGE:
        assert sandbox.tree_hash() == before
        assert not any(c.startswith("systemctl stop") for c in sandbox.call_lines())
    assert_no_network_tools(sandbox)


def test_relative_sandbox_root_is_rejected(sandbox):
    result = sandbox.run(LIFECYCLE_ROOT="relative/dir")
    assert result.returncode != 0
    assert "LIFECYCLE_ROOT must be an existing absolute directory" in result.stdout


MISSING = object()
MINIMAL_CONFIG = {
    "containerd_on_data_volume": True,
    "kubelet_on_data_volume": True,
    "fsx_efa_enabled": False,
}

BAD_CONFIGS = [
    # (id, config text or changes to MINIMAL_CONFIG, text of the error)
    ("not-json", "{containerd_on_data_volume: ", "not valid JSON"),
    ("not-object", "[]", "top level must be a JSON object"),
    (
        "missing-containerd_on_data_volume",
        {"containerd_on_data_volume": MISSING},
        "'containerd_on_data_volume': is required",
    ),
    (
        "missing-kubelet_on_data_volume",
        {"kubelet_on_data_volume": MISSING},
        "'kubelet_on_data_volume': is required",
    ),
    ("missing-fsx_efa_enabled", {"fsx_efa_enabled": MISSING}, "'fsx_efa_enabled': is required"),
    (
        "string-bool",
        {"containerd_on_data_volume": "true"},
        "'containerd_on_data_volume': must be a boolean",
    ),
    ("int-bool", {"kubelet_on_data_volume": 1}, "'kubelet_on_data_volume': must be a boolean"),
    (
        "null-bool",
        {"fsx_efa_enabled": None},
        "'fsx_efa_enabled': must be a boolean (true/false), got null",
    ),
    (
        "relative-path",
        {"ebs_volume_mount_point": "opt/sagemaker"},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    (
        "dotdot-path",
        {"ebs_volume_mount_point": "/opt/../etc"},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    ("root-path", {"ebs_volume_mount_point": "/"}, "'ebs_volume_mount_point': must be an absolute"),
    (
        "dot-path",
        {"instance_store_mount_point": "/."},
        "'instance_store_mount_point': must be an absolute path",
    ),
    (
        "dot-segment-path",
        {"ebs_volume_mount_point": "/opt/./sagemaker"},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    (
        "trailing-dot-path",
        {"ebs_volume_mount_point": "/opt/sagemaker/."},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    (
        "trailing-dotdot-path",
        {"ebs_volume_mount_point": "/opt/sagemaker/.."},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    (
        "double-slash-path",
        {"ebs_volume_mount_point": "/opt//nvme"},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    (
        "nan-tuning",
        '{"containerd_on_data_volume": true, "kubelet_on_data_volume": true, '
        '"fsx_efa_enabled": false, "lustre_tuning": {"max_dirty_mb": NaN}}',
        "'lustre_tuning': numbers must be finite",
    ),
    (
        "infinity-tuning",
        {"lustre_tuning": {"at_max": float("inf")}},
        "'lustre_tuning': numbers must be finite",
    ),
    (
        "negative-infinity-wait",
        {"mount_wait_seconds": float("-inf")},
        "'mount_wait_seconds': numbers must be finite",
    ),
    (
        "overflow-tuning",
        '{"containerd_on_data_volume": true, "kubelet_on_data_volume": true, '
        '"fsx_efa_enabled": false, "lustre_tuning": {"max_dirty_mb": 1e999}}',
        "'lustre_tuning': numbers must be finite",
    ),
    ("nan-unknown-field", {"extra": [1, {"x": float("nan")}]}, "'extra': numbers must be finite"),
    (
        "space-path",
        {"ebs_volume_mount_point": "/opt/my data"},
        "'ebs_volume_mount_point': must be an absolute path",
    ),
    ("number-path", {"ebs_volume_mount_point": 5}, "'ebs_volume_mount_point': must be a string"),
    (
        "negative-wait",
        {"mount_wait_seconds": -1},
        "'mount_wait_seconds': must be between 0 and 3600",
    ),
    ("bool-wait", {"mount_wait_seconds": True}, "'mount_wait_seconds': must be an integer"),
    (
        "removed-require_nvme_on_gpu",
        {"require_nvme_on_gpu": True},
        "'require_nvme_on_gpu': removed: no disk layout fails a node any more",
    ),
    ("removed-require_nvme", {"require_nvme": False}, "'require_nvme': removed: no disk layout"),
    (
        "removed-nvme_mount_point",
        {"nvme_mount_point": "/opt/sagemaker"},
        "'nvme_mount_point': removed",
    ),
    (
        "renamed-containerd_on_nvme",
        {"containerd_on_nvme": True},
        "'containerd_on_nvme': renamed to containerd_on_data_volume",
    ),
    (
        "renamed-kubelet_on_nvme",
        {"kubelet_on_nvme": True},
        "'kubelet_on_nvme': renamed to kubelet_on_data_volume",
    ),
    (
        "renamed-nvme_wait_seconds",
        {"nvme_wait_seconds": 60},
        "'nvme_wait_seconds': renamed to mount_wait_seconds",
    ),
    (
        "removed-log_dir",
        {"log_dir": "/var/log/provision"},
        "'log_dir': removed: HyperPod uploads only /var/log/provision/provisioning.log",
    ),
    ("bool-lustre", {"lustre_enabled": 0}, "'lustre_enabled': must be a boolean"),
    ("tuning-list", {"lustre_tuning": ["max_dirty_mb=2048"]}, "'lustre_tuning': must be an object"),
    (
        "tuning-value",
        {"lustre_tuning": {"max_dirty_mb": {"v": 1}}},
        "'lustre_tuning': value of 'max_dirty_mb'",
    ),
    (
        "tuning-injection",
        {"lustre_tuning": {"osc.*;reboot": 1}},
        "'lustre_tuning': invalid lctl parameter",
    ),
    (
        "tuning-spaces",
        {"lustre_tuning": {"max_dirty_mb": "1 2"}},
        "'lustre_tuning': value of 'max_dirty_mb'",
    ),
    (
        "module-options",
        {"lustre_module_options": {"ptlrpc": "$(reboot)"}},
        "'lustre_module_options': option",
    ),
    (
        "module-name",
        {"lustre_module_options": {"Bad-Name": "a=1"}},
        "'lustre_module_options': invalid kernel",
    ),
    ("nids-string", {"lustre_ping_nids": "10.0.0.1@tcp"}, "'lustre_ping_nids': must be an array"),
    (
        "nid-format",
        {"lustre_ping_nids": ["10.0.0.1"]},
        "'lustre_ping_nids': '10.0.0.1' is not an LNet NID",
    ),
    ("iface", {"lnet_tcp_interface": "eth 0"}, "'lnet_tcp_interface': is not a network interface"),
    (
        "efa-max",
        {"lnet_efa_max_interfaces": 0},
        "'lnet_efa_max_interfaces': must be between 1 and 64",
    ),
    (
        "efa-without-lustre",
        {"fsx_efa_enabled": True, "lustre_enabled": False},
        "'fsx_efa_enabled': requires lustre_enabled",
    ),
]
# The end-to-end runs cover one case of each kind; the rest are checked in-process.
END_TO_END = {
    "not-json",
    "missing-containerd_on_data_volume",
    "removed-require_nvme_on_gpu",
    "string-bool",
    "relative-path",
    "efa-without-lustre",
    "nan-tuning",
    "dot-path",
    "removed-log_dir",
}


def config_text(content):
    if isinstance(content, str):
        return content
    config = dict(MINIMAL_CONFIG)
    for key, value in content.items():
        if value is MISSING:
            config.pop(key)
        else:
            config[key] = value
    return json.dumps(config)


@pytest.fixture(scope="module")
def read_config():
    spec = importlib.util.spec_from_file_location(
        "read_config", LIFECYCLE_SRC / "lib/read_config.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "content,message", [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_config_validation_names_the_field(read_config, content, message):
    with pytest.raises(read_config.ConfigError, match=re.escape(message)) as error:
        read_config.parse(config_text(content))
    assert "\n" not in str(error.value)


def test_config_defaults(read_config):
    values, warnings = read_config.parse(json.dumps(MINIMAL_CONFIG))
    assert warnings == []
    assert values == {
        "containerd_on_data_volume": "true",
        "kubelet_on_data_volume": "true",
        "fsx_efa_enabled": "false",
        "ebs_volume_mount_point": "/opt/sagemaker",
        "instance_store_mount_point": "/opt/dlami/nvme",
        "mount_wait_seconds": "60",
        "lustre_enabled": "true",
        "lustre_module_options": [],
        "lustre_tuning": [],
        "lustre_ping_nids": [],
        "lnet_tcp_interface": "",
        "lnet_efa_max_interfaces": "8",
    }


@pytest.mark.parametrize(
    "content,message",
    [c[1:] for c in BAD_CONFIGS if c[0] in END_TO_END],
    ids=[c[0] for c in BAD_CONFIGS if c[0] in END_TO_END],
)
def test_malformed_config_stops_the_script_with_one_line(sandbox, content, message):
    sandbox.config_path.write_text(config_text(content))
    before = sandbox.tree_hash()
    result = sandbox.run()
    assert result.returncode != 0
    config_errors = [
        line for line in error_lines(sandbox) if "invalid config lifecycle_config.json" in line
    ]
    assert len(config_errors) == 1 and message in config_errors[0], error_lines(sandbox)
    # Nothing ran on the node but the wait that lets the log reach CloudWatch.
    assert sandbox.call_lines() == ["sync", "sleep 0"]
    assert sandbox.tree_hash() == before


def test_example_config_is_valid():
    result = subprocess.run(
        [
            sys.executable,
            str(LIFECYCLE_SRC / "lib/read_config.py"),
            str(LIFECYCLE_SRC / "lifecycle_config.example.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout
    assert "CFG_EBS_VOLUME_MOUNT_POINT=/opt/sagemaker" in result.stdout.splitlines()
    assert "CFG_INSTANCE_STORE_MOUNT_POINT=/opt/dlami/nvme" in result.stdout.splitlines()
