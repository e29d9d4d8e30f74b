"""`hpctl job render --env ...`: YAML on success; one `hpctl job render: ...` line on stderr and
exit 2 on any bad input, naming the option and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner, Result

from hpctl.errors import ExitCode
from hpctl.job.render import render_job
from hpctl.job_cmd import app
from tests.cli.conftest import error_line, expect_failure, hpctl
from tests.job.conftest import IMAGE, env_spec
from tests.support import environment_data

PREFIX = "hpctl job render: "
ARGS = [
    "job",
    "render",
    "--env",
    "prod",
    "--team",
    "foundation",
    "--instance-group",
    "gpu-p5",
    "--nodes",
    "2",
    "--image",
    IMAGE,
]


def _run(*extra: str) -> Result:
    return hpctl(*ARGS, *extra)


def _manifest(result: Result) -> dict[str, Any]:
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    manifest: dict[str, Any] = yaml.safe_load(result.stdout)
    return manifest


def _fails(*args: str, option: str, fix: str) -> str:
    """The one stderr line: exit 2, it names `option` first and contains `fix`."""
    line = error_line(
        expect_failure(*args, code=ExitCode.USAGE, starts_with=PREFIX), ExitCode.USAGE
    )
    assert line.startswith(f"{PREFIX}{option}: "), line
    assert fix in line, line
    return line


def test_render_prints_the_manifest_of_the_environments_spec() -> None:
    result = _run(
        "--name",
        "llama-1b",
        "--priority",
        "training",
        "--nodes",
        "4",
        "--spares",
        "1",
        "--preset",
        "1b",
        "--steps",
        "20",
        "--min-tokens-per-s",
        "9000",
    )
    expected = env_spec(
        "prod",
        name="llama-1b",
        priority="training",
        nodes=4,
        spares=1,
        preset="1b",
        steps=20,
        min_tokens_per_s=9000,
    )
    assert _manifest(result) == render_job(expected)


def test_render_defaults_from_prod(fixed_clock: object) -> None:
    manifest = _manifest(_run())
    assert manifest["metadata"]["name"] == "foundation-8b-20260304-050607"
    labels = manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/priority-class"] == "experimentation-priority"
    assert labels["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-foundation-localqueue"
    (replica,) = manifest["spec"]["replicaSpecs"]
    assert (replica["replicas"], replica["spares"]) == (2, 0)
    pod = replica["template"]["spec"]
    assert pod["serviceAccountName"] == "training"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "fsx-team"
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.p5.48xlarge"
    (container,) = pod["containers"]
    assert container["env"][-1] == {
        "name": "HPTRAIN_MANAGED_S3_PATH",
        "valueFrom": {"configMapKeyRef": {"name": "hyperpod-team", "key": "managed-tier-s3-path"}},
    }
    assert "checkpoint.fast_storage=managed" in container["args"]


def test_render_dev_uses_its_g5_group_without_managed_tier(fixed_clock: object) -> None:
    manifest = _manifest(
        hpctl(
            *["job", "render", "--env", "dev", "--team", "sandbox", "--instance-group", "gpu-g5"],
            *["--nodes", "2", "--image", IMAGE, "--preset", "tiny"],
        )
    )
    assert manifest["metadata"]["name"] == "sandbox-tiny-20260304-050607"
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.g5.12xlarge"
    names = [item["name"] for item in pod["containers"][0]["env"]]
    assert "HPTRAIN_MANAGED_S3_PATH" not in names
    assert "FI_EFA_USE_DEVICE_RDMA" not in names
    assert "checkpoint.fast_storage=local" in pod["containers"][0]["args"]


def test_render_tolerates_the_taints_of_the_group(config_dir: Any) -> None:
    data = environment_data("staging")
    data["environment"] = "tainted"
    group = data["hyperpod"]["instance_groups"][0]
    assert group["name"] == "gpu-p5"
    del group["deep_health_checks"]
    group["taints"] = [{"key": "example.com/dedicated", "value": "ml", "effect": "NoExecute"}]
    config_dir("tainted", data)
    result = hpctl(*[a if a != "prod" else "tainted" for a in ARGS])
    pod = _manifest(result)["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["tolerations"] == [
        {"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}
    ]


def test_render_writes_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "job.yaml"
    result = _run("-o", str(target), "--name", "first")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert yaml.safe_load(target.read_text())["metadata"]["name"] == "first"
    assert _run("--output", str(target), "--name", "other").exit_code == 0
    assert yaml.safe_load(target.read_text())["metadata"]["name"] == "other"


# --------------------------------------------------------------------------- the environment


def test_unknown_environment() -> None:
    line = _fails(*ARGS, "--env", "nope", option="--env", fix="use one of ")
    assert "unknown environment 'nope'" in line
    assert all(env in line for env in ("dev", "prod", "staging"))


def test_invalid_environment_file_is_one_line(config_dir: Any, tmp_path: Path) -> None:
    data = environment_data("dev")
    data["environment"] = "broken"
    data["hyperpod"]["instance_groups"][0]["count"] = -1
    data["network"]["nat_gateways"] = 9  # over the 6 allowed, whatever the egress
    config_dir("broken", data)
    line = _fails(
        *ARGS, "--env", "broken", option="--env", fix="count: -1 is too small; use 0 or more"
    )
    assert f"{tmp_path / 'broken.yaml'}: hyperpod.instance_groups[0].count" in line
    assert "network.nat_gateways" in line


def test_unreadable_yaml_is_one_line(config_dir: Any) -> None:
    config_dir("garbled", "environment: [garbled\n")
    _fails(*ARGS, "--env", "garbled", option="--env", fix="fix the YAML syntax")


def test_environment_without_governance(config_dir: Any) -> None:
    data = environment_data("dev")
    data["environment"] = "nogov"
    del data["governance"]
    data["observability"]["metrics"]["task_governance"] = "DISABLED"  # Kueue metrics need it
    config_dir("nogov", data)
    _fails(
        *ARGS,
        "--env",
        "nogov",
        option="--env",
        fix="nogov has no governance section, so it has no teams, queues or priority classes "
        "for jobs; add one to config/nogov.yaml",
    )


# --------------------------------------------------------------------------- lookups and quota


@pytest.mark.parametrize(
    ("extra", "option", "fix"),
    [
        (
            ["--team", "vision"],
            "--team",
            "unknown team 'vision' in prod; use one of evaluation, foundation, research",
        ),
        (
            ["--instance-group", "gpu-p4"],
            "--instance-group",
            "unknown instance group 'gpu-p4' in prod; use one of gpu-p5, system",
        ),
        (
            ["--priority", "urgent"],
            "--priority",
            "unknown priority class 'urgent' in prod; use one of production, training, "
            "experimentation",
        ),
        (
            ["--team", "research", "--instance-group", "system"],
            "--instance-group",
            "ml.m5.4xlarge has no accelerators; use a GPU or Trainium group (gpu-p5)",
        ),
        (
            ["--nodes", "14"],
            "--nodes",
            "14 nodes (+0 spares) exceed what team foundation may use on gpu-p5: 8 guaranteed "
            "+ 4 borrowable = 12; ask for at most 12",
        ),
        (
            ["--nodes", "8", "--spares", "5"],
            "--nodes",
            "8 nodes (+5 spares) exceed what team foundation may use on gpu-p5: 8 guaranteed "
            "+ 4 borrowable = 12; ask for at most 12 nodes and spares together",
        ),
        (
            ["--team", "evaluation", "--nodes", "4"],
            "--nodes",
            "2 guaranteed + 0 borrowable = 2; ask for at most 2",
        ),
    ],
)
def test_config_lookups_and_quota(extra: list[str], option: str, fix: str) -> None:
    _fails(*ARGS, *extra, option=option, fix=fix)


@pytest.mark.parametrize(
    ("team", "nodes", "spares"), [("foundation", "8", "4"), ("evaluation", "2", "0")]
)
def test_exactly_the_team_maximum_renders(team: str, nodes: str, spares: str) -> None:
    manifest = _manifest(_run("--team", team, "--nodes", nodes, "--spares", spares))
    (replica,) = manifest["spec"]["replicaSpecs"]
    assert (replica["replicas"], replica["spares"]) == (int(nodes), int(spares))


def test_every_size_the_team_may_use_renders_with_the_batch_it_runs() -> None:
    # research may use 6 guaranteed + 6 borrowed p5 nodes; 8b's batch of 512 splits over
    # none of 3, 5, 6, 7, 9, 10, 11 or 12 nodes of 8 GPUs, and the job says what it runs.
    manifest = _manifest(_run("--team", "research", "--nodes", "6"))
    (replica,) = manifest["spec"]["replicaSpecs"]
    assert replica["replicas"] == 6
    (container,) = replica["template"]["spec"]["containers"]
    assert "training.global_batch_size=528" in container["args"]


def test_a_size_the_presets_sharding_cannot_split(eight_rank_preset: str) -> None:
    expect_failure(
        *ARGS,
        "--preset",
        eight_rank_preset,
        code=ExitCode.USAGE,
        starts_with=f"{PREFIX}--nodes: 2 node(s) x 8 ranks do not fit preset '{eight_rank_preset}'",
    )


def test_an_elastic_job_starts_at_its_minimum_without_nodes() -> None:
    args = [a for a in ARGS if a not in ("--nodes", "2")]
    manifest = _manifest(hpctl(*args, "--elastic", "2:8", "--tp", "2", "--topology", "none"))
    (replica,) = manifest["spec"]["replicaSpecs"]
    assert (replica["replicas"], replica["maxReplicas"]) == (2, 8)
    assert manifest["spec"]["elasticPolicy"]["minReplicas"] == 2
    assert "annotations" not in manifest["metadata"]
    (container,) = replica["template"]["spec"]["containers"]
    assert "parallel.tp=2" in container["args"]


def test_a_team_without_quota_on_the_group(config_dir: Any) -> None:
    data = environment_data("prod")
    data["environment"] = "lopsided"
    evaluation = next(t for t in data["governance"]["teams"] if t["name"] == "evaluation")
    evaluation["quotas"] = [{"instance_group": "system", "count": 1}]
    config_dir("lopsided", data)
    _fails(
        *[a if a != "prod" else "lopsided" for a in ARGS],
        "--team",
        "evaluation",
        option="--instance-group",
        fix="team evaluation has no quota on gpu-p5 (ml.p5.48xlarge)",
    )


# --------------------------------------------------------------------------- user options


@pytest.mark.parametrize(
    ("extra", "prefix"),
    [
        (["--image", "hptrain:latest"], "--image: 'hptrain:latest' is not pinned"),
        (["--team", "Research"], "--team: unknown team 'Research'"),
        (["--name", "Llama"], "--name: 'Llama' is not a valid job name"),
        (["--priority", "training-priority"], "--priority:"),
        (["--instance-group", "gpu_p5"], "--instance-group: unknown instance group 'gpu_p5'"),
        (["--nodes", "0"], "--nodes: 0 is too small; use 1 or more"),
        (["--nodes", "two"], "--nodes: 'two' is not a whole number"),
        (["--spares", "-1"], "--spares: -1 is too small; use 0 or more"),
        (["--steps", "0"], "--steps:"),
        (["--preset", "70b"], "--preset: unknown preset '70b'; use one of"),
        (["--min-tokens-per-s", "0"], "--min-tokens-per-s:"),
        (["--output", "/nonexistent-dir/job.yaml"], "--output: cannot write"),
        (["--bogus", "1"], "No such option: --bogus"),
        (["--nodes"], "Option '--nodes' requires an argument"),
        (["--topology", "rack"], "--topology: 'rack' is not a placement"),
        (["--elastic", "2-8"], "--elastic: '2-8' is not a node range; use MIN:MAX"),
        (["--elastic", "4:8"], "--elastic: an elastic job starts at its minimum, 4 nodes"),
        (["--parallelism", "ddp"], "--parallelism: Input should be 'fsdp' or 'hsdp'"),
        (["--tp", "3"], "--tp: 3 does not divide the 8 accelerators"),
        (["--tp", "two"], "--tp: 'two' is not a whole number"),
    ],
)
def test_bad_input_is_one_line_exit_2_without_traceback(extra: list[str], prefix: str) -> None:
    expect_failure(*ARGS, *extra, code=ExitCode.USAGE, starts_with=PREFIX + prefix)


@pytest.mark.parametrize(
    "option",
    [
        ["--instance-type", "ml.p5.48xlarge"],
        ["--fsx-claim", "team-fsx"],
        ["--toleration", "nvidia.com/gpu:NoSchedule"],
        ["--managed-fast-tier"],
        ["--tiered-storage"],
    ],
)
def test_options_the_config_decides_are_gone(option: list[str]) -> None:
    expect_failure(
        *ARGS, *option, code=ExitCode.USAGE, starts_with=f"{PREFIX}No such option: {option[0]}"
    )


def test_missing_options_are_named_on_one_line() -> None:
    line = error_line(hpctl("job", "render", "--name", "x"), ExitCode.USAGE)
    assert line.startswith(PREFIX)
    for option in ["--env", "--team", "--instance-group", "--nodes", "--image"]:
        assert f"{option}: missing; pass {option}" in line
    assert "--name:" not in line
    assert "--priority:" not in line


def test_app_is_a_group_with_render_and_the_lifecycle_commands() -> None:
    # The lead mounts `app` under `hpctl job`; it must stay a group so `job render` resolves.
    command = typer.main.get_command(app)
    assert list(command.commands) == [  # type: ignore[attr-defined]
        "render",
        "submit",
        "list",
        "describe",
        "logs",
        "cancel",
    ]


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
