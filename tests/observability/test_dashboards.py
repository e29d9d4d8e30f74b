"""The Grafana dashboards: each satisfies the structure Grafana needs to import it (a JSON
schema of the fields it requires), and every query parses and names only catalogued (or
recorded) metrics through the datasource variables; planted violations prove each check
runs."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from config.observability_metrics import CLOUDWATCH_METRICS, FSX_NAMESPACE
from platform_constructs.observability import DASHBOARDS_DIR, dashboard_files, rule_files
from tools.observability_check import (
    check_dashboard_files,
    check_dashboards,
    load_dashboard,
    load_rules,
    recorded_series,
)

EXPECTED = {
    "cluster-health.json": "hyperpod-cluster-health",
    "efa.json": "hyperpod-efa",
    "fsx.json": "hyperpod-fsx",
    "gpu.json": "hyperpod-gpu",
    "job.json": "hyperpod-job",
    "jobs.json": "hyperpod-jobs",
    "teams.json": "hyperpod-teams",
    "training.json": "hyperpod-training",
}

_DATASOURCE_REF = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"type": "string"}, "uid": {"type": "string"}},
}
_GRID_POS = {
    "type": "object",
    "required": ["h", "w", "x", "y"],
    "properties": {
        "h": {"type": "integer", "minimum": 1},
        "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23},
        "y": {"type": "integer", "minimum": 0},
    },
}
_TARGET = {
    "type": "object",
    "required": ["refId"],
    "properties": {
        "refId": {"type": "string", "minLength": 1},
        "datasource": _DATASOURCE_REF,
        "expr": {"type": "string", "minLength": 1},
        "hide": {"type": "boolean"},
    },
}
_PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "type": {"type": "string", "minLength": 1},
        "title": {"type": "string", "minLength": 1},
        "gridPos": _GRID_POS,
        "datasource": _DATASOURCE_REF,
        "targets": {"type": "array", "items": _TARGET},
        "panels": {"type": "array", "items": {"$ref": "#/$defs/panel"}},
        "fieldConfig": {
            "type": "object",
            "required": ["defaults", "overrides"],
            "properties": {"defaults": {"type": "object"}, "overrides": {"type": "array"}},
        },
    },
    # Every panel but a row shows data: it needs at least one query.
    "if": {"properties": {"type": {"not": {"const": "row"}}}},
    "then": {"required": ["targets", "datasource"], "properties": {"targets": {"minItems": 1}}},
}
_VARIABLE = {
    "type": "object",
    "required": ["name", "type"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "type": {"enum": ["query", "datasource", "custom", "constant", "interval", "textbox"]},
    },
    "allOf": [
        {
            "if": {"properties": {"type": {"const": "datasource"}}},
            "then": {"required": ["query"], "properties": {"query": {"type": "string"}}},
        },
        {
            "if": {"properties": {"type": {"const": "query"}}},
            "then": {"required": ["query", "datasource"]},
        },
    ],
}
GRAFANA_DASHBOARD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 36, "maximum": 41},
        "id": {"type": "null"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "editable": {"type": "boolean"},
        "refresh": {"type": "string"},
        "time": {
            "type": "object",
            "required": ["from", "to"],
            "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
        },
        "panels": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/panel"}},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": _VARIABLE,
                    # Every dashboard picks its Prometheus through `datasource`.
                    "contains": {
                        "type": "object",
                        "required": ["name", "type", "query"],
                        "properties": {
                            "name": {"const": "datasource"},
                            "type": {"const": "datasource"},
                            "query": {"const": "prometheus"},
                        },
                    },
                }
            },
        },
    },
    "$defs": {"panel": _PANEL},
}


def _schema_errors(dashboard: object) -> list[str]:
    validator = jsonschema.Draft202012Validator(GRAFANA_DASHBOARD_SCHEMA)
    return [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(dashboard)
    ]


@functools.cache
def _dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: load_dashboard(path) for path in dashboard_files()}


def _queries(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    def panels(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for item in items for p in (item, *panels(item.get("panels", [])))]

    return [t for panel in panels(dashboard["panels"]) for t in panel.get("targets", [])]


# --- The shipped dashboards ------------------------------------------------------------


def test_the_dashboards_are_the_expected_files_and_uids():
    dashboards = _dashboards()
    assert {name: d["uid"] for name, d in dashboards.items()} == EXPECTED
    assert all(path.parent == DASHBOARDS_DIR for path in dashboard_files())


def test_the_schema_is_itself_valid():
    jsonschema.Draft202012Validator.check_schema(GRAFANA_DASHBOARD_SCHEMA)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_dashboard_satisfies_grafanas_structure(name: str):
    assert _schema_errors(_dashboards()[name]) == []


def test_the_shipped_dashboards_pass_every_check():
    assert check_dashboard_files() == []


def test_the_files_are_formatted_json_without_a_database_id():
    for path in dashboard_files():
        text = path.read_text(encoding="utf-8")
        assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n", path.name
        assert "id" not in json.loads(text) or json.loads(text)["id"] is None


def test_fsx_panels_read_cloudwatch_aws_fsx_by_file_system():
    fsx = _dashboards()["fsx.json"]
    variables = {v["name"]: v for v in fsx["templating"]["list"]}
    assert variables["cloudwatch"]["type"] == "datasource"
    assert variables["cloudwatch"]["query"] == "cloudwatch"
    metrics = set()
    for target in _queries(fsx):
        if target["datasource"]["type"] != "cloudwatch" or target.get("metricEditorMode") == 1:
            continue
        assert target["datasource"]["uid"] == "${cloudwatch}"
        assert target["namespace"] == FSX_NAMESPACE
        assert target["dimensions"] == {"FileSystemId": "$filesystem_id"}
        metrics.add(target["metricName"])
    assert metrics == {"FreeDataStorageCapacity", "DataReadBytes", "DataWriteBytes"}
    assert {name for _, name in CLOUDWATCH_METRICS} == metrics


def test_every_prometheus_query_goes_through_the_datasource_variable():
    for name, dashboard in _dashboards().items():
        for target in _queries(dashboard):
            if "expr" in target:
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, name


def test_queues_are_chosen_by_the_cluster_queue_label_not_by_assumed_names():
    jobs = _dashboards()["jobs.json"]
    variables = {v["name"]: v for v in jobs["templating"]["list"]}
    assert variables["cluster_queue"]["definition"] == (
        "label_values(kueue_pending_workloads, cluster_queue)"
    )
    kueue = [t["expr"] for t in _queries(jobs) if "kueue_" in t.get("expr", "")]
    assert kueue and all('cluster_queue=~"$cluster_queue"' in expr for expr in kueue)


# --- Planted violations ----------------------------------------------------------------


def _gpu() -> dict[str, Any]:
    return copy.deepcopy(_dashboards()["gpu.json"])


def _first_target(dashboard: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in dashboard["panels"] if p["type"] != "row")["targets"][0]


@functools.cache
def _records() -> dict[str, frozenset[str] | None]:
    return recorded_series({path.stem: load_rules(path) for path in rule_files()})


def test_a_panel_without_grid_pos_fails_the_schema():
    dashboard = _gpu()
    del dashboard["panels"][1]["gridPos"]
    assert any("'gridPos' is a required property" in e for e in _schema_errors(dashboard))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.pop("uid"), "'uid' is a required property"),
        (lambda d: d.update(uid="x" * 41), "does not match"),
        (lambda d: d["panels"][1].pop("targets"), "'targets' is a required property"),
        (lambda d: d["panels"][1]["targets"][0].pop("refId"), "'refId' is a required property"),
        (lambda d: d["panels"][1].update(type=""), "should be non-empty"),
        (lambda d: d["panels"][1]["gridPos"].update(w=25), "25 is greater than the maximum of 24"),
        (
            lambda d: d["templating"].update(
                list=[v for v in d["templating"]["list"] if v["name"] != "datasource"]
            ),
            "does not contain items matching",
        ),
    ],
)
def test_the_schema_catches(change: Callable[[dict[str, Any]], object], expected: str):
    dashboard = _gpu()
    change(dashboard)
    errors = _schema_errors(dashboard)
    assert any(expected in e for e in errors), errors


def test_a_duplicate_uid_across_files_is_caught():
    problems = check_dashboards({"a.json": _gpu(), "b.json": _gpu()}, recorded=_records())
    assert problems == ["b.json: uid 'hyperpod-gpu' is also a.json's"]


def _plant(
    change: Callable[[dict[str, Any]], object], base: Callable[[], dict[str, Any]] = _gpu
) -> list[str]:
    dashboard = base()
    change(dashboard)
    return check_dashboards({"planted.json": dashboard}, recorded=_records())


PLANTED_DASHBOARD_VIOLATIONS: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "unknown metric": (
        lambda d: _first_target(d).update(expr="count(DCGM_FI_DEV_GPU_UTILISATION)"),
        "metric DCGM_FI_DEV_GPU_UTILISATION is not in config/observability_metrics.py",
    ),
    "syntax error": (
        lambda d: _first_target(d).update(expr='count(DCGM_FI_DEV_GPU_UTIL{gpu=~"$gpu"}'),
        "PromQL syntax error",
    ),
    "unknown label": (
        lambda d: _first_target(d).update(expr='count(DCGM_FI_DEV_GPU_UTIL{node=~"$hostname"})'),
        "DCGM_FI_DEV_GPU_UTIL has no label node",
    ),
    "unknown label on a recorded series": (
        lambda d: _first_target(d).update(expr='hostname:dcgm_gpu_utilization:avg{gpu="0"}'),
        "hostname:dcgm_gpu_utilization:avg has no label gpu",
    ),
    "undefined variable": (
        lambda d: _first_target(d).update(expr='count(DCGM_FI_DEV_GPU_UTIL{gpu=~"$gpus"})'),
        "queries use undefined variables ['gpus']",
    ),
    "variable outside a label value": (
        lambda d: _first_target(d).update(expr="topk($gpu, DCGM_FI_DEV_GPU_UTIL)"),
        "variable $gpu outside a quoted label value",
    ),
    "fixed datasource": (
        lambda d: _first_target(d).update(datasource={"type": "prometheus", "uid": "abc123"}),
        "datasource must be {type: prometheus, uid: ${datasource}}",
    ),
    "datasource variable of the wrong type": (
        lambda d: next(v for v in d["templating"]["list"] if v["name"] == "datasource").update(
            query="loki"
        ),
        "datasource variable datasource must have query 'prometheus'",
    ),
    "duplicate panel id": (
        lambda d: d["panels"][2].update(id=d["panels"][1]["id"]),
        "is used twice",
    ),
    "panel beyond the grid": (
        lambda d: d["panels"][1]["gridPos"].update(x=20, w=8),
        "gridPos x + w exceeds 24 columns",
    ),
    "unknown metric in a variable query": (
        lambda d: next(v for v in d["templating"]["list"] if v["name"] == "hostname").update(
            query={"query": "label_values(dcgm_gpu_util, Hostname)"}
        ),
        "metric dcgm_gpu_util is not in",
    ),
    "label_values of a label the metric lacks": (
        lambda d: next(v for v in d["templating"]["list"] if v["name"] == "hostname").update(
            query="label_values(DCGM_FI_DEV_GPU_UTIL, node)"
        ),
        "label_values: node is not a label of DCGM_FI_DEV_GPU_UTIL",
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTED_DASHBOARD_VIOLATIONS))
def test_the_dashboard_checker_catches(case: str):
    change, expected = PLANTED_DASHBOARD_VIOLATIONS[case]
    problems = _plant(change)
    assert any(expected in problem for problem in problems), problems


def _fsx() -> dict[str, Any]:
    return copy.deepcopy(_dashboards()["fsx.json"])


def _cloudwatch_target(dashboard: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in _queries(dashboard) if t.get("metricName") == "FreeDataStorageCapacity")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: _cloudwatch_target(d).update(metricName="FreeStorageCapacity"),
            "CloudWatch metric AWS/FSx/FreeStorageCapacity is not in",
        ),
        (
            lambda d: _cloudwatch_target(d).update(dimensions={"FileCacheId": "$filesystem_id"}),
            "FreeDataStorageCapacity has no dimension ['FileCacheId']",
        ),
        (lambda d: _cloudwatch_target(d).update(statistic="p99"), "statistic 'p99' is not one of"),
        (
            lambda d: d["templating"].update(
                list=[v for v in d["templating"]["list"] if v["name"] != "cloudwatch"]
            ),
            "templating has no datasource variable 'cloudwatch'",
        ),
        (
            lambda d: _cloudwatch_target(d).update(dimensions={"FileSystemId": "$fs"}),
            "queries use undefined variables ['fs']",
        ),
    ],
)
def test_the_cloudwatch_checks_catch(change: Callable[[dict[str, Any]], object], expected: str):
    problems = _plant(change, _fsx)
    assert any(expected in problem for problem in problems), problems


def test_a_duplicate_key_in_a_dashboard_file_is_refused(tmp_path: Path):
    path = tmp_path / "dup.json"
    path.write_text('{"uid": "a", "uid": "b"}')
    with pytest.raises(ValueError, match="duplicate keys"):
        load_dashboard(path)
