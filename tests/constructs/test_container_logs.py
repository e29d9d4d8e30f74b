"""The container log groups on a bare stack: Fluent Bit's names, the retention and the key
given, the removal policy, and the ARNs a writer is granted on; and the facts they follow
(stream names, the add-on's configuration and its Kubernetes versions)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from config.addons import ADDONS, CLOUDWATCH_OBSERVABILITY, parse_version
from config.container_logs import (
    ADDON_CONFIGURATION,
    ADDON_MIN_KUBERNETES,
    CONTAINER_LOG_KINDS,
    container_log_group,
)
from config.eks_versions import SUPPORTED_KUBERNETES_VERSIONS
from platform_constructs.container_logs import ContainerLogGroups
from platform_constructs.log_groups import stack_log_key
from tests.support import bare_stack, resources_of, template_of


def _groups(removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN):
    stack = bare_stack("Logs")
    key = stack_log_key(stack, removal_policy=removal_policy)
    construct = ContainerLogGroups(
        stack,
        "ContainerLogs",
        eks_cluster_name="hyperpod-prod-eks",
        retention_days=365,
        encryption_key=key,
        removal_policy=removal_policy,
    )
    return stack, construct


def test_one_group_per_kind_named_as_fluent_bit_writes_them() -> None:
    stack, _ = _groups()
    groups = resources_of(template_of(stack).to_json(), "AWS::Logs::LogGroup")
    names = sorted(g["Properties"]["LogGroupName"] for g in groups.values())
    assert names == [
        "/aws/containerinsights/hyperpod-prod-eks/application",
        "/aws/containerinsights/hyperpod-prod-eks/dataplane",
        "/aws/containerinsights/hyperpod-prod-eks/host",
    ]


@pytest.mark.parametrize(
    ("policy", "deletion"),
    [(cdk.RemovalPolicy.RETAIN, "Retain"), (cdk.RemovalPolicy.DESTROY, "Delete")],
)
def test_groups_have_the_retention_key_and_removal_policy(
    policy: cdk.RemovalPolicy, deletion: str
) -> None:
    stack, _ = _groups(policy)
    template = template_of(stack).to_json()
    (key_id,) = resources_of(template, "AWS::KMS::Key")
    for group in resources_of(template, "AWS::Logs::LogGroup").values():
        assert group["Properties"]["RetentionInDays"] == 365
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
        assert group["DeletionPolicy"] == deletion


def test_writer_arns_are_each_group_and_its_streams() -> None:
    stack, construct = _groups()
    resolved = [stack.resolve(arn) for arn in construct.writer_arns]
    suffixes = [
        "".join(str(part) for part in arn["Fn::Join"][1]).split(":log-group:")[1]
        for arn in resolved
    ]
    assert suffixes == [
        name
        for kind in CONTAINER_LOG_KINDS
        for name in (
            container_log_group("hyperpod-prod-eks", kind),
            f"{container_log_group('hyperpod-prod-eks', kind)}:log-stream:*",
        )
    ]


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="'performance' is not a container log group"):
        container_log_group("c", "performance")


def test_the_add_on_runs_on_every_kubernetes_version_the_platform_supports() -> None:
    for version in SUPPORTED_KUBERNETES_VERSIONS:
        major, minor = (int(part) for part in version.split("."))
        assert (major, minor) >= ADDON_MIN_KUBERNETES, version


def test_the_add_on_row_takes_a_pod_identity_and_ships_only_container_logs() -> None:
    row = ADDONS[CLOUDWATCH_OBSERVABILITY]
    version = parse_version(row.version)
    assert version is not None and (3, 1, 0) <= row.minimum <= version < (6, 0, 0)
    assert row.stack == "observability"
    assert row.service_account is not None
    assert (row.service_account.namespace, row.service_account.name) == (
        "amazon-cloudwatch",
        "cloudwatch-agent",
    )
    assert row.configuration == ADDON_CONFIGURATION
    collected = ADDON_CONFIGURATION["agent"]["config"]["logs"]["metrics_collected"]
    assert "kubernetes" not in collected  # no Container Insights metrics
    assert ADDON_CONFIGURATION["containerLogs"] == {"enabled": True}
    assert ADDON_CONFIGURATION["dcgmExporter"] == {"enabled": False}
    assert ADDON_CONFIGURATION["neuronMonitor"] == {"enabled": False}
