"""Observability stack per environment: the workspace (encrypted, the repository's rules,
Alertmanager to the alarm topic), the add-on writing to it through its own pod identity, and
the alarms and event rules on the topic."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Capture

from config.addons import ADDONS, CLOUDWATCH_OBSERVABILITY, OBSERVABILITY
from config.container_logs import ADDON_CONFIGURATION, CONTAINER_LOG_KINDS, container_log_group
from config.gpu_accounting import team_gpu_quotas
from config.kubernetes import (
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    TRAINING_JOB_LABEL,
)
from config.observability_metrics import METRICS, TRAINER
from platform_constructs.alarms import HYPERPOD_EVENTS
from platform_constructs.metrics_scraper import (
    pod_label_meta,
    scrape_configuration,
)
from platform_constructs.observability import QUOTA_NAMESPACE, rule_files, team_quota_rules
from stacks.observability_stack import WORKSPACE_LOG_RETENTION_DAYS
from tests.support import SYNTH_GROUP, SynthResult, only, security_group_rules
from training.metrics_export import METRICS as EXPORTED

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
    prometheus = env.stacks["observability"].workspace
    # The alarm topic's key; the workspace's logs have the stack's log key (CloudWatch Logs
    # may use it, the alarm key admits no CloudWatch Logs).
    log_key = env.logical_id("observability", prometheus.log_key)
    (key_id,) = set(_resources(env, "AWS::KMS::Key")) - {log_key}
    assert props["KmsKeyArn"] == {"Fn::GetAtt": [key_id, "Arn"]}
    group_id = env.logical_id("observability", prometheus.log_group)
    assert props["LoggingConfiguration"]["LogGroupArn"] == {"Fn::GetAtt": [group_id, "Arn"]}
    group = _resources(env, "AWS::Logs::LogGroup")[group_id]
    assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [log_key, "Arn"]}
    assert group["Properties"]["RetentionInDays"] == WORKSPACE_LOG_RETENTION_DAYS
    retention = props["WorkspaceConfiguration"]["RetentionPeriodInDays"]
    assert retention == env.config.observability.prometheus_retention_days
    namespaces = {
        n["Properties"]["Name"]: n["Properties"]
        for n in _resources(env, "AWS::APS::RuleGroupsNamespace").values()
    }
    files = rule_files()
    assert files and set(namespaces) == {f.stem for f in files} | {QUOTA_NAMESPACE}
    quotas = team_gpu_quotas(env.config.governance, env.config.hyperpod.instance_groups)
    assert namespaces[QUOTA_NAMESPACE]["Data"] == team_quota_rules(quotas)
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


def _addon(env: SynthResult, name: str) -> dict[str, Any]:
    (addon,) = [
        a["Properties"]
        for a in _resources(env, "AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == name
    ]
    return addon


def _association(env: SynthResult, name: str) -> dict[str, Any]:
    account = ADDONS[name].service_account
    (association,) = [
        a["Properties"]
        for a in _resources(env, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == account.name
    ]
    return association


def test_addon_writes_only_to_this_workspace_with_the_configured_levels(env: SynthResult):
    addon = _addon(env, OBSERVABILITY)
    assert (addon["AddonName"], addon["AddonVersion"]) == (
        OBSERVABILITY,
        ADDONS[OBSERVABILITY].version,
    )
    association = _association(env, OBSERVABILITY)
    account = ADDONS[OBSERVABILITY].service_account
    assert (association["Namespace"], association["ServiceAccount"]) == (
        account.namespace,
        account.name,
    )
    (workspace_id,) = _resources(env, "AWS::APS::Workspace")
    (role_id, _) = association["RoleArn"]["Fn::GetAtt"]
    role = _resources(env, "AWS::IAM::Role")[role_id]["Properties"]
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


CLUSTER = "<EKS cluster>"


def _cluster_named(env: SynthResult, value: Any) -> str:
    """A joined name or ARN with the EKS stack's cluster name (an import) as CLUSTER, and the
    other references as <ref>."""
    parts = value["Fn::Join"][1] if isinstance(value, dict) else [value]
    text = []
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        elif "Fn::ImportValue" in part:
            short, exported = env.exported(part)
            assert (short, exported) == ("eks", {"Ref": exported["Ref"]}), part
            assert exported["Ref"].startswith("Cluster")
            text.append(CLUSTER)
        else:
            text.append("<ref>")
    return "".join(text)


def test_container_logs_go_to_groups_created_first_with_the_retention_and_log_key(
    env: SynthResult,
):
    stack = env.stacks["observability"]
    groups = {
        _cluster_named(env, g["Properties"]["LogGroupName"]): (logical_id, g)
        for logical_id, g in _resources(env, "AWS::Logs::LogGroup").items()
        if "LogGroupName" in g["Properties"]
    }
    expected = {container_log_group(CLUSTER, kind) for kind in CONTAINER_LOG_KINDS}
    assert set(groups) == expected
    log_key = env.logical_id("observability", stack.workspace.log_key)
    for _, group in groups.values():
        assert group["Properties"]["RetentionInDays"] == env.config.eks.log_retention_days
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [log_key, "Arn"]}
    addon_id = env.logical_id("observability", stack.identities[CLOUDWATCH_OBSERVABILITY].addon)
    addon = _resources(env, "AWS::EKS::Addon")[addon_id]
    assert {logical_id for logical_id, _ in groups.values()} <= set(addon["DependsOn"])
    props = addon["Properties"]
    assert props["AddonVersion"] == ADDONS[CLOUDWATCH_OBSERVABILITY].version
    assert json.loads(props["ConfigurationValues"]) == ADDON_CONFIGURATION


def test_fluent_bit_may_write_only_the_container_log_groups(env: SynthResult):
    association = _association(env, CLOUDWATCH_OBSERVABILITY)
    assert association["Namespace"] == ADDONS[CLOUDWATCH_OBSERVABILITY].service_account.namespace
    (role_id, _) = association["RoleArn"]["Fn::GetAtt"]
    role = _resources(env, "AWS::IAM::Role")[role_id]["Properties"]
    (statement,) = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    assert statement["Action"] == [
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:DescribeLogStreams",
        "logs:PutLogEvents",
    ]
    names = {_cluster_named(env, r).split(":log-group:")[1] for r in statement["Resource"]}
    groups = {container_log_group(CLUSTER, kind) for kind in CONTAINER_LOG_KINDS}
    assert names == groups | {f"{g}:log-stream:*" for g in groups}


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


# --------------------------------------------------------------------------- trainer metrics


def _scraper(env: SynthResult) -> tuple[str, dict[str, Any]]:
    ((scraper_id, scraper),) = _resources(env, "AWS::APS::Scraper").items()
    return scraper_id, scraper["Properties"]


def _scrape_config(env: SynthResult) -> dict[str, Any]:
    blob = _scraper(env)[1]["ScrapeConfiguration"]["ConfigurationBlob"]
    return yaml.safe_load(blob["Fn::Base64"])


def _scraper_group(env: SynthResult) -> str:
    return env.logical_id("observability", env.stacks["observability"].scraper.security_group)


def test_trainer_scraper_reads_the_cluster_from_the_control_plane_subnets(env: SynthResult):
    _, props = _scraper(env)
    (workspace_id,) = _resources(env, "AWS::APS::Workspace")
    assert props["Destination"] == {
        "AmpConfiguration": {"WorkspaceArn": {"Fn::GetAtt": [workspace_id, "Arn"]}}
    }
    source = props["Source"]["EksConfiguration"]
    cluster = env.stacks["eks"].cluster.resource
    assert env.exported(source["ClusterArn"]) == (
        "eks",
        {"Fn::GetAtt": [env.logical_id("eks", cluster), "Arn"]},
    )
    infra = env.stacks["network"].infra_subnets
    assert len(infra) >= 2  # the collector needs two Availability Zones
    assert sorted(json.dumps(env.exported(s)) for s in source["SubnetIds"]) == sorted(
        json.dumps(("network", {"Ref": env.logical_id("network", subnet)}))
        for subnet in infra.values()
    )
    assert source["SecurityGroupIds"] == [{"Fn::GetAtt": [_scraper_group(env), "GroupId"]}]


def test_scrape_configuration_keeps_labelled_pods_on_the_named_port(env: SynthResult):
    config = _scrape_config(env)
    interval = env.config.observability.scrape_interval_s
    assert config["global"] == {"scrape_interval": f"{interval}s"}
    (job,) = config["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    keeps = {
        tuple(r["source_labels"]): r["regex"]
        for r in job["relabel_configs"]
        if r["action"] == "keep"
    }
    assert keeps == {
        (pod_label_meta(METRICS_LABEL),): METRICS_LABEL_VALUE,
        ("__meta_kubernetes_pod_phase",): "Running",
        ("__meta_kubernetes_pod_container_port_name",): METRICS_PORT_NAME,
    }
    targets = {
        r["target_label"]: r["source_labels"]
        for r in job["relabel_configs"]
        if r["action"] == "replace"
    }
    assert targets == {
        "namespace": ["__meta_kubernetes_namespace"],
        "training_job": [pod_label_meta(TRAINING_JOB_LABEL)],
    }
    # Exactly the labels the catalogue gives the trainer's metrics, but the exporter's own
    # (the badput counter's cause).
    own = {spec.label for spec in EXPORTED if spec.label}
    trainer = {m.labels - own for m in METRICS.values() if m.source is TRAINER}
    assert own == {"cause"} and trainer == {frozenset(targets)}
    # The YAML the service reads is the construct's configuration, whole.
    assert config == scrape_configuration(env.config.observability.scrape_interval_s)


def test_scraper_writes_through_its_own_roles_to_this_workspace_only(env: SynthResult):
    template = env.template("observability")
    # Only this account's scrapers (the scraper's own ARN does not exist before it does).
    scrapers = f"arn:aws:aps:{env.config.region}:{env.config.account}:scraper/*"
    source, target = Capture(), Capture()
    template.has_resource_properties(
        "AWS::APS::Scraper",
        {"RoleConfiguration": {"SourceRoleArn": source, "TargetRoleArn": target}},
    )
    roles = _resources(env, "AWS::IAM::Role")
    (source_id, _), (target_id, _) = (
        source.as_object()["Fn::GetAtt"],
        target.as_object()["Fn::GetAtt"],
    )
    source_trust = roles[source_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert source_trust == [
        {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"Service": "scraper.aps.amazonaws.com"},
            "Condition": {
                "ArnLike": {"aws:SourceArn": scrapers},
                "StringEquals": {"aws:SourceAccount": env.config.account},
            },
        }
    ]
    target_props = roles[target_id]["Properties"]
    (trust,) = target_props["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"AWS": {"Fn::GetAtt": [source_id, "Arn"]}}
    assert trust["Condition"] == {"StringLike": {"sts:ExternalId": scrapers}}
    (workspace_id,) = _resources(env, "AWS::APS::Workspace")
    (statement,) = [s for p in target_props["Policies"] for s in p["PolicyDocument"]["Statement"]]
    assert (statement["Action"], statement["Resource"]) == (
        "aps:RemoteWrite",
        {"Fn::GetAtt": [workspace_id, "Arn"]},
    )
    # The source role may do one thing: become the target role.
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": source_id}],
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": "sts:AssumeRole",
                        "Effect": "Allow",
                        "Resource": {"Fn::GetAtt": [target_id, "Arn"]},
                    }
                ]
            },
        },
    )


def test_scraper_reaches_only_the_metrics_port_and_the_api(env: SynthResult):
    group = _scraper_group(env)
    template = env.templates["observability"]
    own = {"Fn::GetAtt": [group, "GroupId"]}
    observability = env.stacks["observability"]
    pods = observability.resolve(env.stacks["network"].efa_security_group.security_group_id)
    api = observability.resolve(
        env.stacks["eks"].cluster.control_plane_security_group.security_group_id
    )
    expected = {
        (json.dumps(pods, sort_keys=True), METRICS_PORT),
        (json.dumps(api, sort_keys=True), 443),
    }
    egress = [r for r in security_group_rules(template, group, "Egress") if "CidrIp" not in r]
    assert {
        (json.dumps(r["DestinationSecurityGroupId"], sort_keys=True), r["FromPort"]) for r in egress
    } == expected
    assert all(r["IpProtocol"] == "tcp" and r["FromPort"] == r["ToPort"] for r in egress)
    # Inline, only the rule that matches no traffic: EC2's default allow-all egress is gone.
    inline = template["Resources"][group]["Properties"]["SecurityGroupEgress"]
    assert [r["CidrIp"] for r in inline] == ["255.255.255.255/32"]
    # Each peer admits the collector on that port alone, and nothing else admits it.
    ingress = [
        r["Properties"]
        for r in _resources(env, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("SourceSecurityGroupId") == own
    ]
    assert {
        (json.dumps(r["GroupId"], sort_keys=True), r["FromPort"], r["ToPort"], r["IpProtocol"])
        for r in ingress
    } == {(peer, port, port, "tcp") for peer, port in expected}


def test_scraper_cluster_access_comes_from_the_api_authentication_mode(env: SynthResult):
    # AMP creates the scraper's access entry itself on an `API` cluster with a private
    # endpoint (AMP User Guide, managed collectors); an entry of ours would collide with it.
    cluster = only(env.resources("eks", "AWS::EKS::Cluster"))["Properties"]
    assert cluster["AccessConfig"]["AuthenticationMode"] == "API"
    assert cluster["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    for name in env.templates:
        assert not [
            entry
            for entry in env.resources(name, "AWS::EKS::AccessEntry").values()
            if "Scraper" in json.dumps(entry["Properties"]["PrincipalArn"])
        ], name
    vpc = only(env.resources("network", "AWS::EC2::VPC"))["Properties"]
    assert vpc["EnableDnsSupport"] is True and vpc["EnableDnsHostnames"] is True
