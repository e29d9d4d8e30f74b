"""Observability stack per environment: the workspace (encrypted, the repository's rules,
Alertmanager to the alarm topic), the add-on writing to it through its own pod identity, and
the alarms and event rules on the topic."""

from __future__ import annotations

import json
from typing import Any

import pytest

from config.addons import ADDONS, OBSERVABILITY
from platform_constructs.alarms import HYPERPOD_EVENTS
from platform_constructs.observability import rule_files
from tests.support import SYNTH_GROUP, SynthResult, only

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def _resources(env: SynthResult, type_: str) -> dict[str, dict[str, Any]]:
    return env.resources("observability", type_)


def _topic_id(env: SynthResult) -> str:
    (topic_id,) = _resources(env, "AWS::SNS::Topic")
    return topic_id


def test_every_environment_is_observed_after_its_cluster_add_ons(env: SynthResult):
    assert env.config.observability is not None
    stack = env.stacks["observability"]
    dependencies = {s.stack_name for s in stack.dependencies}
    assert env.stacks["cluster_addons"].stack_name in dependencies
    assert env.stacks["governance"].stack_name in dependencies


def test_workspace_is_encrypted_keeps_samples_and_loads_every_rules_file(env: SynthResult):
    ((workspace_id, workspace),) = _resources(env, "AWS::APS::Workspace").items()
    props = workspace["Properties"]
    (key_id,) = _resources(env, "AWS::KMS::Key")
    assert props["KmsKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}
    retention = props["WorkspaceConfiguration"]["RetentionPeriodInDays"]
    assert retention == env.config.observability.prometheus_retention_days
    namespaces = {
        n["Properties"]["Name"]: n["Properties"]
        for n in _resources(env, "AWS::APS::RuleGroupsNamespace").values()
    }
    files = rule_files()
    assert files and set(namespaces) == {f.stem for f in files}
    for path in files:
        assert namespaces[path.stem]["Data"] == path.read_text(encoding="utf-8")
        assert namespaces[path.stem]["Workspace"] == {"Fn::GetAtt": [workspace_id, "Arn"]}


def test_alertmanager_routes_to_the_alarm_topic_which_lets_only_this_workspace_publish(
    env: SynthResult,
):
    ((workspace_id, workspace),) = _resources(env, "AWS::APS::Workspace").items()
    definition = json.dumps(workspace["Properties"]["AlertManagerDefinition"])
    assert _topic_id(env) in definition and "sns_configs" in definition
    policy = only(_resources(env, "AWS::SNS::TopicPolicy"))["Properties"]["PolicyDocument"]
    (aps,) = [
        s for s in policy["Statement"] if s.get("Principal") == {"Service": "aps.amazonaws.com"}
    ]
    assert aps["Condition"]["ArnEquals"] == {"aws:SourceArn": {"Fn::GetAtt": [workspace_id, "Arn"]}}


def test_topic_is_encrypted_and_subscribes_the_configured_emails(env: SynthResult):
    topic = _resources(env, "AWS::SNS::Topic")[_topic_id(env)]["Properties"]
    assert "KmsMasterKeyId" in topic
    emails = {
        s["Properties"]["Endpoint"] for s in _resources(env, "AWS::SNS::Subscription").values()
    }
    assert emails == set(env.config.observability.alarm_emails)


def test_addon_writes_only_to_this_workspace_with_the_configured_levels(env: SynthResult):
    addon = only(_resources(env, "AWS::EKS::Addon"))["Properties"]
    assert (addon["AddonName"], addon["AddonVersion"]) == (
        OBSERVABILITY,
        ADDONS[OBSERVABILITY].version,
    )
    association = only(_resources(env, "AWS::EKS::PodIdentityAssociation"))["Properties"]
    account = ADDONS[OBSERVABILITY].service_account
    assert (association["Namespace"], association["ServiceAccount"]) == (
        account.namespace,
        account.name,
    )
    (workspace_id,) = _resources(env, "AWS::APS::Workspace")
    role = only(_resources(env, "AWS::IAM::Role"))["Properties"]
    (statement,) = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    assert statement["Action"] == "aps:RemoteWrite"
    assert statement["Resource"] == {"Fn::GetAtt": [workspace_id, "Arn"]}
    parts = addon["ConfigurationValues"]["Fn::Join"][1]
    values = json.loads("".join(p if isinstance(p, str) else "<token>" for p in parts))
    levels = env.config.observability.metrics
    provider = values["metricsProvider"]
    assert provider["networkMetrics"]["level"] == levels.network
    assert provider["taskGovernanceMetrics"]["level"] == levels.task_governance
    assert provider["acceleratedComputeMetrics"]["level"] == levels.accelerated_compute
    assert values["ampWorkspace"] == {
        "arn": "<token>",
        "prometheusEndpoint": values["ampWorkspace"]["prometheusEndpoint"],
    }
    assert not values["ampWorkspace"]["prometheusEndpoint"].endswith("/")
    assert {"Fn::GetAtt": [workspace_id, "Arn"]} in parts


def test_alarms_and_event_rules_notify_the_topic(env: SynthResult):
    topic = {"Ref": _topic_id(env)}
    alarms = _resources(env, "AWS::CloudWatch::Alarm")
    for logical_id, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [topic], logical_id
    metrics = {a["Properties"]["MetricName"] for a in alarms.values()}
    assert {
        "FreeDataStorageCapacity",
        "MatchedEvents",
        "apiserver_request_total_5XX",
        "scheduler_pending_pods_UNSCHEDULABLE",
    } <= metrics
    nat = [a for a in alarms.values() if a["Properties"]["MetricName"] == "ErrorPortAllocation"]
    assert len(nat) == env.config.network.nat_gateways
    rules = _resources(env, "AWS::Events::Rule")
    detail_types = {
        d for r in rules.values() for d in r["Properties"]["EventPattern"]["detail-type"]
    }
    assert detail_types == set(HYPERPOD_EVENTS.values())
    for rule in rules.values():
        assert rule["Properties"]["Targets"][0]["Arn"] == topic


def test_fsx_alarm_threshold_follows_capacity_and_percent(env: SynthResult):
    (alarm,) = [
        a["Properties"]
        for a in _resources(env, "AWS::CloudWatch::Alarm").values()
        if a["Properties"]["MetricName"] == "FreeDataStorageCapacity"
    ]
    fsx = env.config.storage.fsx
    percent = env.config.observability.fsx_free_capacity_percent
    assert alarm["Threshold"] == fsx.storage_capacity_gib * 1024**3 * percent / 100
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
