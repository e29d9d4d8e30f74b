"""TrainingMetricsScraper on its own: the generated scrape configuration, the managed
collector's interval floor, its two-AZ rule, and its network rules on a bare stack."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Match

from config.kubernetes import METRICS_LABEL, METRICS_PORT, TRAINING_JOB_LABEL
from platform_constructs.metrics_scraper import (
    TrainingMetricsScraper,
    pod_label_meta,
    scrape_configuration,
    scrape_configuration_yaml,
)
from tests.support import bare_stack, resources_of, template_of

WORKSPACE = "arn:aws:aps:us-west-2:111111111111:workspace/ws-12345678-abcd-1234-abcd-123456789012"
CLUSTER = "arn:aws:eks:us-west-2:111111111111:cluster/c"


def _scraper(azs: tuple[str, ...] = ("us-west-2a", "us-west-2b")) -> Any:
    stack = bare_stack("Scraper")
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-12345678", availability_zones=list(azs)
    )
    subnets = [
        ec2.Subnet.from_subnet_attributes(
            stack, f"Subnet{i}", subnet_id=f"subnet-0000000{i}", availability_zone=az
        )
        for i, az in enumerate(azs)
    ]
    pods = ec2.SecurityGroup.from_security_group_id(stack, "Pods", "sg-00000001")
    api = ec2.SecurityGroup.from_security_group_id(stack, "Api", "sg-00000002")
    TrainingMetricsScraper(
        stack,
        "Scraper",
        cluster_arn=CLUSTER,
        workspace_arn=WORKSPACE,
        vpc=vpc,
        subnets=subnets,
        pod_security_group=pods,
        api_security_group=api,
        scrape_interval_s=45,
    )
    return template_of(stack)


def test_pod_labels_become_prometheus_meta_label_names() -> None:
    assert pod_label_meta("hyperpod-platform/training-job") == (
        "__meta_kubernetes_pod_label_hyperpod_platform_training_job"
    )
    assert pod_label_meta("a.b_c") == "__meta_kubernetes_pod_label_a_b_c"


@pytest.mark.parametrize("interval", [30, 45, 300])
def test_interval_follows_the_config(interval: int):
    assert scrape_configuration(interval)["global"] == {"scrape_interval": f"{interval}s"}


def test_configuration_selects_by_the_shared_label_names() -> None:
    config = yaml.safe_load(scrape_configuration_yaml(30))
    assert config == scrape_configuration(30)
    rules = config["scrape_configs"][0]["relabel_configs"]
    sources = {label for rule in rules for label in rule["source_labels"]}
    assert {pod_label_meta(METRICS_LABEL), pod_label_meta(TRAINING_JOB_LABEL)} <= sources


def test_scraper_resource_carries_the_configuration_base64_encoded() -> None:
    template = _scraper()
    template.has_resource_properties(
        "AWS::APS::Scraper",
        {
            "Source": {
                "EksConfiguration": {
                    "ClusterArn": CLUSTER,
                    "SubnetIds": ["subnet-00000000", "subnet-00000001"],
                    "SecurityGroupIds": [Match.object_like({"Fn::GetAtt": Match.any_value()})],
                }
            },
            "Destination": {"AmpConfiguration": {"WorkspaceArn": WORKSPACE}},
            "ScrapeConfiguration": {
                "ConfigurationBlob": {"Fn::Base64": scrape_configuration_yaml(45)}
            },
        },
    )


def test_network_rules_are_the_metrics_port_and_https_to_the_given_groups() -> None:
    template = _scraper()
    for peer, port in (("sg-00000001", METRICS_PORT), ("sg-00000002", 443)):
        template.has_resource_properties(
            "AWS::EC2::SecurityGroupEgress",
            {"DestinationSecurityGroupId": peer, "FromPort": port, "ToPort": port},
        )
        template.has_resource_properties(
            "AWS::EC2::SecurityGroupIngress",
            {"GroupId": peer, "FromPort": port, "ToPort": port, "IpProtocol": "tcp"},
        )
    (group,) = resources_of(template, "AWS::EC2::SecurityGroup").values()
    assert [r["CidrIp"] for r in group["Properties"]["SecurityGroupEgress"]] == [
        "255.255.255.255/32"
    ]
    assert len(resources_of(template, "AWS::EC2::SecurityGroupEgress")) == 2
    assert len(resources_of(template, "AWS::EC2::SecurityGroupIngress")) == 2


def test_one_availability_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="two Availability Zones"):
        _scraper(("us-west-2a", "us-west-2a"))
