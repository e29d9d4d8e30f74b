"""Monitoring constructs on a bare stack: the Alertmanager definition AMP accepts and the
optional Grafana workspace's read-only role."""

from __future__ import annotations

import yaml

from platform_constructs.monitoring import GrafanaWorkspace, alertmanager_definition
from tests.support import bare_stack, only, resources_of, template_of

WORKSPACE_ARN = "arn:aws:aps:us-east-1:111111111111:workspace/ws-0123"


def test_alertmanager_definition_routes_every_alert_to_the_topic():
    topic = "arn:aws:sns:us-east-1:111111111111:alarms"
    outer = yaml.safe_load(alertmanager_definition(topic, "us-east-1"))
    config = yaml.safe_load(outer["alertmanager_config"])
    assert config["route"]["receiver"] == "sns"
    (receiver,) = config["receivers"]
    (sns,) = receiver["sns_configs"]
    assert (sns["topic_arn"], sns["sigv4"]["region"]) == (topic, "us-east-1")


def test_grafana_role_reads_only_this_prometheus_and_cloudwatch():
    stack = bare_stack("Grafana")
    GrafanaWorkspace(stack, "Grafana", prometheus_workspace_arn=WORKSPACE_ARN)
    template = template_of(stack).to_json()
    workspace = only(resources_of(template, "AWS::Grafana::Workspace"))["Properties"]
    assert workspace["AuthenticationProviders"] == ["AWS_SSO"]
    assert set(workspace["DataSources"]) == {"PROMETHEUS", "CLOUDWATCH"}
    role = only(resources_of(template, "AWS::IAM::Role"))["Properties"]
    statements = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    aps = [s for s in statements if any(a.startswith("aps:") for a in s["Action"])]
    assert [s["Resource"] for s in aps] == [WORKSPACE_ARN]
    actions = {a for s in statements for a in s["Action"]}
    assert all(a.split(":")[1].startswith(("Get", "List", "Query", "Describe")) for a in actions)
