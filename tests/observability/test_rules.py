"""The Prometheus rule files and the metric catalogue: every file is a valid rule groups
namespace, every expression parses and names only catalogued (or recorded) metrics and
labels; planted violations prove each check runs."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from config.kubernetes import TEAM_NAMESPACE_PREFIX
from config.observability_metrics import (
    HISTOGRAM_SUFFIXES,
    METRICS,
    SERIES,
    TRAINER,
    Kind,
    series_labels,
)
from platform_constructs.observability import RULES_DIR, dashboard_files, rule_files
from tools.observability_check import (
    check_promql,
    check_rule_documents,
    check_rule_files,
    load_dashboard,
    load_rules,
    recorded_names,
    rule_namespace_name,
    rule_namespaces,
)

EXPECTED_FILES = ["efa", "gpu", "jobs", "nodes", "teams", "training"]


def _documents() -> dict[str, object]:
    return {path.stem: load_rules(path) for path in rule_files()}


def _alerts() -> list[dict[str, Any]]:
    return [
        rule
        for document in _documents().values()
        for group in document["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


# --- The shipped files ---------------------------------------------------------------


def test_rule_files_are_the_expected_namespaces_sorted():
    files = rule_files()
    assert [path.stem for path in files] == EXPECTED_FILES
    assert files == sorted(files)
    assert all(path.parent == RULES_DIR for path in files)


def test_each_file_is_a_valid_namespace_whose_data_is_the_file():
    namespaces = rule_namespaces()
    assert list(namespaces) == EXPECTED_FILES
    for path in rule_files():
        name = rule_namespace_name(path)
        assert re.fullmatch(r"[0-9A-Za-z][-.0-9A-Z_a-z]*", name) and len(name) <= 64
        assert namespaces[name] == path.read_text(encoding="utf-8")


def test_the_shipped_rule_files_pass_every_check():
    assert check_rule_files() == []


def test_every_alert_carries_a_known_severity_and_both_annotations():
    alerts = _alerts()
    assert len(alerts) >= 20
    assert {alert["labels"]["severity"] for alert in alerts} <= {"critical", "warning", "info"}
    assert all(
        alert["annotations"]["summary"] and alert["annotations"]["description"] for alert in alerts
    )


def test_alert_names_are_unique():
    names = [alert["alert"] for alert in _alerts()]
    assert len(names) == len(set(names))


def test_each_area_has_its_alerts():
    names = {alert["alert"] for alert in _alerts()}
    for expected in (
        "GPUXidError",
        "GPUTemperatureCritical",
        "EFAReceiveDrops",
        "NodeNotReady",
        "WorkloadsInadmissible",
        "TrainingJobRestartingOften",
        "TrainingGoodputLow",
        "TrainingCheckpointFailed",
    ):
        assert expected in names


def test_every_recording_rule_is_used_by_a_rule_or_a_dashboard():
    documents = _documents()
    recorded = recorded_names(documents)
    assert recorded
    used = {
        name
        for document in documents.values()
        for group in document["groups"]
        for rule in group["rules"]
        for name in check_promql(rule["expr"], recorded=recorded).recorded
    }
    used |= {name for path in dashboard_files() for name in recorded if name in path.read_text()}
    assert recorded <= used, recorded - used


def test_team_restarts_select_the_team_namespaces_of_config():
    text = (RULES_DIR / "jobs.yaml").read_text()
    assert f'namespace=~"{TEAM_NAMESPACE_PREFIX}.+"' in text
    jobs_dashboard = load_dashboard(next(p for p in dashboard_files() if p.name == "jobs.json"))
    variables = {v["name"]: v for v in jobs_dashboard["templating"]["list"]}
    assert variables["namespace"]["allValue"] == f"{TEAM_NAMESPACE_PREFIX}.+"


# --- The catalogue ----------------------------------------------------------------------


def test_every_catalogued_metric_has_a_collector_and_a_document():
    for metric in METRICS.values():
        assert metric.source.collector and metric.source.document, metric.name
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", metric.name)
        assert {"instance", "job"} <= metric.series_labels(metric.series()[0])


def test_histograms_are_stored_as_bucket_sum_and_count():
    histograms = [m for m in METRICS.values() if m.kind is Kind.HISTOGRAM]
    assert {m.name for m in histograms} == {
        "kueue_admission_wait_time_seconds",
        "hyperpod_training_operator_jobs_restart_latency",
    }
    for metric in histograms:
        assert metric.series() == tuple(metric.name + s for s in HISTOGRAM_SUFFIXES)
        assert metric.name not in SERIES
        assert "le" in (series_labels(metric.name + "_bucket") or set())
        assert "le" not in (series_labels(metric.name + "_count") or {"le"})


def test_the_trainer_metrics_are_marked_as_this_projects_trainer():
    trainer = {name for name, metric in METRICS.items() if metric.source is TRAINER}
    assert trainer == {
        "hptrain_step_seconds",
        "hptrain_tokens_per_second",
        "hptrain_goodput_ratio",
        "hptrain_checkpoint_blocking_seconds",
        "hptrain_checkpoints_committed_total",
        "hptrain_checkpoints_failed_total",
        "hptrain_badput_seconds_total",
        "hptrain_recovery_detect_seconds",
        "hptrain_recovery_abort_seconds",
        "hptrain_recovery_rendezvous_seconds",
        "hptrain_recovery_state_transfer_seconds",
        "hptrain_recovery_first_step_seconds",
    }
    assert all(METRICS[name].source.collector == "this project's trainer" for name in trainer)
    # The collector's labels; the badput counter splits by cause as well.
    assert all(
        METRICS[name].labels
        == {"training_job", "namespace"}
        | ({"cause"} if name == "hptrain_badput_seconds_total" else set())
        for name in trainer
    )


# --- The PromQL checker on planted expressions ------------------------------------------


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(hptrain_not_a_metric_total[5m]) > 0", "metric hptrain_not_a_metric_total is not in"),
        ("sum(rate(DCGM_FI_DEV_XID_ERRORS[5m])", "PromQL syntax error"),
        ("DCGM_FI_DEV_GPU_TEMP{hostname='a'} > 80", "DCGM_FI_DEV_GPU_TEMP has no label hostname"),
        ("sum by (hostname) (DCGM_FI_DEV_GPU_UTIL)", "sum by (hostname) names ['hostname']"),
        (
            "histogram_quantile(0.9, sum by (cluster_queue) (rate(kueue_admission_wait_time_seconds_bucket[5m])))",
            "histogram_quantile names ['le']",
        ),
        (
            "kueue_admission_wait_time_seconds > 0",
            "metric kueue_admission_wait_time_seconds is not in",
        ),
        ("kueue_pending_workloads{le='1'}", "kueue_pending_workloads has no label le"),
        ('{__name__=~"DCGM.*"}', "has no metric name"),
        (
            "node_load15 / on (instance) group_left (nodename) count by (instance) (node_cpu_seconds_total)",
            "group_left (nodename)",
        ),
        ("up / on (node) kube_node_info", "left side of / on (node)"),
        ("sum without (cpus) (node_cpu_seconds_total)", "sum without (cpus)"),
        ('label_replace(up, "x", "$1", "hostname", "(.*)")', "label_replace names ['hostname']"),
    ],
)
def test_the_promql_checker_catches(expr: str, problem: str):
    problems = check_promql(expr).problems
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "expr",
    [
        "sum by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL{cluster_id='x', instance=~'.*'})",
        "histogram_quantile(0.5, sum by (le) (rate(hyperpod_training_operator_jobs_restart_latency_bucket[5m])))",
        'count(kube_node_status_condition{condition="Ready", status="true"} == 0) or vector(0)',
        "node_load15 / on (instance) count by (instance) (node_cpu_seconds_total)",
        'label_replace(up, "host", "$1", "instance", "(.*):.*")',
        "topk by (namespace) (3, hptrain_tokens_per_second)",
    ],
)
def test_the_promql_checker_accepts(expr: str):
    assert check_promql(expr).problems == ()


def test_inferred_labels_follow_aggregation_and_matching():
    assert check_promql("sum by (namespace, job) (hptrain_goodput_ratio)").labels == {
        "namespace",
        "job",
    }
    assert check_promql("count(up)").labels == frozenset()
    assert check_promql("node_load15 / on (instance) node_load5").labels == {"instance"}
    assert check_promql("some:recorded:series", recorded={"some:recorded:series"}).labels is None


# --- The rules checker on planted documents --------------------------------------------


def _base() -> dict[str, Any]:
    return {
        "groups": [
            {
                "name": "g",
                "rules": [
                    {
                        "record": "hostname:dcgm_gpu_util:avg",
                        "expr": "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)",
                    },
                    {
                        "alert": "GPUIdle",
                        "expr": "hostname:dcgm_gpu_util:avg < 1",
                        "for": "30m",
                        "labels": {"severity": "info"},
                        "annotations": {"summary": "idle", "description": "{{ $labels.Hostname }}"},
                    },
                ],
            }
        ]
    }


def _alert(document: dict[str, Any]) -> dict[str, Any]:
    rule: dict[str, Any] = document["groups"][0]["rules"][1]
    return rule


def test_the_planted_base_document_is_clean():
    assert check_rule_documents({"planted": _base()}) == []


def _plant(change: Any) -> list[str]:
    document = copy.deepcopy(_base())
    change(document)
    return check_rule_documents({"planted": document})


PLANTED_RULE_VIOLATIONS = {
    "unknown metric": (
        lambda d: _alert(d).update(expr="rate(hptrain_nonexistent_total[5m]) > 0"),
        "metric hptrain_nonexistent_total is not in config/observability_metrics.py",
    ),
    "syntax error": (
        lambda d: _alert(d).update(expr="sum(rate(DCGM_FI_DEV_XID_ERRORS[5m]) > 0"),
        "PromQL syntax error",
    ),
    "no severity": (
        lambda d: _alert(d)["labels"].pop("severity"),
        "labels.severity must be one of",
    ),
    "unknown severity": (
        lambda d: _alert(d)["labels"].update(severity="page"),
        "labels.severity must be one of",
    ),
    "no for": (lambda d: _alert(d).pop("for"), "`for` is required"),
    "bad for": (lambda d: _alert(d).update({"for": "5 minutes"}), "is not a Prometheus duration"),
    "no description": (
        lambda d: _alert(d)["annotations"].pop("description"),
        "annotations.description must be a non-empty string",
    ),
    "alert and record": (
        lambda d: _alert(d).update(record="x:y:z"),
        "exactly one of `alert` and `record`",
    ),
    "unknown key": (lambda d: _alert(d).update(exprs="up"), "unknown keys ['exprs']"),
    "duplicate group": (
        lambda d: d["groups"].append(copy.deepcopy(d["groups"][0])),
        "group name 'g' is used twice",
    ),
    "no catalogued metric": (
        lambda d: _alert(d).update(expr="vector(1) > 0"),
        "references no catalogued metric",
    ),
    "unknown label in annotation": (
        lambda d: _alert(d)["annotations"].update(summary="{{ $labels.node }}"),
        "uses $labels.node, which the alert does not have",
    ),
    "record of a catalogued name": (
        lambda d: d["groups"][0]["rules"][0].update(record="DCGM_FI_DEV_GPU_UTIL"),
        "must be a metric name of the form level:metric:operations",
    ),
    "unknown label on a metric": (
        lambda d: _alert(d).update(expr='DCGM_FI_DEV_GPU_TEMP{node="a"} > 80'),
        "DCGM_FI_DEV_GPU_TEMP has no label node",
    ),
    "not a groups document": (lambda d: d.update(rules=[]), "one key, `groups`"),
}


@pytest.mark.parametrize("case", sorted(PLANTED_RULE_VIOLATIONS))
def test_the_rules_checker_catches(case: str):
    change, expected = PLANTED_RULE_VIOLATIONS[case]
    problems = _plant(change)
    assert any(expected in problem for problem in problems), problems


def test_a_record_is_known_to_other_files_and_counts_as_its_metrics():
    recording = {"groups": [_base()["groups"][0] | {"rules": [_base()["groups"][0]["rules"][0]]}]}
    alerting = {"groups": [{"name": "a", "rules": [_base()["groups"][0]["rules"][1]]}]}
    assert check_rule_documents({"recording": recording, "alerting": alerting}) == []
    problems = check_rule_documents({"alerting": alerting})
    assert any("metric hostname:dcgm_gpu_util:avg is not in" in p for p in problems), problems
    assert any("references no catalogued metric" in p for p in problems), problems


def test_a_bad_namespace_name_is_caught():
    problems = check_rule_documents({"bad name!": _base(), "-dash": _base(), "x" * 65: _base()})
    assert len([p for p in problems if "namespace name" in p]) == 3, problems


def test_the_same_record_twice_is_caught():
    document = _base()
    document["groups"].append({"name": "h", "rules": [document["groups"][0]["rules"][0]]})
    problems = check_rule_documents({"planted": document})
    assert any("would write the same series" in p for p in problems), problems
