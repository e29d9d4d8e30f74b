"""The platform's alert and recording rule files (platform_constructs/observability/rules/)
and the rule documents the observability stack generates, checked for structure and held to
the metric catalogue. Each rules file is loaded as one rule groups namespace named after the
file (`rule_namespaces()`); `check_rule_documents` returns one self-contained line per
problem (an empty list when all is well)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from config.kubernetes import TEAM_NAMESPACE_PREFIX
from config.loader import read_yaml
from config.observability_metrics import SERIES
from platform_constructs.observability import QUOTA_NAMESPACE, rule_files, team_quota_rules
from tools.promql_check import check_promql

# AWS::APS::RuleGroupsNamespace Name.
NAMESPACE_NAME: Final = re.compile(r"^[0-9A-Za-z][-.0-9A-Z_a-z]*$")
NAMESPACE_NAME_MAX: Final = 64
SEVERITIES: Final = ("critical", "warning", "info")
# Prometheus' duration syntax (model.ParseDuration): units in decreasing order, or "0".
DURATION: Final = re.compile(r"^(0|(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?)$")
METRIC_NAME: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
ALERT_NAME: Final = re.compile(r"^[A-Z][A-Za-z0-9]*$")
_TEMPLATE_LABEL = re.compile(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)")


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
