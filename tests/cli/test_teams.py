"""`hpctl teams --env ENV`: each team's namespace, sharing and capacity per instance group,
and the priority classes, as aligned text or one JSON object."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.instance_types import lookup
from hpctl import options
from hpctl.errors import ExitCode
from hpctl.job.environment import JobRequestError, spec_for_environment
from hpctl.job.plan import JobPlan
from hpctl.job.render import MANAGED_S3_PATH_ENV, render_job
from hpctl.teams import teams_report
from tests.cli.conftest import error_line, expect_failure, hpctl
from tests.job.conftest import IMAGE
from tests.support import ENVIRONMENTS, environment, environment_data, loaded_from
from training.config import JobConfig
from training.presets import PRESETS
from training.train import parse_args

PREFIX = "hpctl teams: "

PROD_JSON: dict[str, Any] = {
    "environment": "prod",
    "fair_share": True,
    "idle_resource_sharing": True,
    "priority_classes": [
        {"name": "production", "weight": 100, "kueue_class": "production-priority"},
        {"name": "training", "weight": 50, "kueue_class": "training-priority"},
        {"name": "experimentation", "weight": 10, "kueue_class": "experimentation-priority"},
    ],
    "teams": [
        {
            "name": "evaluation",
            "namespace": "hyperpod-ns-evaluation",
            "local_queue": "hyperpod-ns-evaluation-localqueue",
            "sharing": "Lend",
            "borrow_limit_percent": None,
            "fair_share_weight": 10,
            "preempt_lower_priority": False,
            "groups": [
                {
                    "instance_group": "gpu-p5",
                    "instance_type": "ml.p5.48xlarge",
                    "guaranteed_nodes": 2,
                    "borrowable_nodes": 0,
                    "max_job_nodes": 2,
                }
            ],
        },
        {
            "name": "foundation",
            "namespace": "hyperpod-ns-foundation",
            "local_queue": "hyperpod-ns-foundation-localqueue",
            "sharing": "LendAndBorrow",
            "borrow_limit_percent": 50,
            "fair_share_weight": 60,
            "preempt_lower_priority": True,
            "groups": [
                {
                    "instance_group": "gpu-p5",
                    "instance_type": "ml.p5.48xlarge",
                    "guaranteed_nodes": 8,
                    "borrowable_nodes": 4,
                    "max_job_nodes": 12,
                }
            ],
        },
        {
            "name": "research",
            "namespace": "hyperpod-ns-research",
            "local_queue": "hyperpod-ns-research-localqueue",
            "sharing": "LendAndBorrow",
            "borrow_limit_percent": 100,
            "fair_share_weight": 30,
            "preempt_lower_priority": True,
            "groups": [
                {
                    "instance_group": "gpu-p5",
                    "instance_type": "ml.p5.48xlarge",
                    "guaranteed_nodes": 6,
                    "borrowable_nodes": 6,
                    "max_job_nodes": 12,
                },
                {
                    "instance_group": "system",
                    "instance_type": "ml.m5.4xlarge",
                    "guaranteed_nodes": 1,
                    "borrowable_nodes": 1,
                    "max_job_nodes": 2,
                },
            ],
        },
    ],
}


def _ok(*args: str) -> str:
    result = hpctl("teams", *args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def _rows(text: str, heading: str) -> list[list[str]]:
    """The rows (header first) of the table under `heading`, split on runs of 2+ spaces."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    rows = []
    for line in lines[start:]:
        if not line:
            break
        rows.append([cell for cell in line.split("  ") if cell])
        rows[-1] = [cell.strip() for cell in rows[-1]]
    return rows


@pytest.fixture
def config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(options, "config_dir", tmp_path)
    return tmp_path


def _write(directory: Path, name: str, data: dict[str, Any]) -> None:
    data["environment"] = name
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


def test_prod_json_figures() -> None:
    text = _ok("--env", "prod", "--json")
    assert json.loads(text) == PROD_JSON
    # Key order is part of the contract (diffs of the output stay readable).
    assert list(json.loads(text)) == list(PROD_JSON)
    assert list(json.loads(text)["teams"][0]) == list(PROD_JSON["teams"][0])


def test_prod_text_tables() -> None:
    text = _ok("--env", "prod")
    assert text.splitlines()[0] == ("Environment prod: fair share on, idle resource sharing on")
    assert _rows(text, "Teams") == [
        ["team", "namespace", "sharing", "borrow limit", "fair-share weight", "preempts lower"],
        ["evaluation", "hyperpod-ns-evaluation", "Lend", "-", "10", "no"],
        ["foundation", "hyperpod-ns-foundation", "LendAndBorrow", "50%", "60", "yes"],
        ["research", "hyperpod-ns-research", "LendAndBorrow", "100%", "30", "yes"],
    ]
    assert _rows(text, "Capacity per team and instance group (nodes)") == [
        ["team", "instance group", "instance type", "guaranteed", "borrowable", "max job nodes"],
        ["evaluation", "gpu-p5", "ml.p5.48xlarge", "2", "0", "2"],
        ["foundation", "gpu-p5", "ml.p5.48xlarge", "8", "4", "12"],
        ["research", "gpu-p5", "ml.p5.48xlarge", "6", "6", "12"],
        ["research", "system", "ml.m5.4xlarge", "1", "1", "2"],
    ]
    assert _rows(text, "Priority classes (highest first)") == [
        ["name", "weight", "kueue class"],
        ["production", "100", "production-priority"],
        ["training", "50", "training-priority"],
        ["experimentation", "10", "experimentation-priority"],
    ]


def test_columns_are_aligned() -> None:
    text = _ok("--env", "prod")
    lines = text.splitlines()
    start = lines.index("Capacity per team and instance group (nodes)") + 1
    table = lines[start : start + 5]
    for column in ("instance group", "guaranteed", "max job nodes"):
        offset = table[0].index(column)
        assert all(line[offset - 2 : offset] == "  " for line in table)
        assert all(line[offset] != " " for line in table)
    assert all(line == line.rstrip() for line in lines)


def test_dev_has_one_team_that_never_lends() -> None:
    report = json.loads(_ok("--env", "dev", "--json"))
    assert (report["fair_share"], report["idle_resource_sharing"]) == (True, True)
    (team,) = report["teams"]
    assert (team["name"], team["sharing"], team["borrow_limit_percent"]) == (
        "sandbox",
        "DontLend",
        None,
    )
    assert team["groups"] == [
        {
            "instance_group": "gpu-g5",
            "instance_type": "ml.g5.12xlarge",
            "guaranteed_nodes": 2,
            "borrowable_nodes": 0,
            "max_job_nodes": 2,
        }
    ]
    assert [c["name"] for c in report["priority_classes"]] == ["training", "experimentation"]


def test_service_default_borrow_limit_fractions_and_switches() -> None:
    data = environment_data("prod")
    governance = data["governance"]
    governance["fair_share"] = False
    research = next(t for t in governance["teams"] if t["name"] == "research")
    del research["borrow_limit_percent"]
    evaluation = next(t for t in governance["teams"] if t["name"] == "evaluation")
    evaluation["quotas"] = [{"instance_group": "gpu-p5", "accelerators": 12}]
    report = teams_report(loaded_from(data).config)
    assert report["fair_share"] is False
    by_name = {t["name"]: t for t in report["teams"]}
    # LendAndBorrow without a limit: the service's 50 %.
    assert by_name["research"]["borrow_limit_percent"] == 50
    assert by_name["research"]["groups"][0]["borrowable_nodes"] == 3
    # 12 H100s of 8 per node: one and a half nodes, one whole node per job.
    assert by_name["evaluation"]["groups"] == [
        {
            "instance_group": "gpu-p5",
            "instance_type": "ml.p5.48xlarge",
            "guaranteed_nodes": 1.5,
            "borrowable_nodes": 0,
            "max_job_nodes": 1,
        }
    ]


def test_two_decimal_figures_in_text(config_dir: Path) -> None:
    data = environment_data("prod")
    research = next(t for t in data["governance"]["teams"] if t["name"] == "research")
    # 21 vCPUs of 16-vCPU nodes: 1.3125 nodes guaranteed, as many borrowable (limit 100 %).
    research["quotas"][1] = {"instance_group": "system", "vcpu": 21}
    _write(config_dir, "fractions", data)
    rows = _rows(_ok("--env", "fractions"), "Capacity per team and instance group (nodes)")
    assert ["research", "system", "ml.m5.4xlarge", "1.31", "1.31", "2"] in rows
    report = json.loads(_ok("--env", "fractions", "--json"))
    (research_report,) = [t for t in report["teams"] if t["name"] == "research"]
    assert research_report["groups"][1]["guaranteed_nodes"] == 1.31


def test_unknown_environment_is_one_line() -> None:
    line = error_line(
        expect_failure("teams", "--env", "nope", code=ExitCode.USAGE, starts_with=PREFIX),
        ExitCode.USAGE,
    )
    assert line.startswith(f"{PREFIX}--env: unknown environment 'nope'; use one of ")
    assert all(env in line for env in ("dev", "prod", "staging"))


def test_environment_without_governance_is_one_line(config_dir: Path) -> None:
    data = environment_data("dev")
    del data["governance"]
    data["observability"]["metrics"]["task_governance"] = "DISABLED"  # Kueue metrics need it
    _write(config_dir, "nogov", data)
    expect_failure(
        "teams",
        "--env",
        "nogov",
        code=ExitCode.USAGE,
        starts_with=f"{PREFIX}--env: nogov has no governance section, so it has no teams or "
        "priority classes; add one to config/nogov.yaml",
    )


def test_invalid_environment_file_is_one_line(config_dir: Path) -> None:
    data = environment_data("dev")
    data["hyperpod"]["instance_groups"][0]["count"] = -1
    _write(config_dir, "broken", data)
    expect_failure(
        "teams",
        "--env",
        "broken",
        code=ExitCode.USAGE,
        starts_with=f"{PREFIX}--env: {config_dir / 'broken.yaml'}: "
        "hyperpod.instance_groups[0].count: -1 is too small; use 0 or more",
    )


@pytest.mark.parametrize(
    ("args", "starts_with"),
    [
        ([], f"{PREFIX}--env: missing; pass --env"),
        (["--env"], f"{PREFIX}Option '--env' requires an argument"),
        (["--env", "prod", "--team", "x"], f"{PREFIX}No such option: --team"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], starts_with: str) -> None:
    expect_failure("teams", *args, code=ExitCode.USAGE, starts_with=starts_with)


# --------------------------------------------------------------- the table and the renderer


def _trainer_config_of(manifest: dict[str, Any]) -> tuple[JobConfig, int]:
    """The config each rank of `manifest` builds (training.train's own parsing), and the
    world it runs in: the replicas times the processes per node."""
    (replica,) = manifest["spec"]["replicaSpecs"]
    (container,) = replica["template"]["spec"]["containers"]
    # Kubernetes expands $(VAR) in args from the container's env before the trainer starts.
    s3_path = f"$({MANAGED_S3_PATH_ENV})"
    args = [arg.replace(s3_path, "s3://bucket/managed-tier") for arg in container["args"]]
    config, _, _ = parse_args(args)
    return config, replica["replicas"] * int(manifest["spec"]["nprocPerNode"])


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_job_size_the_table_promises_renders_and_the_trainer_runs_it(env: str) -> None:
    # From 1 node to the table's "max job nodes", on every accelerated group of every team,
    # with every preset: the renderer makes the job and each rank's config accepts its world.
    # One node more is the one-line quota refusal.
    config = environment(env).config
    sizes = 0
    for team in teams_report(config)["teams"]:
        for group in team["groups"]:
            if not lookup(group["instance_type"]).has_accelerators:
                continue
            largest = group["max_job_nodes"]
            where = {"team": team["name"], "instance_group": group["instance_group"]}
            for preset, nodes in itertools.product(PRESETS, range(1, largest + 1)):
                spec = spec_for_environment(
                    config, **where, nodes=nodes, image=IMAGE, preset=preset
                )
                trainer, world = _trainer_config_of(render_job(spec))
                assert (
                    world
                    == JobPlan(spec).world_size
                    == nodes * lookup(spec.platform.instance_type).accelerator_count
                )
                assert trainer.training.global_batch_size == JobPlan(spec).global_batch_size
                trainer.check_world(world)
                sizes += 1
            with pytest.raises(JobRequestError) as refused:
                spec_for_environment(config, **where, nodes=largest + 1, image=IMAGE)
            (line,) = refused.value.problems
            assert "\n" not in line
            if largest:
                assert line.startswith(f"--nodes: {largest + 1} nodes (+0 spares) exceed")
                assert line.endswith(f"ask for at most {largest}")
            else:
                assert line.startswith(f"--instance-group: team {team['name']} may use less")
    assert sizes


def test_the_research_teams_guaranteed_and_borrowed_sizes_run_a_fitted_8b_batch() -> None:
    # prod's research team: 6 guaranteed + 6 borrowable p5 nodes. 8b's 512 splits over
    # neither 48 nor 96 ranks: the job runs the nearest batch that does and says so.
    config = environment("prod").config
    research = next(t for t in teams_report(config)["teams"] if t["name"] == "research")
    (p5,) = (g for g in research["groups"] if g["instance_group"] == "gpu-p5")
    assert (p5["guaranteed_nodes"], p5["max_job_nodes"]) == (6, 12)
    for nodes, batch in ((6, 528), (12, 480)):
        spec = spec_for_environment(
            config, team="research", instance_group="gpu-p5", nodes=nodes, image=IMAGE
        )
        trainer, world = _trainer_config_of(render_job(spec))
        assert (trainer.preset, world, trainer.training.global_batch_size) == (
            "8b",
            nodes * 8,
            batch,
        )
