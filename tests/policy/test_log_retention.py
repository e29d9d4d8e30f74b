"""Log retention over every template the platform deploys: each Lambda function logs to a log
group of its own template (never Lambda's never-expiring `/aws/lambda/<function>`), and
every log group has a retention, an explicit removal policy and a KMS key (checkov
CKV_AWS_158). The checker is proven on a
bare stack with a planted function; the session's pipeline app (each environment a Stage,
with its own aspects) is checked as well."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from config.regions import LOG_RETENTION_DAYS
from platform_constructs.log_groups import FunctionLogGroups
from tests.support import (
    SYNTH_GROUP,
    PipelineSynth,
    SynthResult,
    bare_stack,
    inline_function,
    resources_of,
    template_of,
)

FUNCTION = "AWS::Lambda::Function"
LOG_GROUP = "AWS::Logs::LogGroup"
REMOVAL_POLICIES = ("Retain", "Delete")


def log_retention_findings(template: dict[str, Any]) -> list[str]:
    """One line per function without a log group of `template`, and per log group without a
    valid retention, an explicit deletion and replacement policy, or a KMS key."""
    resources: dict[str, dict[str, Any]] = template.get("Resources", {})
    groups = {k for k, v in resources.items() if v["Type"] == LOG_GROUP}
    findings = []
    for logical, resource in resources.items():
        if resource["Type"] == FUNCTION:
            target = resource.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup")
            if target is None:
                findings.append(f"{logical}: no LoggingConfig.LogGroup (never-expiring default)")
            elif not (isinstance(target, dict) and target.keys() == {"Ref"}):
                findings.append(f"{logical}: logs to {target!r}, not a group of this template")
            elif target["Ref"] not in groups:
                findings.append(f"{logical}: logs to {target['Ref']}, not a log group here")
        elif resource["Type"] == LOG_GROUP:
            properties = resource.get("Properties", {})
            days = properties.get("RetentionInDays")
            if days not in LOG_RETENTION_DAYS:
                findings.append(f"{logical}: RetentionInDays {days!r}")
            if "KmsKeyId" not in properties:
                findings.append(f"{logical}: no KmsKeyId (not encrypted with a key of ours)")
            for policy in ("DeletionPolicy", "UpdateReplacePolicy"):
                if resource.get(policy) not in REMOVAL_POLICIES:
                    findings.append(f"{logical}: {policy} {resource.get(policy)!r}")
    return findings


# --------------------------------------------------------------------------- the checker


def test_the_checker_catches_a_planted_function_without_a_log_group():
    stack = bare_stack("Planted")
    inline_function(stack, "Planted")
    findings = log_retention_findings(template_of(stack).to_json())
    assert len(findings) == 1
    assert findings[0].startswith("Planted") and "no LoggingConfig.LogGroup" in findings[0]


def test_the_checker_catches_a_log_group_without_retention_removal_policy_or_key():
    stack = bare_stack("Planted")
    logs.CfnLogGroup(stack, "Forever")
    assert log_retention_findings(template_of(stack).to_json()) == [
        "Forever: RetentionInDays None",
        "Forever: no KmsKeyId (not encrypted with a key of ours)",
        "Forever: DeletionPolicy None",
        "Forever: UpdateReplacePolicy None",
    ]


def test_the_checker_catches_a_planted_unencrypted_group_with_retention():
    stack = bare_stack("Planted")
    logs.LogGroup(
        stack,
        "Plain",
        retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )
    (finding,) = log_retention_findings(template_of(stack).to_json())
    assert finding.startswith("Plain") and "no KmsKeyId" in finding


def test_the_checker_wants_a_group_of_the_same_template():
    stack = bare_stack("Planted")
    imported = logs.LogGroup.from_log_group_name(stack, "Elsewhere", "/shared/lambda")
    inline_function(stack, "Shared", log_group=imported)
    (finding,) = log_retention_findings(template_of(stack).to_json())
    assert "'/shared/lambda'" in finding and "not a group of this template" in finding


def test_the_aspect_clears_the_planted_function():
    stack = bare_stack("Planted")
    inline_function(stack, "Planted")
    cdk.Aspects.of(stack).add(
        FunctionLogGroups(retention_days=30, removal_policy=cdk.RemovalPolicy.DESTROY),
        priority=cdk.AspectPriority.MUTATING,
    )
    assert log_retention_findings(template_of(stack).to_json()) == []


# --------------------------------------------------------------------------- the platform


@pytest.mark.xdist_group(SYNTH_GROUP)
def test_every_log_group_of_every_environment_is_encrypted_and_expires(env: SynthResult):
    findings = {name: log_retention_findings(t) for name, t in env.templates.items()}
    assert {name: f for name, f in findings.items() if f} == {}
    # Among them the network's, the EKS control plane's and the Prometheus workspace's.
    with_groups = {n for n, t in env.templates.items() if resources_of(t, LOG_GROUP)}
    assert {"network", "eks", "observability"} <= with_groups
    # The functions' groups expire and stay (or go) per environment.
    days = env.config.network.flow_log_retention_days
    policy = "Retain" if env.config.retain_stateful else "Delete"
    functions = 0
    for template in env.templates.values():
        resources = template["Resources"]
        for resource in resources.values():
            if resource["Type"] == FUNCTION:
                functions += 1
                group = resources[resource["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]]
                assert group["Properties"]["RetentionInDays"] == days
                assert group["DeletionPolicy"] == group["UpdateReplacePolicy"] == policy
    # Today the kubectl handler and framework, BucketDeployment and two network providers.
    assert functions


@pytest.mark.slow
@pytest.mark.xdist_group(SYNTH_GROUP)
def test_every_function_of_the_pipeline_app_logs_to_a_group_with_retention(
    pipeline: PipelineSynth,
):
    assembly = pipeline.assembly
    stacks = assembly.stacks_recursively
    # The pipeline stack and every environment's stacks, inside their Stages.
    assert len(stacks) > len(assembly.stacks) == 1
    findings = {s.hierarchical_id: log_retention_findings(s.template) for s in stacks}
    assert {name: f for name, f in findings.items() if f} == {}
    functions = [
        r for s in stacks for r in s.template["Resources"].values() if r["Type"] == FUNCTION
    ]
    assert functions
