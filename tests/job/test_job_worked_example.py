"""The README's worked example (torchtitan's Llama 3 8B as a team's own code) renders, and
its manifest passes the contracts the trainer's does: the operator's CRD schema, Kubernetes'
own schema, the node's allocatable resources, the job environment, and the team directories'
ownership."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from config.instance_types import lookup
from config.kubernetes import EFA_RESOURCE, GPU_RESOURCE
from config.node_model import group_model
from hpctl.job.render import JOB_ENVIRONMENT
from tests.cli.conftest import hpctl
from tests.job.test_job_manifest_schema import _errors, _pod_template
from tests.job.test_team_directories import full_tree, make_directory, manifest_process
from tests.support import KUBERNETES_VALIDATE_VERSIONS, environment
from tools import REPO
from training.checkpoint.config import CheckpointConfig
from training.environment import COMPILE_CACHE_DIR_ENV, environment_keys

MARKER = "<!-- worked-example -->"
ACCOUNT = "123456789012"
DIGEST = "0" * 64
# Kubernetes expands $(NAME) in a container's command and args from its env; an undefined
# name is left as it is, so a typo reaches the program as literal text.
REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def readme_command() -> list[str]:
    """The argv of the README's worked example (the fenced block after the marker), the
    image's account and digest filled in."""
    text = (REPO / "docs" / "training-jobs.md").read_text(encoding="utf-8")
    block = text.split(MARKER, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:3] == ["hpctl", "job", "render"], argv
    return [arg.replace("<account>", ACCOUNT).replace("<digest>", DIGEST) for arg in argv[1:]]


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    result = hpctl(*readme_command())
    assert result.exit_code == 0, result.stderr
    rendered: dict[str, Any] = yaml.safe_load(result.stdout)
    return rendered


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"]
    return container


def undefined_references(manifest: dict[str, Any]) -> list[str]:
    container = _container(manifest)
    defined = {item["name"] for item in container["env"]}
    words = [*container["command"], *container["args"]]
    return [name for word in words for name in REFERENCE.findall(word) if name not in defined]


def test_it_runs_torchtitans_entry_point_with_its_llama_recipe(manifest: dict[str, Any]) -> None:
    container = _container(manifest)
    assert container["command"][-2:] == ["-m", "torchtitan.train"]
    args = container["args"]
    assert args[:4] == ["--module", "llama3", "--config", "llama3_8b"]
    assert args[args.index("--dump_folder") + 1] == "$(HPTRAIN_RUN_DIR)"
    assert args[args.index("--checkpoint.folder") + 1] == "$(HPTRAIN_CHECKPOINT_DIR)"
    assert manifest["spec"]["runPolicy"]["logMonitoringConfiguration"] == []


def test_it_matches_the_crd_schema(manifest: dict[str, Any]) -> None:
    assert _errors(manifest) == []


@pytest.mark.parametrize("version", KUBERNETES_VALIDATE_VERSIONS)
def test_its_pod_template_validates_against_kubernetes(
    manifest: dict[str, Any], version: str
) -> None:
    kubernetes_validate.validate(_pod_template(manifest), version, strict=True)


def test_it_asks_for_what_a_node_of_its_group_leaves_a_job(manifest: dict[str, Any]) -> None:
    allocation = group_model(environment("prod").config, "gpu-p5").job
    instance = lookup("ml.p5.48xlarge")
    requests = _container(manifest)["resources"]["requests"]
    assert requests["cpu"] == f"{allocation.cpu_millicores}m"
    assert requests["memory"] == f"{allocation.memory_mib}Mi"
    assert requests[GPU_RESOURCE] == instance.accelerator_count
    assert requests[EFA_RESOURCE] == instance.efa_interfaces


def test_every_variable_it_names_is_defined(manifest: dict[str, Any]) -> None:
    assert undefined_references(manifest) == []
    env = {item["name"] for item in _container(manifest)["env"]}
    assert set(JOB_ENVIRONMENT) <= env


def test_an_undefined_variable_is_caught(manifest: dict[str, Any]) -> None:
    planted = yaml.safe_load(yaml.safe_dump(manifest))
    _container(planted)["args"].append("$(HPTRAIN_CHECKPOINT_DIRS)")
    assert undefined_references(planted) == ["HPTRAIN_CHECKPOINT_DIRS"]


def test_its_user_can_write_its_directories_and_only_its_teams(manifest: dict[str, Any]) -> None:
    env = {item["name"]: item.get("value") for item in _container(manifest)["env"]}
    process = manifest_process(manifest)
    tree = full_tree()
    for variable in ("HPTRAIN_RUN_DIR", "HPTRAIN_CHECKPOINT_DIR"):
        path = env[variable]
        assert path.startswith("/fsx/teams/research/"), path
        assert make_directory(tree, path, process), path
        assert make_directory(tree, f"{path}/step-500", process), path
    assert not make_directory(tree, "/fsx/teams/sandbox/runs/llama3-8b-titan", process)
    # The node directory is the pod's memory volume, not the shared file system.
    mounts = {m["mountPath"] for m in _container(manifest)["volumeMounts"]}
    assert str(Path(env["HPTRAIN_NODE_CHECKPOINT_DIR"]).parent) in mounts


def test_its_compiled_code_stays_on_the_node_for_the_pods_life(manifest: dict[str, Any]) -> None:
    # The trainer takes the variable as parallel.compile_cache_dir (training/environment.py);
    # the job puts it under a mount of a disk-backed emptyDir, so a worker restarted in the
    # pod finds its compiled graphs, and nothing of it reaches the shared file system.
    env = {item["name"]: item.get("value") for item in _container(manifest)["env"]}
    path = env[COMPILE_CACHE_DIR_ENV]
    assert environment_keys(CheckpointConfig())[COMPILE_CACHE_DIR_ENV] == (
        "parallel.compile_cache_dir"
    )
    mounts = {m["mountPath"]: m["name"] for m in _container(manifest)["volumeMounts"]}
    (volume_name,) = [name for mount, name in mounts.items() if path.startswith(f"{mount}/")]
    volumes = {v["name"]: v for v in _pod_template(manifest)["template"]["spec"]["volumes"]}
    assert volumes[volume_name] == {"name": volume_name, "emptyDir": {}}
