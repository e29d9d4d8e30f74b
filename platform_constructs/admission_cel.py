"""Building blocks of ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, GA in
Kubernetes 1.30): CEL literals and the policy object itself.

The CEL keeps to the portable subset (has(), exists/all/map, `in`, startsWith, size and string
concatenation) that both Kubernetes and the cel-python evaluator of the tests run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

ADMISSION_API_VERSION: Final = "admissionregistration.k8s.io/v1"

NOT_BEING_DELETED: Final = {
    "name": "not-being-deleted",
    "expression": "!has(object.metadata.deletionTimestamp)",
}


def cel_string(value: str) -> str:
    """A CEL string literal."""
    return json.dumps(value)


def cel_list(values: Iterable[str]) -> str:
    """A CEL list of string literals."""
    return "[" + ", ".join(cel_string(v) for v in values) + "]"


def words(values: Iterable[str]) -> str:
    """`values` as a message lists them."""
    return ", ".join(values) or "none"


def has_chain(root: str, *fields: str) -> str:
    """`has(root.a) && has(root.a.b) ...`: portable, where has() of a deep path is not."""
    checks, path = [], root
    for field in fields:
        path = f"{path}.{field}"
        checks.append(f"has({path})")
    return " && ".join(checks)


def validation(expression: str, message: str) -> dict[str, str]:
    """A denying rule: `message` is a CEL expression, one line that names the fix."""
    return {"expression": expression, "messageExpression": message, "reason": "Forbidden"}


def validating_policy(
    name: str,
    rules: Sequence[tuple[str, str, Sequence[str]]],
    *,
    validations: Sequence[dict[str, str]],
    operations: Sequence[str] = ("CREATE", "UPDATE"),
    conditions: Sequence[Mapping[str, str]] = (NOT_BEING_DELETED,),
    variables: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy `name` of (API group, version, plurals) `rules`, failing
    closed; `variables`: name -> CEL expression."""
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": [version],
                    "operations": list(operations),
                    "resources": list(plurals),
                }
                for group, version, plurals in rules
            ]
        },
    }
    if conditions:
        spec["matchConditions"] = [dict(c) for c in conditions]
    if variables:
        spec["variables"] = [{"name": k, "expression": v} for k, v in variables.items()]
    spec["validations"] = list(validations)
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
