"""The checks that hold the platform's alert rules and dashboards
(platform_constructs/observability/) to the metric catalogue (config/observability_metrics.py).

Each rules file is loaded as one rule groups namespace named after the file
(`rule_namespaces()`). The checkers return one self-contained line per problem (an empty list
when all is well): `check_promql` (one expression), `check_rule_documents` (rule files),
`check_dashboards` (dashboard JSON). They parse PromQL with the `promql-parser` package, a
development dependency.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import promql_parser
import yaml

from config.kubernetes import TEAM_NAMESPACE_PREFIX
from config.loader import read_yaml
from config.observability_metrics import CLOUDWATCH_METRICS, SERIES, series_labels
from platform_constructs.observability import (
    QUOTA_NAMESPACE,
    dashboard_files,
    rule_files,
    team_quota_rules,
)

# AWS::APS::RuleGroupsNamespace Name.
NAMESPACE_NAME: Final = re.compile(r"^[0-9A-Za-z][-.0-9A-Z_a-z]*$")
NAMESPACE_NAME_MAX: Final = 64
SEVERITIES: Final = ("critical", "warning", "info")
# Prometheus' duration syntax (model.ParseDuration): units in decreasing order, or "0".
DURATION: Final = re.compile(r"^(0|(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")
METRIC_NAME: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
ALERT_NAME: Final = re.compile(r"^[A-Z][A-Za-z0-9]*$")
UID_MAX: Final = 40
GRID_COLUMNS: Final = 24

# The datasource variables every panel goes through: name -> datasource plugin type.
DATASOURCE_VARIABLES: Final[Mapping[str, str]] = {
    "datasource": "prometheus",
    "cloudwatch": "cloudwatch",
}
# Grafana's built-in variables that stand for a duration (range selectors, subqueries).
GRAFANA_DURATIONS: Final[Mapping[str, str]] = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}
GRAFANA_BUILTINS: Final = frozenset(
    {*GRAFANA_DURATIONS, "__interval_ms", "__range_s", "__range_ms", "__all"}
)
# `${name}`, `${name:format}` and `$name` (not `$1`: a regex group in a replacement).
_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::[^}]*)?\}|\$([A-Za-z_]\w*)")
_TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")
_LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(.*),\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$", re.S
)
_QUERY_RESULT = re.compile(r"^\s*query_result\((.*)\)\s*$", re.S)


# --- Rule groups namespaces ----------------------------------------------------------


def namespace_name_problem(name: str) -> str | None:
    """Why `name` cannot name a rule groups namespace, or None if it can."""
    if not 1 <= len(name) <= NAMESPACE_NAME_MAX:
        return f"namespace name {name!r} must be 1-{NAMESPACE_NAME_MAX} characters"
    if not NAMESPACE_NAME.match(name):
        return f"namespace name {name!r} must match {NAMESPACE_NAME.pattern}"
    return None


def rule_namespace_name(path: Path) -> str:
    """The rule groups namespace a rules file is loaded as: its file name without `.yaml`."""
    problem = namespace_name_problem(path.stem)
    if problem is not None:
        raise ValueError(f"{path.name}: {problem}; rename the file")
    return path.stem


def rule_namespaces() -> dict[str, str]:
    """Namespace name -> the rules file's content (the namespace's `Data`), sorted."""
    return {rule_namespace_name(path): path.read_text(encoding="utf-8") for path in rule_files()}


def load_rules(path: Path) -> object:
    """A rules file's data, read as the settings files are (duplicate keys, aliases and
    oversized files refused with a `ConfigError`)."""
    return read_yaml(path)


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


# --- PromQL --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class QueryCheck:
    """What `check_promql` found: the catalogued series and the recorded series the
    expression selects, the labels its result may carry (None where they cannot be known:
    a recorded series given by name only, absent(), a scalar), and the problems."""

    series: frozenset[str]
    recorded: frozenset[str]
    labels: frozenset[str] | None
    problems: tuple[str, ...]


# Recorded series: their names, or name -> labels (None: unknown) as `recorded_series` gives.
Recorded = Mapping[str, frozenset[str] | None] | Collection[str]


class _Scalar:
    """The inferred type of a scalar or string expression."""


_SCALAR: Final = _Scalar()
_Labels = frozenset[str] | None | _Scalar
_SET_OPERATORS: Final = frozenset({"and", "or", "unless"})
# Aggregations whose result keeps each input series' labels.
_LABEL_KEEPING_AGGREGATIONS: Final = frozenset({"topk", "bottomk"})


class _Analysis:
    """Infers the labels of each sub-expression's result and collects the problems:
    unknown metric names, label names a catalogued series does not have, and grouping,
    matching and function arguments that name labels their operand cannot have."""

    def __init__(self, recorded: Recorded) -> None:
        self.recorded_labels: Mapping[str, frozenset[str] | None] = (
            recorded if isinstance(recorded, Mapping) else dict.fromkeys(recorded)
        )
        self.series: set[str] = set()
        self.recorded: set[str] = set()
        self.problems: list[str] = []

    def labels(self, node: promql_parser.Expr) -> _Labels:
        if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
            return _SCALAR
        if isinstance(node, promql_parser.VectorSelector):
            return self._selector(node)
        if isinstance(node, promql_parser.MatrixSelector):
            return self._selector(node.vector_selector)
        if isinstance(
            node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
        ):
            return self.labels(node.expr)
        if isinstance(node, promql_parser.Call):
            return self._call(node)
        if isinstance(node, promql_parser.AggregateExpr):
            return self._aggregate(node)
        if isinstance(node, promql_parser.BinaryExpr):
            return self._binary(node)
        self.problems.append(f"unsupported expression {type(node).__name__}")
        return None

    def _require(self, wanted: Collection[str], have: _Labels, where: str) -> None:
        if not isinstance(have, frozenset):
            return
        missing = sorted(set(wanted) - have)
        if missing:
            self.problems.append(
                f"{where} names {missing}, which its operand does not have (it has {sorted(have)})"
            )

    def _selector(self, node: promql_parser.VectorSelector) -> _Labels:
        matchers = [
            *node.matchers.matchers,
            *(m for group in node.matchers.or_matchers for m in group),
        ]
        name = node.name
        if name is None:
            names = [
                m.value
                for m in matchers
                if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal
            ]
            name = names[0] if len(names) == 1 else None
        if name is None:
            self.problems.append(f"selector {node} has no metric name; name the metric")
            return None
        used = {m.name for m in matchers} - {"__name__"}
        allowed = series_labels(name)
        if allowed is not None:
            self.series.add(name)
            unknown = sorted(used - allowed)
            if unknown:
                self.problems.append(
                    f"{name} has no label {', '.join(unknown)} (catalogued labels: "
                    f"{', '.join(sorted(allowed))})"
                )
            return allowed
        if name in self.recorded_labels:
            self.recorded.add(name)
            labels = self.recorded_labels[name]
            if labels is not None and (unknown := sorted(used - labels)):
                self.problems.append(
                    f"{name} has no label {', '.join(unknown)} (its recording rule gives it "
                    f"{', '.join(sorted(labels))})"
                )
            return labels
        self.problems.append(
            f"metric {name} is not in config/observability_metrics.py nor recorded by a rule"
        )
        return None

    def _call(self, node: promql_parser.Call) -> _Labels:
        name = node.func.name
        args: list[_Labels] = [self.labels(arg) for arg in node.args]
        strings = [
            arg.val if isinstance(arg, promql_parser.StringLiteral) else None for arg in node.args
        ]
        vectors = [labels for labels in args if not isinstance(labels, _Scalar)]
        first = vectors[0] if vectors else frozenset()
        if node.func.return_type == promql_parser.ValueType.Scalar:
            return _SCALAR
        if name == "histogram_quantile":
            self._require({"le"}, first, "histogram_quantile")
            return None if first is None else frozenset(first - {"le"})
        if name in {"label_replace", "label_join"}:
            destination = strings[1]
            sources = [s for s in strings[3:] if s] if name == "label_join" else strings[3:4]
            self._require([s for s in sources if s], first, name)
            if first is None or destination is None:
                return None
            return first | {destination}
        if name in {"absent", "absent_over_time"}:
            return None
        return first

    def _aggregate(self, node: promql_parser.AggregateExpr) -> _Labels:
        inner = self.labels(node.expr)
        if node.param is not None and isinstance(node.param, promql_parser.Expr):
            self.labels(node.param)
        op = str(node.op)
        modifier = node.modifier
        grouping = list(modifier.labels) if modifier is not None else []
        by = modifier is not None and modifier.type == promql_parser.AggModifierType.By
        if modifier is not None:
            clause = "by" if by else "without"
            self._require(grouping, inner, f"{op} {clause} ({', '.join(grouping)})")
        if op in _LABEL_KEEPING_AGGREGATIONS:
            return inner
        extra: set[str] = set()
        if op == "count_values" and isinstance(node.param, promql_parser.StringLiteral):
            extra.add(node.param.val)
        if modifier is None:
            return frozenset(extra)
        if by:
            return frozenset(grouping) | extra
        if not isinstance(inner, frozenset):
            return None
        return (inner - set(grouping)) | extra

    def _binary(self, node: promql_parser.BinaryExpr) -> _Labels:
        lhs = self.labels(node.lhs)
        rhs = self.labels(node.rhs)
        if isinstance(lhs, _Scalar):
            return rhs
        if isinstance(rhs, _Scalar):
            return lhs
        op = str(node.op)
        modifier = node.modifier
        matching = modifier.matching if modifier is not None else None
        on = matching is not None and matching.type == promql_parser.LabelModifierType.Include
        if matching is not None and on:
            self._require(
                matching.labels, lhs, f"left side of {op} on ({', '.join(matching.labels)})"
            )
            self._require(
                matching.labels, rhs, f"right side of {op} on ({', '.join(matching.labels)})"
            )
        if op in _SET_OPERATORS:
            if op != "or":
                return lhs
            return None if lhs is None or rhs is None else lhs | rhs
        card = (
            modifier.card if modifier is not None else promql_parser.VectorMatchCardinality.OneToOne
        )
        included = list(modifier.group_labels or []) if modifier is not None else []
        if card == promql_parser.VectorMatchCardinality.ManyToOne:
            self._require(included, rhs, f"group_left ({', '.join(included)})")
            return None if lhs is None else lhs | set(included)
        if card == promql_parser.VectorMatchCardinality.OneToMany:
            self._require(included, lhs, f"group_right ({', '.join(included)})")
            return None if rhs is None else rhs | set(included)
        if matching is not None and on:
            return frozenset(matching.labels)
        if lhs is None:
            return None
        return lhs - set(matching.labels) if matching is not None else lhs


def check_promql(expr: str, *, recorded: Recorded = ()) -> QueryCheck:
    """Parse one PromQL expression and check the metrics it selects against the catalogue.
    `recorded`: the names recording rules record, which count as known metrics; given as a
    mapping (`recorded_series`), their labels are checked too."""
    try:
        tree = promql_parser.parse(expr)
    except ValueError as error:
        return QueryCheck(
            series=frozenset(),
            recorded=frozenset(),
            labels=None,
            problems=(f"PromQL syntax error: {error}",),
        )
    analysis = _Analysis(recorded)
    labels = analysis.labels(tree)
    return QueryCheck(
        series=frozenset(analysis.series),
        recorded=frozenset(analysis.recorded),
        labels=labels if isinstance(labels, frozenset) else None,
        problems=tuple(dict.fromkeys(analysis.problems)),
    )


def _quoted_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each quoted string in a PromQL expression."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(text):
        quote = text[i]
        if quote in "\"'`":
            j = i + 1
            while j < len(text) and text[j] != quote:
                j += 2 if text[j] == "\\" and quote != "`" else 1
            spans.append((i, j))
            i = j + 1
        else:
            i += 1
    return spans


def grafana_to_promql(expr: str) -> tuple[str, frozenset[str], list[str]]:
    """A Grafana query as the PromQL Grafana sends: its duration variables replaced by a
    duration and the others, which may only stand in a quoted label value, by a
    placeholder. Returns the PromQL, the variable names used and the problems."""
    spans = _quoted_spans(expr)
    used: set[str] = set()
    problems: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        used.add(name)
        quoted = any(start < match.start() < end for start, end in spans)
        if name in GRAFANA_DURATIONS and not quoted:
            return GRAFANA_DURATIONS[name]
        if not quoted:
            problems.append(
                f"variable ${name} outside a quoted label value; Grafana's durations "
                f"({', '.join('$' + d for d in GRAFANA_DURATIONS)}) are the only ones allowed there"
            )
        return "grafana_variable"

    return _VARIABLE.sub(replace, expr), frozenset(used), problems


# --- Rule files ----------------------------------------------------------------------

_ALERT_KEYS: Final = frozenset({"alert", "expr", "for", "keep_firing_for", "labels", "annotations"})
_RECORD_KEYS: Final = frozenset({"record", "expr", "labels"})
_GROUP_KEYS: Final = frozenset({"name", "interval", "rules", "limit"})


def _rules_of(document: object) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """(group name, index, rule) of each well-formed rule in a rules document."""
    if not isinstance(document, Mapping):
        return
    for group in document.get("groups") or []:
        if isinstance(group, Mapping):
            for index, rule in enumerate(group.get("rules") or []):
                if isinstance(rule, Mapping):
                    yield str(group.get("name")), index, rule


def recorded_names(documents: Mapping[str, object]) -> frozenset[str]:
    """Every name the recording rules of these rule documents record."""
    return frozenset(
        str(rule["record"])
        for document in documents.values()
        for _, _, rule in _rules_of(document)
        if isinstance(rule.get("record"), str)
    )


def recorded_series(documents: Mapping[str, object]) -> dict[str, frozenset[str] | None]:
    """Each name the recording rules of these documents record -> the labels of its series
    (those of its expression's result plus the rule's own labels; None where they cannot be
    inferred). A record built on other records settles after as many passes as the chain
    is long."""
    rules = [
        (rule["record"], rule.get("expr"), rule.get("labels"))
        for document in documents.values()
        for _, _, rule in _rules_of(document)
        if isinstance(rule.get("record"), str)
    ]
    known: dict[str, frozenset[str] | None] = {name: None for name, _, _ in rules}
    for _ in range(len(rules) + 1):
        updated: dict[str, frozenset[str] | None] = {}
        for name, expr, extra in rules:
            found = check_promql(expr, recorded=known).labels if isinstance(expr, str) else None
            labels = (
                None if found is None else found | set(extra if isinstance(extra, Mapping) else ())
            )
            if name in updated:
                previous = updated[name]
                labels = None if previous is None or labels is None else previous | labels
            updated[name] = labels
        if updated == known:
            break
        known = updated
    return known


def _structure_problems(document: object) -> list[str]:
    if not isinstance(document, Mapping) or set(document) != {"groups"}:
        return ["a rules file is a mapping with one key, `groups`"]
    groups = document["groups"]
    if not isinstance(groups, list) or not groups:
        return ["`groups` must be a non-empty list"]
    problems: list[str] = []
    names: list[str] = []
    for index, group in enumerate(groups):
        where = f"groups[{index}]"
        if not isinstance(group, Mapping):
            problems.append(f"{where}: a group is a mapping")
            continue
        if unknown := sorted(set(group) - _GROUP_KEYS):
            problems.append(f"{where}: unknown keys {unknown}")
        name = group.get("name")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}: `name` must be a non-empty string")
        elif name in names:
            problems.append(f"{where}: group name {name!r} is used twice in the file")
        else:
            names.append(name)
        interval = group.get("interval")
        if interval is not None and not (isinstance(interval, str) and DURATION.match(interval)):
            problems.append(f"{where}: `interval` {interval!r} is not a Prometheus duration")
        rules = group.get("rules")
        if not isinstance(rules, list) or not rules:
            problems.append(f"{where}: `rules` must be a non-empty list")
        elif not all(isinstance(rule, Mapping) for rule in rules):
            problems.append(f"{where}: each rule is a mapping")
    return problems


def _rule_problems(rule: Mapping[str, Any]) -> list[str]:
    """Structure of one rule (not its expression)."""
    problems: list[str] = []
    kinds = [key for key in ("alert", "record") if key in rule]
    if len(kinds) != 1:
        return ["a rule has exactly one of `alert` and `record`"]
    alert = kinds[0] == "alert"
    if unknown := sorted(set(rule) - (_ALERT_KEYS if alert else _RECORD_KEYS)):
        problems.append(f"unknown keys {unknown}")
    if not isinstance(rule.get("expr"), str) or not rule["expr"].strip():
        problems.append("`expr` must be a non-empty string")
    labels = rule.get("labels", {})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        problems.append("`labels` must map strings to strings")
        labels = {}
    if not alert:
        name = rule["record"]
        if not isinstance(name, str) or not METRIC_NAME.match(name) or ":" not in name:
            problems.append(
                f"record name {name!r} must be a metric name of the form level:metric:operations"
            )
        elif name in SERIES:
            problems.append(f"record name {name!r} is a catalogued metric's series")
        return problems
    name = rule["alert"]
    if not isinstance(name, str) or not ALERT_NAME.match(name):
        problems.append(f"alert name {name!r} must be UpperCamelCase")
    for key in ("for", "keep_firing_for"):
        value = rule.get(key)
        if value is None and key == "for":
            problems.append("`for` is required (a Prometheus duration such as 5m)")
        elif value is not None and not (isinstance(value, str) and DURATION.match(value)):
            problems.append(f"`{key}` {value!r} is not a Prometheus duration")
    if labels.get("severity") not in SEVERITIES:
        problems.append(f"labels.severity must be one of {', '.join(SEVERITIES)}")
    annotations = rule.get("annotations")
    if not isinstance(annotations, Mapping):
        problems.append("`annotations` with summary and description is required")
    else:
        for key in ("summary", "description"):
            if not isinstance(annotations.get(key), str) or not annotations[key].strip():
                problems.append(f"annotations.{key} must be a non-empty string")
    return problems


def check_rule_documents(documents: Mapping[str, object]) -> list[str]:
    """Problems in rule documents, keyed by namespace name (the file stem): the namespace
    name, the file and rule structure, every expression against the catalogue (records of
    any of the documents count as known metrics), alerts that reach no catalogued metric,
    and annotation templates naming labels the alert cannot have."""
    problems: list[str] = []
    recorded = recorded_series(documents)
    record_sources: dict[str, set[str]] = {}
    record_uses: dict[str, set[str]] = {}
    alerts: list[tuple[str, frozenset[str], frozenset[str]]] = []
    seen_records: dict[tuple[str, str], str] = {}
    for namespace, document in documents.items():
        if (problem := namespace_name_problem(namespace)) is not None:
            problems.append(f"{namespace}: {problem}")
        problems += [f"{namespace}: {p}" for p in _structure_problems(document)]
        for group, index, rule in _rules_of(document):
            name = rule.get("alert", rule.get("record"))
            where = f"{namespace}: group {group} rule {index} ({name})"
            problems += [f"{where}: {p}" for p in _rule_problems(rule)]
            expr = rule.get("expr")
            if not isinstance(expr, str):
                continue
            found = check_promql(expr, recorded=recorded)
            problems += [f"{where}: {p}" for p in found.problems]
            if isinstance(rule.get("record"), str):
                record = rule["record"]
                labels = rule.get("labels")
                key = (record, json.dumps(labels, sort_keys=True, default=str))
                if key in seen_records:
                    problems.append(
                        f"{where}: {record} with these labels is also recorded in "
                        f"{seen_records[key]}; the two would write the same series"
                    )
                seen_records.setdefault(key, namespace)
                record_sources.setdefault(record, set()).update(found.series)
                record_uses.setdefault(record, set()).update(found.recorded)
            elif "alert" in rule:
                alerts.append((where, found.series, found.recorded))
                problems += [f"{where}: {p}" for p in _annotation_problems(rule, found.labels)]
    for where, series, uses in alerts:
        if not series and not _reaches_catalogue(uses, record_sources, record_uses):
            problems.append(f"{where}: the expression references no catalogued metric")
    return problems


def _reaches_catalogue(
    records: Collection[str], sources: Mapping[str, set[str]], uses: Mapping[str, set[str]]
) -> bool:
    seen: set[str] = set()
    pending = list(records)
    while pending:
        record = pending.pop()
        if record in seen:
            continue
        seen.add(record)
        if sources.get(record):
            return True
        pending += uses.get(record, ())
    return False


def _annotation_problems(rule: Mapping[str, Any], labels: frozenset[str] | None) -> list[str]:
    annotations = rule.get("annotations")
    if labels is None or not isinstance(annotations, Mapping):
        return []
    problems = []
    for key, text in annotations.items():
        for label in _TEMPLATE_LABEL.findall(str(text)):
            if label not in labels:
                problems.append(
                    f"annotations.{key} uses $labels.{label}, which the alert does not have "
                    f"(it has {sorted(labels)})"
                )
    return problems


def generated_rule_documents(quotas: Mapping[str, float] | None = None) -> dict[str, object]:
    """The rule documents the observability stack builds from an environment's config besides
    the files: the team GPU quotas (`team_quota_rules`), for `quotas` (default: one team)."""
    quotas = {f"{TEAM_NAMESPACE_PREFIX}example": 8.0} if quotas is None else quotas
    return {QUOTA_NAMESPACE: yaml.safe_load(team_quota_rules(quotas))}


def check_rule_files(
    paths: Collection[Path] | None = None, *, generated: Mapping[str, object] | None = None
) -> list[str]:
    """`check_rule_documents` over rules files (default: all of them) and the `generated`
    documents (default: `generated_rule_documents()`)."""
    files = rule_files() if paths is None else list(paths)
    generated = generated_rule_documents() if generated is None else generated
    return check_rule_documents({**{path.stem: load_rules(path) for path in files}, **generated})


# --- Dashboards ----------------------------------------------------------------------


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
                used |= {m[1] or m[2] for m in _VARIABLE.finditer(dimensions)}
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
