"""`job render`: YAML on success; one line on stderr and exit 2 on any bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from hpctl.job_cmd import app
from training.job import JobSpec, render_job

ARGS = [
    "render",
    "--name", "llama-8b",
    "--team", "research",
    "--priority", "training",
    "--image", "123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0",
    "--instance-type", "ml.p5.48xlarge",
    "--instance-group", "gpu-p5",
]


def _run(*extra: str):
    return CliRunner().invoke(app, [*ARGS, *extra])


def test_render_prints_the_manifest_for_the_options() -> None:
    result = _run("--nodes", "4", "--spares", "1", "--preset", "1b", "--steps", "20",
                  "--fsx-claim", "team-fsx", "--min-tokens-per-s", "9000", "--managed-fast-tier")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    expected = JobSpec(
        name="llama-8b", team="research", priority="training",
        image="123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0",
        instance_type="ml.p5.48xlarge", instance_group="gpu-p5", nodes=4, spares=1,
        preset="1b", steps=20, fsx_claim="team-fsx", min_tokens_per_s=9000, managed_fast_tier=True,
    )
    assert yaml.safe_load(result.stdout) == render_job(expected)


def test_render_defaults() -> None:
    result = _run()
    assert result.exit_code == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    (replica,) = manifest["spec"]["replicaSpecs"]
    assert (replica["replicas"], replica["spares"]) == (1, 0)
    claim = replica["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert claim == "fsx-claim"


def test_render_writes_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    result = _run("-o", str(target))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert yaml.safe_load(target.read_text())["metadata"]["name"] == "llama-8b"
    assert _run("--output", str(target), "--name", "other").exit_code == 0
    assert yaml.safe_load(target.read_text())["metadata"]["name"] == "other"


def test_tolerations_from_options() -> None:
    result = _run("--toleration", "nvidia.com/gpu:NoSchedule", "--toleration", "dedicated=ml:NoExecute")
    assert result.exit_code == 0, result.stderr
    pod = yaml.safe_load(result.stdout)["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize(
    ("extra", "prefix"),
    [
        (["--image", "hptrain:latest"], "error: --image: 'hptrain:latest' is not pinned"),
        (["--instance-type", "ml.p9.huge"], "error: --instance-type: unknown instance type"),
        (["--instance-type", "ml.m5.xlarge"], "error: --instance-type: ml.m5.xlarge has no accelerators"),
        (["--team", "Research"], "error: --team:"),
        (["--name", "Llama"], "error: --name:"),
        (["--priority", "training-priority"], "error: --priority:"),
        (["--instance-group", "gpu_p5"], "error: --instance-group:"),
        (["--nodes", "0"], "error: --nodes: 0 is too small; use 1 or more"),
        (["--nodes", "two"], "error: --nodes: 'two' is not a whole number"),
        (["--spares", "-1"], "error: --spares: -1 is too small; use 0 or more"),
        (["--steps", "0"], "error: --steps:"),
        (["--preset", "70b"], "error: --preset: unknown preset '70b'; use one of"),
        (["--nodes", "3"], "error: --nodes: 3 node(s) x 8 ranks do not fit preset '8b'"),
        (["--fsx-claim", "FSx"], "error: --fsx-claim:"),
        (["--min-tokens-per-s", "0"], "error: --min-tokens-per-s:"),
        (["--toleration", "dedicated"], "error: --toleration #1: 'dedicated' is not KEY[=VALUE]:EFFECT"),
        (["--toleration", "a:NoSchedule", "--toleration", "b:Never"], "error: --toleration #2:"),
        (["--output", "/nonexistent-dir/job.yaml"], "error: --output: cannot write"),
        (["--bogus", "1"], "error: No such option: --bogus"),
        (["--nodes"], "error: Option '--nodes' requires an argument"),
    ],
)
def test_bad_input_is_one_line_exit_2_without_traceback(extra: list[str], prefix: str) -> None:
    result = _run(*extra)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(prefix), result.stderr
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_missing_options_are_named_on_one_line() -> None:
    result = CliRunner().invoke(app, ["render", "--name", "x"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    for option in ["--team", "--priority", "--image", "--instance-type", "--instance-group"]:
        assert f"{option}: missing; pass {option}" in result.stderr
    assert "--name:" not in result.stderr


def test_app_is_a_group_with_a_render_command() -> None:
    # The lead mounts `app` under `hpctl job`; it must stay a group so `job render` resolves.
    command = typer.main.get_command(app)
    assert list(command.commands) == ["render"]  # type: ignore[attr-defined]


def test_mounted_under_a_parent_app_keeps_output_and_errors() -> None:
    parent = typer.Typer()

    @parent.callback()
    def _root() -> None:
        """Parent CLI."""

    parent.add_typer(app, name="job")
    ok = CliRunner().invoke(parent, ["job", *ARGS])
    assert ok.exit_code == 0, ok.stderr
    assert yaml.safe_load(ok.stdout)["kind"] == "HyperPodPyTorchJob"
    bad = CliRunner().invoke(parent, ["job", *ARGS, "--wrong"])
    assert (bad.exit_code, bad.stderr) == (2, "error: No such option: --wrong\n")
