"""Narrow cdk-nag acknowledgments.

cdk-nag 3 is a policy-validation plugin: findings are acknowledged per construct with
`Validations.of(construct).acknowledge(...)`. Every acknowledgment here names one rule, the
exact finding (e.g. the one wildcard resource) where the rule reports one, and a reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct, IValidation


def acknowledge(
    construct: IConstruct, rule: str, reason: str, *, finding: str | None = None
) -> None:
    """Acknowledge AwsSolutions `rule` (e.g. "IAM5") on `construct` only.

    `finding` is the bracketed detail cdk-nag prints for rules with several findings
    (e.g. "Resource::<Bucket.Arn>/*" or "Action::s3:GetObject*").
    """
    if len(reason) < 20:
        raise ValueError(f"acknowledgment of AwsSolutions-{rule} needs a specific reason")
    rule_id = f"AwsSolutions-{rule}" + (f"[{finding}]" if finding else "")
    Validations.of(construct).acknowledge(
        Acknowledgment(id=f"AwsSolutions::{rule_id}", reason=reason)
    )


# Acknowledgments whose finding names a value from another stack: cdk-nag prints a wildcard
# resource such as `<bucket ARN>/*` with the export name of the bucket's stack output, and
# CDK names that export only while it prepares the app. Construct validations run after
# prepare and before the policy plugins read acknowledgments, so one records them there.


def nag_resource_string(value: Any) -> str:
    """A resolved CloudFormation value written the way cdk-nag prints it in findings:
    references as `<LogicalId>` / `<LogicalId.Attr>`, imports as their export name."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        [(key, arg)] = value.items()
        if key == "Fn::Join":
            separator, parts = arg
            return str(separator).join(nag_resource_string(p) for p in parts)
        if key == "Ref":
            return f"<{arg}>"
        if key == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if key == "Fn::ImportValue":
            return nag_resource_string(arg)
        if key in ("Fn::Select", "Fn::Split"):
            # cdk-nag writes other intrinsics as compact JSON (JSON.stringify).
            return json.dumps(value, separators=(",", ":"))
    raise ValueError(f"cannot write {value!r} as a cdk-nag finding")


@jsii.implements(IValidation)
class _AcknowledgeResolvedResource:
    def __init__(self, construct: IConstruct, rule: str, reason: str, resource: str) -> None:
        self._construct = construct
        self._rule = rule
        self._reason = reason
        self._resource = resource

    def validate(self) -> list[str]:
        resolved = cdk.Stack.of(self._construct).resolve(self._resource)
        acknowledge(
            self._construct,
            self._rule,
            self._reason,
            finding=f"Resource::{nag_resource_string(resolved)}",
        )
        return []


def acknowledge_resource(construct: IConstruct, rule: str, reason: str, *, resource: str) -> None:
    """Acknowledge `rule` on `construct` for exactly the policy resource `resource` (the same
    value, token included, that the policy statement uses)."""
    construct.node.add_validation(_AcknowledgeResolvedResource(construct, rule, reason, resource))


@jsii.implements(IValidation)
class _AcknowledgeKnownWildcards:
    def __init__(self, policy: iam.CfnPolicy, known: Sequence[tuple[re.Pattern[str], str]]) -> None:
        self._policy = policy
        self._known = known

    def validate(self) -> list[str]:
        document = cdk.Stack.of(self._policy).resolve(self._policy.policy_document)
        for finding in _wildcard_findings(document):
            for pattern, reason in self._known:
                if pattern.fullmatch(finding):
                    acknowledge(self._policy, "IAM5", reason, finding=finding)
                    break
        return []


def _wildcard_findings(document: dict[str, Any]) -> set[str]:
    """The IAM5 findings cdk-nag reports for `document`: each wildcard action and resource."""
    findings: set[str] = set()
    for statement in document.get("Statement", []):
        for key, kind in (("Action", "Action"), ("Resource", "Resource")):
            values = statement.get(key, [])
            for value in values if isinstance(values, list) else [values]:
                try:
                    text = nag_resource_string(value)
                except ValueError:
                    continue  # a form written otherwise; never acknowledged here
                if "*" in text:
                    findings.add(f"{kind}::{text}")
    return findings


def acknowledge_known_wildcards(
    policy: iam.CfnPolicy, known: Sequence[tuple[re.Pattern[str], str]]
) -> None:
    """Acknowledge IAM5 on `policy` for each wildcard finding that matches one of `known`
    (pattern, reason); any other wildcard stays a finding. For policies a library generates
    (CDK Pipelines' roles), whose findings carry generated logical IDs."""
    policy.node.add_validation(_AcknowledgeKnownWildcards(policy, known))
