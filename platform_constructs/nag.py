"""Narrow cdk-nag acknowledgments.

cdk-nag 3 is a policy-validation plugin: findings are acknowledged per construct with
`Validations.of(construct).acknowledge(...)`. Every acknowledgment here names one rule, the
exact finding (e.g. the one wildcard resource) where the rule reports one, and a reason.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(construct: IConstruct, rule: str, reason: str, *, finding: str | None = None) -> None:
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
