"""Template lint suppressions, written one way for the whole project.

cfn-lint reads `Metadata.cfn-lint.config.ignore_checks` on a resource. Callers suppress a
rule only where the finding is about code the project does not own (CDK-generated handlers)
or is wrong for a deliberate choice, and say why at the call site.
"""

from __future__ import annotations

import copy
from typing import Any

import aws_cdk as cdk
from constructs import IConstruct


def ignore_cfn_lint(resource: cdk.CfnResource, *rules: str) -> None:
    """Add `rules` to `resource`'s cfn-lint ignore list.

    Merges: other metadata keys, other `cfn-lint` settings and rules already ignored are
    kept; each rule is listed once, in the order first added.
    """
    if not rules:
        raise ValueError("name at least one cfn-lint rule to ignore")
    existing = resource.get_metadata("cfn-lint")
    metadata: dict[str, Any] = copy.deepcopy(dict(existing)) if existing else {}
    config = metadata.get("config")
    config = dict(config) if config else {}
    checks = list(config.get("ignore_checks") or [])
    for rule in rules:
        if rule not in checks:
            checks.append(rule)
    config["ignore_checks"] = checks
    metadata["config"] = config
    resource.add_metadata("cfn-lint", metadata)


def ignore_redundant_role_dependency(handler: IConstruct | None) -> None:
    """CDK-generated handlers declare DependsOn their role next to a GetAtt of its ARN;
    cfn-lint flags the redundancy (W3005) in code the project does not own. (Rewriting
    DependsOn instead would freeze it: a dependency added later, by CDK or by us, would be
    silently dropped.) `handler` is the function or its construct; None is a no-op."""
    if handler is None:
        return
    resource = handler if isinstance(handler, cdk.CfnResource) else handler.node.default_child
    if isinstance(resource, cdk.CfnResource):
        ignore_cfn_lint(resource, "W3005")
