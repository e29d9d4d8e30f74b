"""`hpctl` as users call it: the console script's entry point (exit codes, stderr lines),
run in process, and once as the installed script in a subprocess with no AWS set-up at all."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config.capacity import ips_per_node
from config.instance_types import INSTANCE_TYPES, unknown_instance_type
from hpctl import cli
from hpctl.errors import ExitCode
from tests.cli.conftest import error_line, expect_failure, hpctl

REPO = Path(__file__).resolve().parents[2]
HPCTL = Path(sys.executable).parent / "hpctl"


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`hpctl ARGS` run from `cwd` through the console script's entry point, in process: the
    exit code and both streams as a subprocess would give them, without a second interpreter
    importing the CLI for every call (the script itself runs in the last test)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                cli.main(list(args))
            except SystemExit as end:
                code = end.code if isinstance(end.code, int) else 1
            else:
                code = 0
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(["hpctl", *args], code, stdout.getvalue(), stderr.getvalue())


def test_console_script_is_installed():
    assert HPCTL.exists(), "hpctl console script missing: reinstall the project"


def test_capacity_json_p5_eks():
    result = run("capacity", "--instance-type", "ml.p5.48xlarge", "--count", "16", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["ips_per_node"] == 81
    assert figures["ips_total"] == 81 * 16
    assert figures["subnet_prefix"] == 21


def test_capacity_json_p5_slurm_with_headroom():
    result = run(
        "capacity",
        "--instance-type",
        "ml.p5.48xlarge",
        "--count",
        "16",
        "--orchestrator",
        "slurm",
        "--headroom",
        "4",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["ips_per_node"] == 32
    assert figures["headroom_nodes"] == 4
    assert figures["ips_total"] == 32 * 20
    assert figures["subnet_prefix"] == 22


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
@pytest.mark.parametrize("orchestrator", ["eks", "slurm"])
@pytest.mark.parametrize("interface", ["efa", "efa-only"])
def test_capacity_json_across_the_table(name, orchestrator, interface):
    figures_for = INSTANCE_TYPES[name]
    args = [
        "capacity",
        "--instance-type",
        name,
        "--count",
        "8",
        "--orchestrator",
        orchestrator,
        "--interface",
        interface,
        "--json",
    ]
    if not figures_for.supports_interface(interface):
        expect_failure(
            *args,
            code=ExitCode.USAGE,
            starts_with=f"hpctl capacity: --interface: {name} does not support ",
        )
        return
    result = hpctl(*args)
    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    per_node = ips_per_node(figures_for, orchestrator, interface)
    assert figures["ips_per_node"] == per_node
    assert figures["ips_total"] == per_node * 8
    size = 1 << (32 - figures["subnet_prefix"])
    assert size - 5 >= figures["ips_total"]
    assert size // 2 - 5 < figures["ips_total"] or figures["subnet_prefix"] == 28


def test_capacity_plan_of_a_config_as_json():
    result = run("capacity", "--config", "config/prod.yaml", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["environment"] == "prod"
    gpu = next(g for g in plan["groups"] if g["name"] == "gpu-p5")
    assert gpu["ips_per_node"] == 81
    subnet = plan["cluster_subnets"]["us-east-1a"]
    assert subnet["growth_nodes"]["gpu-p5"] > 0


def test_capacity_plan_of_an_environment_is_the_plan_of_its_file():
    by_env = run("capacity", "--env", "prod", "--json")
    by_file = run("capacity", "--config", "config/prod.yaml", "--json")
    assert by_env.returncode == 0, by_env.stderr
    assert json.loads(by_env.stdout) == json.loads(by_file.stdout)


def test_capacity_plan_table_says_how_far_subnets_grow():
    result = run("capacity", "--config", "config/prod.yaml")
    assert result.returncode == 0, result.stderr
    assert "up to" in result.stdout and "more" in result.stdout
    assert "us-east-1a" in result.stdout and "gpu-p5" in result.stdout


def test_validate_accepts_shipped_configs():
    result = run("validate", "--env", "dev", "--env", "staging", "--env", "prod")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        f"config/{env}.yaml: valid" for env in ("dev", "staging", "prod")
    ]


def test_validate_env_from_another_directory_names_the_file_it_read(tmp_path):
    result = run("validate", "--env", "prod", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{REPO / 'config/prod.yaml'}: valid (prod, ")


def test_validate_file_arguments_still_work_with_one_deprecation_line():
    result = run("validate", "config/dev.yaml", "config/prod.yaml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": valid (") == 2
    assert result.stderr == (
        "hpctl validate: FILE without --config is deprecated and goes in the next release; "
        "use --config FILE (or --env NAME)\n"
    )


def _broken(tmp_path: Path, mutate) -> Path:
    data = yaml.safe_load((REPO / "config/prod.yaml").read_text())
    mutate(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(account="abc"), "account"),
        (
            lambda d: d["hyperpod"]["instance_groups"][0].update(instance_type="ml.x"),
            "hyperpod.instance_groups[0].instance_type",
        ),
        (lambda d: d["network"].update(cluster_cidr="10.0.0.0/16"), "network.cluster_cidr"),
    ],
)
def test_validate_rejects_with_one_line_and_no_traceback(tmp_path, mutate, field):
    path = _broken(tmp_path, mutate)
    result = run("validate", "--config", str(path))
    assert error_line(result, ExitCode.FAILED).startswith(f"hpctl validate: {path}: {field}: ")


def test_validate_reports_every_problem_of_every_file_one_line_each(tmp_path):
    first = _broken(tmp_path, lambda d: d.update(account="abc"))
    second = tmp_path / "second.yaml"
    second.write_text(first.read_text().replace("account: abc", "account: xyz"))
    result = run("validate", "--env", "dev", "--config", str(first), "--config", str(second))
    assert result.returncode == ExitCode.FAILED
    assert result.stdout.startswith("config/dev.yaml: valid (")
    assert [line.split(": ")[:3] for line in result.stderr.splitlines()] == [
        ["hpctl validate", str(first), "account"],
        ["hpctl validate", str(second), "account"],
    ]


@pytest.mark.parametrize(
    ("args", "starts_with"),
    [
        (
            ["capacity", "--instance-type", "ml.p5.48xlarge", "--count", "0", "--json"],
            "hpctl capacity: Invalid value for '--count'",
        ),
        (
            ["capacity", "--instance-type", "ml.p5.48xlarge", "--count", "x"],
            "hpctl capacity: Invalid value for '--count'",
        ),
        (
            [
                "capacity",
                "--instance-type",
                "ml.p5.48xlarge",
                "--count",
                "2",
                "--orchestrator",
                "k8s",
            ],
            "hpctl capacity: Invalid value for '--orchestrator'",
        ),
        (
            ["capacity", "--instance-type", "ml.nope", "--count", "2", "--json"],
            f"hpctl capacity: --instance-type: {unknown_instance_type('ml.nope')}",
        ),
        (
            ["capacity", "--count", "2"],
            "hpctl capacity: --instance-type/--count: both are required",
        ),
        (
            ["capacity", "--config", "config/prod.yaml", "--count", "2"],
            "hpctl capacity: --config: use either --config or --instance-type/--count",
        ),
        (["validate"], "hpctl validate: --env: missing; pass --env NAME (or --config FILE)"),
        (
            ["validate", "--env", "nope"],
            "hpctl validate: --env: unknown environment 'nope'; use one of dev, prod, staging",
        ),
        (
            ["capacity", "--env", "prod", "--config", "config/prod.yaml"],
            "hpctl capacity: --env: use either --env or --config, not both",
        ),
        (
            ["capacity", "--env", "prod", "--instance-type", "ml.p5.48xlarge"],
            "hpctl capacity: --env: use either --env or --instance-type/--count",
        ),
        (["job", "render", "--nodes", "0"], "hpctl job render: --env: missing; pass --env"),
        (["job", "render", "--bogus"], "hpctl job render: No such option: --bogus"),
        (["plans", "search"], "hpctl plans search: Missing option '--count'"),
        (["nonsense"], "hpctl: No such command 'nonsense'"),
        ([], "hpctl: Missing command"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, starts_with):
    result = run(*args)
    assert error_line(result, ExitCode.USAGE).startswith(starts_with)


def test_unknown_type_lists_the_known_ones():
    result = run("capacity", "--instance-type", "ml.nope", "--count", "2")
    assert "ml.p5.48xlarge" in result.stderr and "ml.trn2.48xlarge" in result.stderr


def test_invalid_config_for_capacity_names_the_file(tmp_path):
    path = _broken(tmp_path, lambda d: d["network"].update(cluster_cidr="10.0.0.0/16"))
    result = run("capacity", "--config", str(path))
    assert error_line(result, ExitCode.FAILED).startswith(
        f"hpctl capacity: {path}: network.cluster_cidr: "
    )


def test_a_group_without_a_command_prints_its_help_and_no_empty_error_line():
    result = run("job")
    assert result.returncode == ExitCode.USAGE
    assert "render" in result.stdout + result.stderr
    assert "hpctl job: \n" not in result.stderr


def test_instance_types_json_lists_the_table():
    result = run("instance-types", "--json")
    rows = json.loads(result.stdout)
    assert {r["name"] for r in rows} == set(INSTANCE_TYPES)


def test_hpctl_does_not_need_aws_credentials(tmp_path):
    env_home = tmp_path / "home"
    env_home.mkdir()
    result = subprocess.run(
        [str(HPCTL), "validate", "--env", "prod"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(env_home), "AWS_CONFIG_FILE": "/nonexistent"},
    )
    assert result.returncode == 0, result.stderr
    assert ": valid (prod" in result.stdout
