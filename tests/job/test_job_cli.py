"""`hpctl job render`: YAML on success; one `hpctl job render: ...` line on stderr and exit 2
on any bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner, Result

from config.instance_types import unknown_instance_type
from hpctl.errors import ExitCode
from hpctl.job import JobSpec, render_job
from hpctl.job_cmd import app
from tests.cli.conftest import error_line, expect_failure, hpctl

PREFIX = "hpctl job render: "
ARGS = [
    "job",
    "render",
    "--name",
    "llama-8b",
    "--team",
    "research",
    "--priority",
    "training",
    "--image",
    "123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0",
    "--instance-type",
    "ml.p5.48xlarge",
    "--instance-group",
    "gpu-p5",
]


def _run(*extra: str) -> Result:
    return hpctl(*ARGS, *extra)


def test_render_prints_the_manifest_for_the_options() -> None:
    result = _run(
        "--nodes",
        "4",
        "--spares",
        "1",
        "--preset",
        "1b",
        "--steps",
        "20",
        "--fsx-claim",
        "team-fsx",
        "--min-tokens-per-s",
        "9000",
        "--managed-fast-tier",
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    expected = JobSpec(
        name="llama-8b",
        team="research",
        priority="training",
        image="123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0",
        instance_type="ml.p5.48xlarge",
        instance_group="gpu-p5",
        nodes=4,
        spares=1,
        preset="1b",
        steps=20,
        fsx_claim="team-fsx",
        min_tokens_per_s=9000,
        managed_fast_tier=True,
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
    result = _run(
        "--toleration", "nvidia.com/gpu:NoSchedule", "--toleration", "dedicated=ml:NoExecute"
    )
    assert result.exit_code == 0, result.stderr
    pod = yaml.safe_load(result.stdout)["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize(
    ("extra", "prefix"),
    [
        (["--image", "hptrain:latest"], "--image: 'hptrain:latest' is not pinned"),
        (
            ["--instance-type", "ml.p9.huge"],
            f"--instance-type: {unknown_instance_type('ml.p9.huge')}",
        ),
        (["--instance-type", "ml.m5.xlarge"], "--instance-type: ml.m5.xlarge has no accelerators"),
        (["--team", "Research"], "--team:"),
        (["--name", "Llama"], "--name:"),
        (["--priority", "training-priority"], "--priority:"),
        (["--instance-group", "gpu_p5"], "--instance-group:"),
        (["--nodes", "0"], "--nodes: 0 is too small; use 1 or more"),
        (["--nodes", "two"], "--nodes: 'two' is not a whole number"),
        (["--spares", "-1"], "--spares: -1 is too small; use 0 or more"),
        (["--steps", "0"], "--steps:"),
        (["--preset", "70b"], "--preset: unknown preset '70b'; use one of"),
        (["--nodes", "3"], "--nodes: 3 node(s) x 8 ranks do not fit preset '8b'"),
        (["--fsx-claim", "FSx"], "--fsx-claim:"),
        (["--min-tokens-per-s", "0"], "--min-tokens-per-s:"),
        (["--toleration", "dedicated"], "--toleration #1: 'dedicated' is not KEY[=VALUE]:EFFECT"),
        (["--toleration", "a:NoSchedule", "--toleration", "b:Never"], "--toleration #2:"),
        (["--output", "/nonexistent-dir/job.yaml"], "--output: cannot write"),
        (["--bogus", "1"], "No such option: --bogus"),
        (["--nodes"], "Option '--nodes' requires an argument"),
    ],
)
def test_bad_input_is_one_line_exit_2_without_traceback(extra: list[str], prefix: str) -> None:
    expect_failure(*ARGS, *extra, code=ExitCode.USAGE, starts_with=PREFIX + prefix)


def test_missing_options_are_named_on_one_line() -> None:
    line = error_line(hpctl("job", "render", "--name", "x"), ExitCode.USAGE)
    assert line.startswith(PREFIX)
    for option in ["--team", "--priority", "--image", "--instance-type", "--instance-group"]:
        assert f"{option}: missing; pass {option}" in line
    assert "--name:" not in line


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
    ok = CliRunner().invoke(parent, ARGS, prog_name="other-cli")
    assert ok.exit_code == 0, ok.stderr
    assert yaml.safe_load(ok.stdout)["kind"] == "HyperPodPyTorchJob"
    bad = CliRunner().invoke(parent, [*ARGS, "--wrong"], prog_name="other-cli")
    assert (bad.exit_code, bad.stderr) == (2, f"{PREFIX}No such option: --wrong\n")
