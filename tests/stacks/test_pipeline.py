"""The delivery pipeline: built once from config/delivery/pipeline.yaml with every
environment as a Stage; order, guard and approval, names, notifications, and cdk-nag
inside each Stage (a planted violation must fail the pipeline's synth)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config.delivery import LoadedPipeline, load_pipeline
from config.loader import LoadedEnvironment
from config.names import STACK_UNITS
from platform_constructs.l1 import default_resource
from stacks import pipeline_stack
from stacks.pipeline_stack import (
    NOTIFIED_EVENTS,
    PIPELINE_LOG_RETENTION_DAYS,
    PIPELINE_STACK_NAME,
    PLAN_READER_ACTIONS,
    SYNTH_COMMAND,
    TEST_COMMAND,
    build_pipeline_app,
    lookup_role_arn,
    plan_reader_role_arn,
    pull_request_role_arn,
    pull_request_role_name,
)
from stacks.platform import PlatformStacks, build_platform
from tests.support import SYNTH_GROUP, PipelineSynth, cfn_lint, resources_of

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def _stages(pipeline: PipelineSynth) -> list[dict[str, Any]]:
    (resource,) = resources_of(pipeline.template, "AWS::CodePipeline::Pipeline").values()
    stages: list[dict[str, Any]] = resource["Properties"]["Stages"]
    return stages


def _actions(stage: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["Name"]: a for a in stage["Actions"]}


def test_environments_deploy_in_configured_order_after_the_synth(pipeline: PipelineSynth):
    names = [s["Name"] for s in _stages(pipeline)]
    environments = pipeline.loaded.config.environments
    assert names[:2] == ["Source", "Build"]
    assert [n for n in names if n in environments] == environments
    assert names.index("Build") < min(names.index(e) for e in environments)


def test_guard_runs_first_in_every_stage_and_a_person_approves_after_it(pipeline: PipelineSynth):
    config = pipeline.loaded.config
    for stage in _stages(pipeline):
        name = stage["Name"]
        if name not in config.environments:
            continue
        actions = _actions(stage)
        guard = actions[f"Guard-{name}"]
        deploys = [a for a in stage["Actions"] if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        assert guard["RunOrder"] < min(a["RunOrder"] for a in deploys)
        approval = actions.get(f"Approve-{name}")
        assert (approval is not None) == (name in config.approval_before), name
        if approval is not None:
            assert guard["RunOrder"] < approval["RunOrder"] < min(a["RunOrder"] for a in deploys)
    assert config.approval_before == ["prod"]


def test_stage_stacks_keep_the_names_cdk_deploy_uses(pipeline: PipelineSynth):
    for loaded in pipeline.loaded.environments:
        config = loaded.config
        manifest = json.loads(
            (
                pipeline.outdir
                / f"assembly-{PIPELINE_STACK_NAME}-{config.environment}"
                / "manifest.json"
            ).read_text()
        )
        stacks = {
            a["properties"]["stackName"]: a["environment"]
            for a in manifest["artifacts"].values()
            if a["type"] == "aws:cloudformation:stack"
        }
        stage = pipeline.stack.stages[config.environment]
        platform = stage.platform
        # The platform's stacks and the pull requests' plan reader, deployed only here.
        platform_stacks = {s.stack_name for s in platform.by_name().values()}
        assert set(stacks) == platform_stacks | {stage.plan_reader.stack_name}
        assert platform_stacks == {config.names.stack(STACK_UNITS[s]) for s in platform.by_name()}
        assert set(stacks.values()) == {f"aws://{config.account}/{config.region}"}


def _project_commands(pipeline: PipelineSynth, action: dict[str, Any]) -> list[str]:
    project_id = action["Configuration"]["ProjectName"]["Ref"]
    buildspec = pipeline.template["Resources"][project_id]["Properties"]["Source"]["BuildSpec"]
    if not isinstance(buildspec, str):  # {"Fn::Join": ["", parts]} around an ARN's partition
        buildspec = "".join(p if isinstance(p, str) else "aws" for p in buildspec["Fn::Join"][1])
    spec = json.loads(buildspec)
    commands: list[str] = spec["phases"]["build"]["commands"]
    return commands


def test_synth_runs_the_test_command_before_synthesizing(pipeline: PipelineSynth):
    (build,) = [s for s in _stages(pipeline) if s["Name"] == "Build"]
    commands = _project_commands(pipeline, _actions(build)["Synth"])
    assert commands.index(TEST_COMMAND) < commands.index(SYNTH_COMMAND)


def test_guard_assumes_only_its_environments_lookup_role(pipeline: PipelineSynth):
    for loaded in pipeline.loaded.environments:
        config = loaded.config
        (stage,) = [s for s in _stages(pipeline) if s["Name"] == config.environment]
        guard = _actions(stage)[f"Guard-{config.environment}"]
        assert any(
            c.endswith(f"hpctl guard --env {config.environment}")
            for c in _project_commands(pipeline, guard)
        )
        role = pipeline.stack.resolve(lookup_role_arn(config.account, config.region))
        assumes = [
            s
            for policy in resources_of(pipeline.template, "AWS::IAM::Policy").values()
            for s in policy["Properties"]["PolicyDocument"]["Statement"]
            if s["Action"] == "sts:AssumeRole" and s["Resource"] == role
        ]
        assert len(assumes) == 1, config.environment


def test_failures_and_approvals_notify_an_encrypted_topic(pipeline: PipelineSynth):
    (rule,) = resources_of(
        pipeline.template, "AWS::CodeStarNotifications::NotificationRule"
    ).values()
    assert set(rule["Properties"]["EventTypeIds"]) == set(NOTIFIED_EVENTS)
    ((topic_id, topic),) = resources_of(pipeline.template, "AWS::SNS::Topic").items()
    assert rule["Properties"]["Targets"] == [
        {"TargetAddress": {"Ref": topic_id}, "TargetType": "SNS"}
    ]
    assert "KmsMasterKeyId" in topic["Properties"]
    emails = {
        s["Properties"]["Endpoint"]
        for s in resources_of(pipeline.template, "AWS::SNS::Subscription").values()
    }
    assert emails == set(pipeline.loaded.config.notify.emails)


def test_artifacts_are_encrypted_and_their_access_logged(pipeline: PipelineSynth):
    buckets = resources_of(pipeline.template, "AWS::S3::Bucket")
    artifacts = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(artifacts) == 1
    (artifact,) = artifacts
    encryption = artifact["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption[0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    log_bucket = artifact["Properties"]["LoggingConfiguration"]["DestinationBucketName"]["Ref"]
    assert log_bucket in buckets


def test_every_build_project_logs_to_the_pipeline_log_group_with_retention(
    pipeline: PipelineSynth,
):
    projects = resources_of(pipeline.template, "AWS::CodeBuild::Project")
    groups = resources_of(pipeline.template, "AWS::Logs::LogGroup")
    targets = {
        p["Properties"]["LogsConfig"]["CloudWatchLogs"]["GroupName"]["Ref"]
        for p in projects.values()
    }
    assert len(projects) > 3 and len(targets) == 1
    (group,) = targets
    assert groups[group]["Properties"]["RetentionInDays"] == PIPELINE_LOG_RETENTION_DAYS
    assert groups[group]["DeletionPolicy"] == "Retain"


def test_pipeline_template_passes_cfn_lint(pipeline: PipelineSynth):
    path = pipeline.outdir / f"{PIPELINE_STACK_NAME}.template.json"
    matches = cfn_lint(path.read_text(encoding="utf-8"), pipeline.loaded.config.region)
    assert [f"{m.rule.id} {m.message}" for m in matches] == []


# --------------------------------------------------------------------------- planted violations


def _dev_only() -> LoadedPipeline:
    loaded = load_pipeline()
    (dev,) = [e for e in loaded.environments if e.config.environment == "dev"]
    config = loaded.config.model_copy(update={"environments": ["dev"], "approval_before": []})
    return LoadedPipeline(config=config, environments=(dev,), source=loaded.source)


def test_cdk_nag_runs_inside_each_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Stages synthesize while the pipeline is built, so the violation is planted as the
    # Stage builds its platform.
    def planted(scope: Construct, loaded: LoadedEnvironment) -> PlatformStacks:
        platform = build_platform(scope, loaded)
        s3.CfnBucket(platform.storage, "PlantedUnloggedBucket")
        return platform

    monkeypatch.setattr(pipeline_stack, "build_platform", planted)
    with pytest.raises(Exception, match="AwsSolutions-S1") as caught:
        app, _ = build_pipeline_app(_dev_only(), outdir=str(tmp_path))
        app.synth()
    assert "dev/hyperpod-dev-storage/PlantedUnloggedBucket" in str(caught.value)


def test_cdk_nag_runs_on_the_pipeline_stack(tmp_path: Path):
    app, stack = build_pipeline_app(_dev_only(), outdir=str(tmp_path))
    iam.Role(
        stack,
        "PlantedAdmin",
        assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
        inline_policies={
            "All": iam.PolicyDocument(
                statements=[iam.PolicyStatement(actions=["s3:*"], resources=["*"])]
            )
        },
    )
    with pytest.raises(Exception, match="AwsSolutions-IAM5") as caught:
        app.synth()
    assert f"{PIPELINE_STACK_NAME}/PlantedAdmin" in str(caught.value)


def test_each_pull_request_role_trusts_only_its_protected_github_environment(
    pipeline: PipelineSynth,
):
    config = pipeline.loaded.config
    assert set(pipeline.stack.pull_request_roles) == set(config.environments)
    for loaded in pipeline.loaded.environments:
        name = loaded.config.environment
        role = pipeline.template["Resources"][
            pipeline.stack.get_logical_id(
                default_resource(pipeline.stack.pull_request_roles[name], iam.CfnRole)
            )
        ]["Properties"]
        assert role["RoleName"] == pull_request_role_name(name)
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
        assert trust["Condition"] == {
            "StringEquals": {
                "token.actions.githubusercontent.com:aud": "sts.amazonaws.com",
                "token.actions.githubusercontent.com:sub": (
                    f"repo:{config.source.repository}:environment:plan-{name}"
                ),
            }
        }
        (policy,) = role["Policies"]
        (statement,) = policy["PolicyDocument"]["Statement"]
        assert statement == {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Resource": plan_reader_role_arn(loaded),
        }
        assert "lookup-role" not in json.dumps(role)


def _plan_reader(pipeline: PipelineSynth, loaded: LoadedEnvironment) -> dict[str, Any]:
    stage = pipeline.stack.stages[loaded.config.environment]
    template = json.loads(
        (
            pipeline.outdir
            / f"assembly-{PIPELINE_STACK_NAME}-{loaded.config.environment}"
            / f"{stage.plan_reader.artifact_id}.template.json"
        ).read_text()
    )
    (role,) = resources_of(template, "AWS::IAM::Role").values()
    assert len(template["Resources"]) == 1, "the plan reader is one role, nothing else"
    properties: dict[str, Any] = role["Properties"]
    return properties


def test_plan_reader_is_trusted_only_by_its_pull_request_role_and_reads_only_templates(
    pipeline: PipelineSynth,
):
    for loaded in pipeline.loaded.environments:
        config = loaded.config
        role = _plan_reader(pipeline, loaded)
        assert role["RoleName"] == f"hyperpod-{config.environment}-plan-reader"
        assert "ManagedPolicyArns" not in role  # no ReadOnlyAccess, nothing attached
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert trust == {
            "Action": "sts:AssumeRole",
            "Effect": "Allow",
            "Principal": {"AWS": pull_request_role_arn(pipeline.loaded.config, config.environment)},
        }
        (policy,) = role["Policies"]
        (statement,) = policy["PolicyDocument"]["Statement"]
        assert statement["Action"] == [
            "cloudformation:DescribeStacks",
            "cloudformation:GetTemplate",
            "cloudformation:GetTemplateSummary",
            "cloudformation:ListStackResources",
        ]
        resource = json.dumps(statement["Resource"])
        assert f"stack/hyperpod-{config.environment}-*/*" in resource
        assert f"{config.account}" in resource and "s3" not in resource


def test_plan_reader_grants_only_read_actions_authorized_on_stacks(pipeline: PipelineSynth):
    from policy_sentry.querying.actions import get_action_data

    from tests.policy.iam_permissions import Stack, environment_violations

    for action in PLAN_READER_ACTIONS:
        service, name = action.split(":")
        levels = {a["access_level"] for a in get_action_data(service, name)[service]}
        assert levels <= {"Read", "List"}, action
    stacks = {}
    for loaded in pipeline.loaded.environments:
        config = loaded.config
        stage = pipeline.stack.stages[config.environment]
        template = json.loads(
            (
                pipeline.outdir
                / f"assembly-{PIPELINE_STACK_NAME}-{config.environment}"
                / f"{stage.plan_reader.artifact_id}.template.json"
            ).read_text()
        )
        stacks[config.environment] = Stack(
            name=config.environment, template=template, region=config.region,
            account=config.account,
        )  # fmt: skip
    assert environment_violations(stacks) == ([], set())
