"""The checks that hold the platform's alert rules and dashboards
(platform_constructs/observability/) to the metric catalogue (config/observability_metrics.py),
gathered in one place for the tests.

Each rules file is loaded as one rule groups namespace named after the file
(`rule_namespaces()`). The checkers return one self-contained line per problem (an empty list
when all is well): `check_promql` (one expression, tools/promql_check.py),
`check_rule_documents` (rule files, tools/rule_check.py), `check_dashboards` (dashboard JSON,
tools/dashboard_check.py). They parse PromQL with the `promql-parser` package, a development
dependency.
"""

from __future__ import annotations

from platform_constructs.observability import dashboard_files, rule_files
from tools.dashboard_check import (
    DATASOURCE_VARIABLES,
    GRID_COLUMNS,
    UID_MAX,
    check_dashboard_files,
    check_dashboards,
    load_dashboard,
)
from tools.promql_check import (
    GRAFANA_BUILTINS,
    GRAFANA_DURATIONS,
    QueryCheck,
    Recorded,
    check_promql,
    grafana_to_promql,
)
from tools.rule_check import (
    ALERT_NAME,
    DURATION,
    METRIC_NAME,
    NAMESPACE_NAME,
    NAMESPACE_NAME_MAX,
    SEVERITIES,
    check_rule_documents,
    check_rule_files,
    generated_rule_documents,
    load_rules,
    namespace_name_problem,
    recorded_names,
    recorded_series,
    rule_namespace_name,
    rule_namespaces,
)

__all__ = [
    "ALERT_NAME",
    "DATASOURCE_VARIABLES",
    "DURATION",
    "GRAFANA_BUILTINS",
    "GRAFANA_DURATIONS",
    "GRID_COLUMNS",
    "METRIC_NAME",
    "NAMESPACE_NAME",
    "NAMESPACE_NAME_MAX",
    "SEVERITIES",
    "UID_MAX",
    "QueryCheck",
    "Recorded",
    "check_dashboard_files",
    "check_dashboards",
    "check_promql",
    "check_rule_documents",
    "check_rule_files",
    "dashboard_files",
    "generated_rule_documents",
    "grafana_to_promql",
    "load_dashboard",
    "load_rules",
    "namespace_name_problem",
    "recorded_names",
    "recorded_series",
    "rule_files",
    "rule_namespace_name",
    "rule_namespaces",
]
