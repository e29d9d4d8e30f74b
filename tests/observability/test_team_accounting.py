"""GPU accounting per team and per job: the recording rules' arithmetic, proved by promtool's
rule unit tests (`promtool test rules`) on input series whose answers are worked out by hand;
the team quotas recorded from config; the per-job dashboard and its link."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from config.dashboards import JOB_DASHBOARD_UID, JOB_DASHBOARD_VARIABLES, job_dashboard_url
from config.gpu_accounting import team_gpu_quotas
from platform_constructs.observability import (
    DASHBOARDS_DIR,
    QUOTA_NAMESPACE,
    QUOTA_RECORD,
    RULES_DIR,
    team_quota_rules,
)
from tests.support import ENVIRONMENTS, environment
from tools.observability_check import (
    check_rule_documents,
    generated_rule_documents,
    load_rules,
    rule_files,
)

FOUNDATION, RESEARCH, EVALUATION = (
    f"hyperpod-ns-{t}" for t in ("foundation", "research", "evaluation")
)
DAY = 24 * 60  # minutes


def _prod_quotas() -> dict[str, float]:
    config = environment("prod").config
    return team_gpu_quotas(config.governance, config.hyperpod.instance_groups)


def test_quotas_are_guaranteed_nodes_times_gpus_per_node() -> None:
    # prod: 16 p5 nodes (8 GPUs each) shared 8 / 6 / 2 nodes (config/prod.yaml).
    assert _prod_quotas() == {FOUNDATION: 64.0, RESEARCH: 48.0, EVALUATION: 16.0}
    dev = environment("dev").config
    # dev: 2 g5.12xlarge nodes (4 GPUs each), all the sandbox team's.
    assert team_gpu_quotas(dev.governance, dev.hyperpod.instance_groups) == {
        "hyperpod-ns-sandbox": 8.0
    }


def test_quota_rules_record_one_series_per_team() -> None:
    document = yaml.safe_load(team_quota_rules({FOUNDATION: 64.0, RESEARCH: 4.5}))
    (group,) = document["groups"]
    assert group["rules"] == [
        {"record": QUOTA_RECORD, "expr": "vector(64)", "labels": {"namespace": FOUNDATION}},
        {"record": QUOTA_RECORD, "expr": "vector(4.5)", "labels": {"namespace": RESEARCH}},
    ]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_environments_rules_pass_the_checks(env: str) -> None:
    config = environment(env).config
    quotas = team_gpu_quotas(config.governance, config.hyperpod.instance_groups)
    documents = {path.stem: load_rules(path) for path in rule_files()}
    assert check_rule_documents({**documents, **generated_rule_documents(quotas)}) == []


def test_accounting_rules_without_the_quota_records_fail_the_check() -> None:
    documents = {path.stem: load_rules(path) for path in rule_files()}
    problems = check_rule_documents(documents)
    assert problems and all(QUOTA_RECORD in p for p in problems), problems


# --- promtool ------------------------------------------------------------------------


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def _gpu(namespace: str | None, pod: str | None, gpu: str, util: int, fb: int, watts: int):
    labels = {"gpu": gpu, "Hostname": f"node-{pod or 'free'}", "UUID": f"GPU-{pod}-{gpu}"}
    if namespace is not None and pod is not None:
        labels |= {"namespace": namespace, "pod": pod, "container": "trainer"}
    steady = f"x{DAY}"
    return [
        _series("DCGM_FI_DEV_GPU_UTIL", labels, f"{util}{steady}"),
        _series("DCGM_FI_DEV_FB_USED", labels, f"{fb}{steady}"),
        _series("DCGM_FI_DEV_POWER_USAGE", labels, f"{watts}{steady}"),
    ]


def _owner(namespace: str, pod: str, kind: str, name: str) -> dict[str, str]:
    labels = {
        "namespace": namespace,
        "pod": pod,
        "uid": f"uid-{pod}",
        "owner_kind": kind,
        "owner_name": name,
        "owner_is_controller": "true",
    }
    return _series("kube_pod_owner", labels, f"1x{DAY}")


# A day of a prod cluster: foundation's HyperPodPyTorchJob `llama` on two GPUs of two pods
# (80 % and 40 %), research's batch Job `eval-1` holding one idle GPU, evaluation holding
# none, a GPU no pod holds (no namespace: not any team's) and a Deployment's pod in a team
# namespace (owned by a ReplicaSet: no job).
INPUT = [
    *_gpu(FOUNDATION, "llama-worker-0", "0", 80, 30000, 500),
    *_gpu(FOUNDATION, "llama-worker-1", "0", 40, 10000, 300),
    *_gpu(RESEARCH, "eval-1-abcde", "0", 0, 1000, 70),
    *_gpu(None, None, "7", 100, 70000, 690),
    _owner(FOUNDATION, "llama-worker-0", "HyperPodPyTorchJob", "llama"),
    _owner(FOUNDATION, "llama-worker-1", "HyperPodPyTorchJob", "llama"),
    _owner(RESEARCH, "eval-1-abcde", "Job", "eval-1"),
    _owner(RESEARCH, "web-7d9f-xyz", "ReplicaSet", "web-7d9f"),
]


def _samples(name: str, rows: list[tuple[dict[str, str], float]]) -> list[dict[str, Any]]:
    return [
        {
            "labels": name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}",
            "value": value,
        }
        for labels, value in rows
    ]


def _expect(expr: str, at: str, rows: list[tuple[dict[str, str], float]]) -> dict[str, Any]:
    return {"expr": expr, "eval_time": at, "exp_samples": _samples(expr, rows)}


def _team(namespace: str) -> dict[str, str]:
    return {"namespace": namespace}


def _job(namespace: str, job: str) -> dict[str, str]:
    return {"namespace": namespace, "training_job": job}


EXPECTED = [
    _expect(
        "namespace_pod:dcgm_gpu_utilization:avg",
        "10m",
        [
            ({"namespace": RESEARCH, "pod": "eval-1-abcde"}, 0),
            ({"namespace": FOUNDATION, "pod": "llama-worker-0"}, 80),
            ({"namespace": FOUNDATION, "pod": "llama-worker-1"}, 40),
        ],
    ),
    # (80 + 40) / 2; the GPU outside the team namespaces counts nowhere.
    _expect(
        "namespace:dcgm_gpu_utilization:avg",
        "10m",
        [(_team(FOUNDATION), 60), (_team(RESEARCH), 0)],
    ),
    _expect(
        "namespace:dcgm_framebuffer_used_mib:sum",
        "10m",
        [(_team(FOUNDATION), 40000), (_team(RESEARCH), 1000)],
    ),
    _expect(
        "namespace:dcgm_power_usage_watts:sum",
        "10m",
        [(_team(FOUNDATION), 800), (_team(RESEARCH), 70)],
    ),
    # A team that holds no GPU reads 0, not nothing.
    _expect(
        "namespace:gpus_allocated:count",
        "10m",
        [(_team(EVALUATION), 0), (_team(FOUNDATION), 2), (_team(RESEARCH), 1)],
    ),
    _expect(
        "namespace:gpus_idle:count",
        "40m",
        [(_team(EVALUATION), 0), (_team(FOUNDATION), 0), (_team(RESEARCH), 1)],
    ),
    # A whole day: 2 GPUs x 24 h = 48 GPU-hours of 64 x 24 = 1536 (3.125 %); research 1 x 24
    # of 48 x 24 (1/48); evaluation nothing of 16 x 24.
    _expect(
        "namespace:gpu_hours:sum1d",
        "1d",
        [(_team(EVALUATION), 0), (_team(FOUNDATION), 48), (_team(RESEARCH), 24)],
    ),
    _expect(
        "namespace:gpu_quota_hours:sum1d",
        "1d",
        [(_team(EVALUATION), 384), (_team(FOUNDATION), 1536), (_team(RESEARCH), 1152)],
    ),
    _expect(
        "namespace:gpu_hours_of_quota:ratio1d",
        "1d",
        [(_team(EVALUATION), 0), (_team(FOUNDATION), 0.03125), (_team(RESEARCH), 1 / 48)],
    ),
    # Jobs: the owner of each pod, ReplicaSets left out.
    _expect(
        "namespace_pod:training_job:info",
        "10m",
        [
            ({"namespace": RESEARCH, "pod": "eval-1-abcde", "training_job": "eval-1"}, 1),
            ({"namespace": FOUNDATION, "pod": "llama-worker-0", "training_job": "llama"}, 1),
            ({"namespace": FOUNDATION, "pod": "llama-worker-1", "training_job": "llama"}, 1),
        ],
    ),
    _expect(
        "namespace_training_job:dcgm_gpu_utilization:avg",
        "10m",
        [(_job(RESEARCH, "eval-1"), 0), (_job(FOUNDATION, "llama"), 60)],
    ),
    _expect(
        "namespace_training_job:dcgm_framebuffer_used_mib:sum",
        "10m",
        [(_job(RESEARCH, "eval-1"), 1000), (_job(FOUNDATION, "llama"), 40000)],
    ),
    _expect(
        "namespace_training_job:dcgm_power_usage_watts:sum",
        "10m",
        [(_job(RESEARCH, "eval-1"), 70), (_job(FOUNDATION, "llama"), 800)],
    ),
    _expect(
        "namespace_training_job:gpus_allocated:count",
        "10m",
        [(_job(RESEARCH, "eval-1"), 1), (_job(FOUNDATION, "llama"), 2)],
    ),
]

IDLE_SUMMARY = "1 GPUs held by hyperpod-ns-research have been idle for an hour"


def _idle_alert(at: str, firing: bool) -> dict[str, Any]:
    alert = load_rules(RULES_DIR / "teams.yaml")["groups"][-1]["rules"][0]
    description = " ".join(
        alert["annotations"]["description"]
        .replace("{{ $labels.namespace }}", RESEARCH)
        .replace("{{ $value }}", "1")
        .split()
    )
    expected = [
        {
            "exp_labels": {"severity": "warning", "namespace": RESEARCH},
            "exp_annotations": {"summary": IDLE_SUMMARY, "description": description},
        }
    ]
    return {
        "eval_time": at,
        "alertname": "TeamGPUsAllocatedIdle",
        "exp_alerts": expected if firing else [],
    }


def _promtool(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/bootstrap.sh test installs Debian's prometheus"
    quotas = tmp_path / f"{QUOTA_NAMESPACE}.yaml"
    quotas.write_text(team_quota_rules(_prod_quotas()), encoding="utf-8")
    suite = {
        "rule_files": [str(RULES_DIR / "teams.yaml"), str(quotas)],
        "evaluation_interval": "1m",
        "tests": tests,
    }
    path = tmp_path / "teams_test.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    return subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False
    )


def test_recording_rules_and_the_idle_alert_compute_what_they_say(tmp_path: Path) -> None:
    test = {
        "interval": "1m",
        "input_series": INPUT,
        "promql_expr_test": EXPECTED,
        "alert_rule_test": [_idle_alert("20m", firing=False), _idle_alert("40m", firing=True)],
    }
    result = _promtool(tmp_path, [test])
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_catches_a_wrong_expectation(tmp_path: Path) -> None:
    wrong = [*EXPECTED[:-1], _expect("namespace_training_job:gpus_allocated:count", "10m", [])]
    test = {"interval": "1m", "input_series": INPUT, "promql_expr_test": wrong}
    result = _promtool(tmp_path, [test])
    assert result.returncode == 1
    assert "namespace_training_job:gpus_allocated:count" in result.stdout + result.stderr


# --- the per-job dashboard and its link ------------------------------------------------


def test_job_dashboard_has_the_variables_the_link_sets() -> None:
    dashboard = json.loads((DASHBOARDS_DIR / "job.json").read_text(encoding="utf-8"))
    assert dashboard["uid"] == JOB_DASHBOARD_UID
    names = [v["name"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert tuple(names) == JOB_DASHBOARD_VARIABLES
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert queries and all('training_job="$training_job"' in q for q in queries)


def test_job_dashboard_url_opens_the_job() -> None:
    url = job_dashboard_url(
        "g-abc123.grafana-workspace.us-east-1.amazonaws.com",
        namespace=FOUNDATION,
        job="llama-8b",
        start=datetime(2026, 11, 26, 8, 0, tzinfo=UTC),
    )
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "https",
        "g-abc123.grafana-workspace.us-east-1.amazonaws.com",
        f"/d/{JOB_DASHBOARD_UID}",
    )
    assert parse_qs(parts.query) == {
        "var-namespace": [FOUNDATION],
        "var-training_job": ["llama-8b"],
        "from": ["1795680000000"],
        "to": ["now"],
    }


def test_job_dashboard_url_keeps_a_given_scheme_and_escapes_values() -> None:
    url = job_dashboard_url("http://localhost:3000/", namespace="ns a", job="j&b")
    assert url == "http://localhost:3000/d/hyperpod-job?var-namespace=ns+a&var-training_job=j%26b"
