"""The platform's Grafana dashboards (platform_constructs/observability/dashboards/), checked
for what Grafana's schema does not show and held to the metric catalogue: every Prometheus
query through `check_promql`, every CloudWatch query against the catalogue's CloudWatch
table. `check_dashboards` returns one self-contained line per problem (an empty list when
all is well)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from config.observability_metrics import CLOUDWATCH_METRICS
from platform_constructs.observability import dashboard_files, rule_files
from tools.promql_check import (
    GRAFANA_BUILTINS,
    GRAFANA_VARIABLE,
    Recorded,
    check_promql,
    grafana_to_promql,
)
from tools.rule_check import generated_rule_documents, load_rules, recorded_series

UID_MAX: Final = 40
GRID_COLUMNS: Final = 24

# The datasource variables every panel goes through: name -> datasource plugin type.
DATASOURCE_VARIABLES: Final[Mapping[str, str]] = {
    "datasource": "prometheus",
    "cloudwatch": "cloudwatch",
}
_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.S
)
_QUERY_RESULT = re.compile(r"^\s*query_result\((.*)\)\s*$", re.S)


def load_dashboard(path: Path) -> object:
    """A dashboard file's data; duplicate keys are refused."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        duplicates = sorted({key for key in keys if keys.count(key) > 1})
        if duplicates:
            raise ValueError(f"{path.name}: duplicate keys {duplicates}")
        return dict(pairs)

    data: object = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicates)
    return data


def _panels(panels: object) -> Iterator[Mapping[str, Any]]:
    """Every panel, rows' collapsed panels included."""
    if not isinstance(panels, list):
        return
    for panel in panels:
        if isinstance(panel, Mapping):
            yield panel
            yield from _panels(panel.get("panels"))


def _variables(dashboard: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    templating = dashboard.get("templating")
    items = templating.get("list") if isinstance(templating, Mapping) else None
    return [v for v in items or [] if isinstance(v, Mapping)]


def _datasource_plugin(datasource: object) -> str | None:
    """The plugin type of a `{type, uid: "${variable}"}` datasource reference that goes
    through one of DATASOURCE_VARIABLES with its own type, else None."""
    if not isinstance(datasource, Mapping):
        return None
    match = re.fullmatch(r"\$\{(\w+)\}", str(datasource.get("uid", "")))
    plugin = DATASOURCE_VARIABLES.get(match[1]) if match else None
    return plugin if plugin is not None and datasource.get("type") == plugin else None


_DATASOURCE_RULE: Final = (
    "datasource must be {type: prometheus, uid: ${datasource}} or "
    "{type: cloudwatch, uid: ${cloudwatch}}"
)
_VARIABLE_OF: Final = {plugin: name for name, plugin in DATASOURCE_VARIABLES.items()}


def _check_prometheus_query(expr: str, recorded: Recorded) -> tuple[list[str], frozenset[str]]:
    promql, used, problems = grafana_to_promql(expr)
    return problems + list(check_promql(promql, recorded=recorded).problems), used


def _check_cloudwatch_target(target: Mapping[str, Any]) -> list[str]:
    if target.get("expression") and target.get("metricEditorMode") == 1:
        return []  # metric math over the panel's other queries, which are checked themselves
    namespace, name = str(target.get("namespace")), str(target.get("metricName"))
    metric = CLOUDWATCH_METRICS.get((namespace, name))
    if metric is None:
        return [f"CloudWatch metric {namespace}/{name} is not in config/observability_metrics.py"]
    problems = []
    dimensions = set(target.get("dimensions") or {}) | set(target.get("dimensionFilters") or {})
    if "dimensionKey" in target:
        dimensions.add(str(target["dimensionKey"]))
    if unknown := sorted(dimensions - metric.dimensions):
        problems.append(f"{metric.name} has no dimension {unknown}")
    if "statistic" in target and target["statistic"] not in metric.statistics:
        problems.append(
            f"{metric.name}: statistic {target.get('statistic')!r} is not one of {sorted(metric.statistics)}"
        )
    return problems


def _variable_problems(
    variable: Mapping[str, Any], recorded: Recorded
) -> tuple[list[str], frozenset[str]]:
    """Problems in a query variable's query, and the variables it uses."""
    if variable.get("type") == "datasource":
        plugin = DATASOURCE_VARIABLES.get(str(variable.get("name")))
        if plugin is None:
            return [
                f"datasource variable {variable.get('name')!r} is not one of {sorted(DATASOURCE_VARIABLES)}"
            ], frozenset()
        if variable.get("query") != plugin:
            return [
                f"datasource variable {variable['name']} must have query {plugin!r}"
            ], frozenset()
        return [], frozenset()
    if variable.get("type") != "query":
        return [], frozenset()
    plugin = _datasource_plugin(variable.get("datasource"))
    if plugin is None:
        return [_DATASOURCE_RULE], frozenset()
    query = variable.get("query")
    if plugin == "cloudwatch":
        if not isinstance(query, Mapping):
            return ["a CloudWatch variable's query is an object"], frozenset()
        return _check_cloudwatch_target(query), frozenset()
    text = query.get("query") if isinstance(query, Mapping) else query
    if not isinstance(text, str):
        return ["a Prometheus variable's query is a string"], frozenset()
    if match := _LABEL_VALUES.match(text):
        selector, label = match[1], match[2]
        if selector is None:
            return [], frozenset()
        promql, used, problems = grafana_to_promql(selector)
        found = check_promql(promql, recorded=recorded)
        problems += found.problems
        if found.labels is not None and label not in found.labels:
            problems.append(f"label_values: {label} is not a label of {selector.strip()}")
        return problems, used
    if match := _QUERY_RESULT.match(text):
        return _check_prometheus_query(match[1], recorded)
    return [f"query {text!r} is neither label_values(...) nor query_result(...)"], frozenset()


def check_dashboards(documents: Mapping[str, object], *, recorded: Recorded = ()) -> list[str]:
    """Problems Grafana's schema does not show, keyed by file name: uids unique across the
    files (at most 40 characters), panel ids unique, panels inside the 24-column grid, the
    datasource variables (`datasource`, and `cloudwatch` where a panel uses CloudWatch),
    every panel and query variable going through them, every Prometheus query parsed and
    checked against the catalogue (`recorded`: as for `check_promql`), every
    CloudWatch query against the catalogue's CloudWatch table, every variable a query uses
    defined."""
    problems: list[str] = []
    uids: dict[str, str] = {}
    for source, dashboard in documents.items():
        if not isinstance(dashboard, Mapping):
            problems.append(f"{source}: a dashboard is a JSON object")
            continue
        uid = dashboard.get("uid")
        if not isinstance(uid, str) or not 1 <= len(uid) <= UID_MAX:
            problems.append(f"{source}: uid must be 1-{UID_MAX} characters")
        elif uid in uids:
            problems.append(f"{source}: uid {uid!r} is also {uids[uid]}'s")
        else:
            uids[uid] = source
        problems += [f"{source}: {p}" for p in _dashboard_problems(dashboard, recorded)]
    return problems


def _dashboard_problems(dashboard: Mapping[str, Any], recorded: Recorded) -> list[str]:
    problems: list[str] = []
    variables = _variables(dashboard)
    defined = {str(v.get("name")) for v in variables}
    used: set[str] = set()
    for variable in variables:
        found, uses = _variable_problems(variable, recorded)
        problems += [f"variable {variable.get('name')}: {p}" for p in found]
        used |= uses
    datasources_used: set[str] = set()
    ids: set[object] = set()
    for panel in _panels(dashboard.get("panels")):
        where = f"panel {panel.get('id')} ({panel.get('title')})"
        if panel.get("id") in ids:
            problems.append(f"{where}: panel id {panel.get('id')} is used twice")
        ids.add(panel.get("id"))
        grid = panel.get("gridPos")
        x, w = (grid.get("x"), grid.get("w")) if isinstance(grid, Mapping) else (None, None)
        if isinstance(x, int) and isinstance(w, int) and x + w > GRID_COLUMNS:
            problems.append(f"{where}: gridPos x + w exceeds {GRID_COLUMNS} columns")
        if panel.get("type") == "row":
            continue
        panel_plugin = _datasource_plugin(panel.get("datasource"))
        if panel_plugin is None:
            problems.append(f"{where}: {_DATASOURCE_RULE}")
        for target in panel.get("targets") or []:
            if not isinstance(target, Mapping):
                continue
            at = f"{where} target {target.get('refId')}"
            plugin = _datasource_plugin(target.get("datasource", panel.get("datasource")))
            if plugin is None:
                problems.append(f"{at}: {_DATASOURCE_RULE}")
                continue
            if panel_plugin is not None and plugin != panel_plugin:
                problems.append(f"{at}: the target's datasource is not the panel's")
            datasources_used.add(_VARIABLE_OF[plugin])
            if plugin == "prometheus":
                expr = target.get("expr")
                if not isinstance(expr, str) or not expr.strip():
                    problems.append(f"{at}: a Prometheus target needs `expr`")
                    continue
                found, uses = _check_prometheus_query(expr, recorded)
                problems += [f"{at}: {p}" for p in found]
                used |= uses
            else:
                problems += [f"{at}: {p}" for p in _check_cloudwatch_target(target)]
                dimensions = json.dumps(target.get("dimensions") or {})
                used |= {m[1] or m[2] for m in GRAFANA_VARIABLE.finditer(dimensions)}
    for name in sorted({"datasource"} | datasources_used):
        if not any(v.get("name") == name and v.get("type") == "datasource" for v in variables):
            problems.append(
                f"templating has no datasource variable {name!r} ({DATASOURCE_VARIABLES[name]})"
            )
    if undefined := sorted(used - defined - GRAFANA_BUILTINS):
        problems.append(f"queries use undefined variables {undefined}")
    return problems


def check_dashboard_files(
    paths: Collection[Path] | None = None, *, recorded: Recorded | None = None
) -> list[str]:
    """`check_dashboards` over dashboard files (default: all of them), with the records of
    the rules files and the generated rule documents (default) as known metrics."""
    files = dashboard_files() if paths is None else list(paths)
    if recorded is None:
        recorded = recorded_series(
            {**{path.stem: load_rules(path) for path in rule_files()}, **generated_rule_documents()}
        )
    return check_dashboards({path.name: load_dashboard(path) for path in files}, recorded=recorded)
