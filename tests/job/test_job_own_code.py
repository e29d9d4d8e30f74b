"""A team's own code on the platform: `--module` / `-- COMMAND` keep every piece of the
platform's wiring, the trainer's own settings apply only to the trainer, and the job
environment (HPTRAIN_*) reaches any code and is what the project's trainer reads."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from config.kubernetes import METRICS_PORT, METRICS_PORT_NAME
from hpctl.errors import ExitCode
from hpctl.job.entry_points import CommandEntryPoint, ModuleEntryPoint
from hpctl.job.environment import JobRequestError, entry_point_for
from hpctl.job.plan import NODE_CHECKPOINT_DIR
from hpctl.job.render import JOB_ENVIRONMENT, render_job
from hpctl.job.spec import TRAINER_FIELDS
from tests.cli.conftest import error_line, expect_failure, hpctl
from tests.job.conftest import IMAGE, env_spec, make_spec
from training.presets import build_config
from training.train import parse_args

TITAN = ModuleEntryPoint(module="torchtitan.train", args=("--module", "llama3"))
SCRIPT = CommandEntryPoint(command=("python", "/app/train.py", "--epochs", "3"))
# Kubernetes expands $(NAME) in command and args from the container's env.
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"]
    return container


def _env(
    manifest: dict[str, Any], resolved: str = "s3://bucket/teams/research/managed-tier"
) -> dict[str, str]:
    """The container's environment as the pod sees it: ConfigMap values resolved to
    `resolved` (the team ConfigMap's one key)."""
    return {item["name"]: item.get("value", resolved) for item in _container(manifest)["env"]}


# ------------------------------------------------------------------ spec


def test_a_module_entry_point_runs_under_hyperpodrun_with_its_arguments() -> None:
    container = _container(render_job(make_spec(entry_point=TITAN)))
    assert container["command"][0] == "hyperpodrun"
    assert container["command"][-2:] == ["-m", "torchtitan.train"]
    assert container["args"] == ["--module", "llama3"]


def test_a_command_runs_as_given_without_python_prepended() -> None:
    container = _container(render_job(make_spec(entry_point=SCRIPT)))
    assert container["command"][-2:] == ["--no-python", "python"]
    assert container["args"] == ["/app/train.py", "--epochs", "3"]


def test_the_launcher_flags_are_the_trainers() -> None:
    trainer = _container(render_job(make_spec()))["command"][:-2]
    for entry in (TITAN, SCRIPT):
        assert _container(render_job(make_spec(entry_point=entry)))["command"][:-2] == trainer


@pytest.mark.parametrize("entry", [TITAN, SCRIPT])
def test_own_code_keeps_all_of_the_platforms_wiring(entry: Any) -> None:
    """Everything but the container's command, args, log rules and node checkpoint
    directory (the trainer's is its fast tier's) is the trainer job's."""
    trainer = render_job(make_spec())
    own = render_job(make_spec(entry_point=entry))
    assert own["metadata"] == trainer["metadata"]
    for manifest in (trainer, own):
        container = _container(manifest)
        del container["command"], container["args"]
        container["env"] = [
            item for item in container["env"] if item["name"] != "HPTRAIN_NODE_CHECKPOINT_DIR"
        ]
        del manifest["spec"]["runPolicy"]["logMonitoringConfiguration"]
    assert own == trainer


def test_own_code_gets_no_log_rules_written_for_the_trainers_lines() -> None:
    manifest = render_job(make_spec(entry_point=TITAN))
    assert manifest["spec"]["runPolicy"]["logMonitoringConfiguration"] == []
    assert render_job(make_spec())["spec"]["runPolicy"]["logMonitoringConfiguration"]


SETTINGS: dict[str, Any] = {
    "preset": "1b",
    "steps": 10,
    "checkpoint_dirs": {"durable": "/fsx/teams/research/x"},
    "checkpoint_intervals": {"fast": 5},
    "start_deadline_s": 600,
    "hang_timeout_s": 3600,
    "min_tokens_per_s": 1000,
    "slow_data_points": 3,
    "tp": 2,
    "parallelism": "hsdp",
}


def test_every_trainer_setting_is_covered() -> None:
    assert set(SETTINGS) == set(TRAINER_FIELDS)


@pytest.mark.parametrize("field", TRAINER_FIELDS)
def test_a_trainer_setting_is_refused_for_own_code(field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        make_spec(entry_point=TITAN, **{field: SETTINGS[field]})
    (error,) = raised.value.errors()
    assert error["loc"] == (field,)
    assert "configures the project's trainer" in error["msg"]
    make_spec(**{field: SETTINGS[field]})  # the trainer takes it


def test_own_code_scales_to_every_count_of_its_elastic_range() -> None:
    # The trainer's runnable sizes (batch, mesh) do not bind other code: 2 to 5 nodes, step 1.
    spec = make_spec(entry_point=SCRIPT, elastic="2:5", nodes=2)
    policy = render_job(spec)["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == (2, 5)
    assert policy["replicaIncrementStep"] == 1
    assert "replicaDiscreteValues" not in policy


def test_own_code_is_not_held_to_the_presets_sharding_or_save_grace(eight_rank_preset: str) -> None:
    # A world the default preset cannot split, and a grace shorter than its save: both are
    # the trainer's constraints, not the team's code's.
    with pytest.raises(ValidationError):
        make_spec(preset=eight_rank_preset, nodes=2)
    with pytest.raises(ValidationError):
        make_spec(shutdown_timeout_s=1)
    spec = make_spec(entry_point=SCRIPT, nodes=3, shutdown_timeout_s=1)
    assert (spec.nodes, spec.shutdown_timeout_s) == (3, 1)


@pytest.mark.parametrize(
    ("module", "problem"),
    [("torchtitan/train.py", "not a Python module path"), ("torchtitan.", "not a Python module")],
)
def test_a_module_must_be_a_module_path(module: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        ModuleEntryPoint(module=module)


@pytest.mark.parametrize("launcher", ["hyperpodrun", "/usr/local/bin/torchrun"])
def test_a_command_may_not_start_a_second_launcher(launcher: str) -> None:
    with pytest.raises(ValidationError, match="launcher the platform already runs"):
        CommandEntryPoint(command=(launcher, "train.py"))


def test_a_command_may_not_be_empty() -> None:
    with pytest.raises(ValidationError, match="empty command"):
        CommandEntryPoint(command=())


def test_entry_point_for_options() -> None:
    assert entry_point_for(None, []) is None
    assert entry_point_for("torchtitan.train", ["--module", "llama3"]) == TITAN
    assert entry_point_for(None, list(SCRIPT.command)) == SCRIPT
    with pytest.raises(JobRequestError) as raised:
        entry_point_for(None, ["torchrun", "x.py"])
    assert raised.value.problems[0].startswith("COMMAND: torchrun is the launcher")
    with pytest.raises(JobRequestError) as raised:
        entry_point_for("a-b", [])
    assert raised.value.problems[0].startswith("--module: 'a-b' is not a Python module path")


@pytest.mark.parametrize(
    ("entry", "tag"),
    [
        (TITAN, "torchtitan-train"),
        (SCRIPT, "train"),
        (CommandEntryPoint(command=("nemo",)), "nemo"),
    ],
)
def test_a_default_name_names_the_code(entry: Any, tag: str) -> None:
    assert env_spec("prod", entry_point=entry).name == f"foundation-{tag}-20260304-050607"


# ------------------------------------------------------------------ the job environment


@pytest.mark.parametrize("entry", [None, TITAN, SCRIPT])
def test_every_job_gets_the_whole_job_environment(entry: Any) -> None:
    spec = env_spec("prod", entry_point=entry, name="run-1")
    env = _env(render_job(spec))
    assert set(JOB_ENVIRONMENT) <= set(env)
    assert env["HPTRAIN_RUN_DIR"] == "/fsx/teams/foundation/runs/run-1"
    assert env["HPTRAIN_CHECKPOINT_DIR"] == "/fsx/teams/foundation/checkpoints/run-1"
    assert env["HPTRAIN_METRICS_PORT"] == str(METRICS_PORT)
    assert env["HPTRAIN_JOB_NAME"] == "run-1"
    # The port the variable names is the one the collector scrapes by name.
    (metrics,) = [p for p in _container(render_job(spec))["ports"] if p.get("name")]
    assert (metrics["name"], metrics["containerPort"]) == (METRICS_PORT_NAME, METRICS_PORT)


def test_the_node_checkpoint_directory_is_in_pod_memory() -> None:
    assert _env(render_job(make_spec()))["HPTRAIN_NODE_CHECKPOINT_DIR"] == "/dev/shm/hptrain-ckpt"
    own = _env(render_job(make_spec(entry_point=SCRIPT)))
    assert own["HPTRAIN_NODE_CHECKPOINT_DIR"] == NODE_CHECKPOINT_DIR == "/dev/shm/checkpoints"


@pytest.mark.parametrize("tiered_storage", [False, True])
def test_own_code_gets_the_managed_tier_where_the_cluster_has_one(tiered_storage: bool) -> None:
    env = _container(render_job(make_spec(entry_point=TITAN, tiered_storage=tiered_storage)))["env"]
    managed = [item for item in env if item["name"] == "HPTRAIN_MANAGED_S3_PATH"]
    assert bool(managed) is tiered_storage


def test_the_checkpoint_variables_follow_directories_the_job_names() -> None:
    spec = make_spec(
        run_dir="/fsx/teams/research/runs/a",
        checkpoint_dirs={"fast": "/dev/shm/f", "durable": "/fsx/teams/research/d"},
    )
    env = _env(render_job(spec))
    assert env["HPTRAIN_RUN_DIR"] == "/fsx/teams/research/runs/a"
    assert env["HPTRAIN_CHECKPOINT_DIR"] == "/fsx/teams/research/d"
    assert env["HPTRAIN_NODE_CHECKPOINT_DIR"] == "/dev/shm/f"


TRAINER_JOBS: list[dict[str, Any]] = [
    {},
    {"preset": "tiny", "hang_timeout_s": 120},
    {
        "run_dir": "/fsx/teams/research/runs/a",
        "checkpoint_dirs": {"fast": "/dev/shm/f", "durable": "/fsx/teams/research/d"},
        "tiered_storage": True,
    },
]


def _expanded(values: list[str], env: dict[str, str]) -> list[str]:
    return [_REFERENCE.sub(lambda m: env[m[1]], value) for value in values]


@pytest.mark.parametrize("overrides", TRAINER_JOBS)
def test_the_trainer_reads_from_the_environment_what_its_arguments_say(
    overrides: dict[str, Any],
) -> None:
    """Given only the job environment, the trainer resolves the same run directory, tier
    directories, metrics port and managed tier as from the rendered arguments."""
    spec = make_spec(**overrides)
    manifest = render_job(spec)
    env = _env(manifest)
    argv = _expanded(_container(manifest)["args"], env)
    from_args, out_args, _ = parse_args(argv, environ={})
    # The arguments without the ones the environment carries.
    preset = argv[argv.index("--preset") + 1]
    from_env, out_env, _ = parse_args(["--preset", preset], environ=env)
    both, out_both, _ = parse_args(argv, environ=env)
    assert out_env == out_args == out_both
    assert from_env.metrics.port == from_args.metrics.port == METRICS_PORT
    for tier in from_args.checkpoint.tiers:
        assert from_env.checkpoint.tier(tier.name).dir == tier.dir
    # Both: the arguments win, and the job's name is the managed tier's namespace either way;
    # the compile cache comes from the environment only.
    expected = from_args.to_dict()
    expected["checkpoint"]["managed_namespace"] = spec.name
    expected["parallel"]["compile_cache_dir"] = env["HPTRAIN_COMPILE_CACHE_DIR"]
    assert from_env.parallel.compile_cache_dir == env["HPTRAIN_COMPILE_CACHE_DIR"]
    assert both.to_dict() == expected
    if spec.platform.tiered_storage:
        assert from_env.checkpoint.managed_s3_path == from_args.checkpoint.managed_s3_path
        assert from_env.checkpoint.managed_namespace == from_args.checkpoint.managed_namespace


def test_the_command_line_overrides_the_environment() -> None:
    env = {"HPTRAIN_RUN_DIR": "/fsx/teams/r/runs/a", "HPTRAIN_METRICS_PORT": "9410"}
    config, out, _ = parse_args(
        ["--preset", "tiny", "--out", "/tmp/x", "--set", "metrics.port=0"], environ=env
    )
    assert (str(out), config.metrics.port) == ("/tmp/x", 0)


def test_a_bad_environment_value_names_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--out", "/tmp/x"], environ={"HPTRAIN_METRICS_PORT": "80"})
    assert exited.value.code == 2
    line = capsys.readouterr().err
    assert line.startswith("error: HPTRAIN_METRICS_PORT='80' (job environment): metrics.port")


def test_without_out_or_the_run_directory_the_trainer_says_how(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--preset", "tiny"], environ={})
    assert (
        capsys.readouterr().err == "error: --out: missing; pass --out DIR or set HPTRAIN_RUN_DIR\n"
    )


def test_the_checkpoint_variables_name_the_durable_and_the_per_node_tier() -> None:
    config, _, _ = parse_args(
        ["--preset", "tiny"],
        environ={
            "HPTRAIN_RUN_DIR": "/r",
            "HPTRAIN_CHECKPOINT_DIR": "/shared",
            "HPTRAIN_NODE_CHECKPOINT_DIR": "/dev/shm/n",
        },
    )
    assert config.checkpoint.tier("durable").dir == "/shared"
    assert config.checkpoint.tier("fast").dir == "/dev/shm/n"
    assert build_config("tiny").checkpoint.tier("durable").dir == ""


# ------------------------------------------------------------------ the command line

RENDER = [
    "job",
    "render",
    "--env",
    "prod",
    "--team",
    "research",
    "--instance-group",
    "gpu-p5",
    "--nodes",
    "2",
    "--image",
    IMAGE,
    "--name",
    "titan",
]


def test_render_takes_a_module_and_its_arguments_after_the_separator() -> None:
    result = hpctl(*RENDER, "--module", "torchtitan.train", "--", "--module", "llama3", "--x=1")
    assert result.exit_code == 0, result.stderr
    container = _container(yaml.safe_load(result.stdout))
    assert container["command"][-2:] == ["-m", "torchtitan.train"]
    assert container["args"] == ["--module", "llama3", "--x=1"]


def test_render_takes_a_command_after_the_separator() -> None:
    result = hpctl(*RENDER, "--", "python", "train.py", "--lr", "3e-4")
    assert result.exit_code == 0, result.stderr
    container = _container(yaml.safe_load(result.stdout))
    assert container["command"][-2:] == ["--no-python", "python"]
    assert container["args"] == ["train.py", "--lr", "3e-4"]


def test_render_refuses_a_trainer_option_for_own_code() -> None:
    result = expect_failure(
        *RENDER, "--preset", "1b", "--", "python", "train.py", code=ExitCode.USAGE, starts_with=""
    )
    assert error_line(result, ExitCode.USAGE).startswith(
        "hpctl job render: --preset: configures the project's trainer"
    )


def test_render_refuses_a_nested_launcher() -> None:
    expect_failure(
        *RENDER,
        "--",
        "torchrun",
        "train.py",
        code=ExitCode.USAGE,
        starts_with="hpctl job render: COMMAND: torchrun is the launcher",
    )
