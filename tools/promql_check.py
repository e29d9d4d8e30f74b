"""PromQL as the platform's rules and dashboards use it, checked against the metric catalogue
(config/observability_metrics.py): `check_promql` parses one expression with the
`promql-parser` package (a development dependency), infers the labels of its result and
names every metric and label the catalogue does not know; `grafana_to_promql` turns a
Grafana query into the PromQL Grafana sends."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final

import promql_parser

from config.observability_metrics import series_labels

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
GRAFANA_VARIABLE: Final = re.compile(r"\$\{([A-Za-z_]\w*)(?::[^}]*)?\}|\$([A-Za-z_]\w*)")


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

    return GRAFANA_VARIABLE.sub(replace, expr), frozenset(used), problems
