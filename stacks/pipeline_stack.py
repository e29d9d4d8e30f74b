"""The delivery pipeline (`hyperpod-pipeline`): CDK Pipelines deploying the environments of
`config/delivery/pipeline.yaml` in order, from one branch, through a CodeConnections
connection (no stored credentials).

- Synth: one step that runs the project's test command (`make test`), then synthesizes the
  pipeline app; a failing test or an unacknowledged cdk-nag finding stops everything.
- Each environment is a Stage built by `build_platform`, the same function `cdk deploy`
  uses, so it registers cdk-nag inside the Stage (validation plugins do not cross a Stage
  boundary) and names its stacks exactly as `cdk deploy -c env=<name>` does.
- Before each Stage: `hpctl guard --env <name>` compares a fresh synth with the templates
  deployed in the target account (through the CDK bootstrap lookup role, read-only) and
  stops the pipeline if a stateful resource would be deleted or replaced; then, where
  configured, a person approves.
- Failed executions and pending approvals notify an SNS topic encrypted with its own key.
- Pull-request checks read templates, never data: per environment, a tooling-account role
  that only the plan job of the protected GitHub environment `<prefix><name>` can assume
  (OIDC `sub` = `repo:<owner>/<repo>:environment:<prefix><name>`), which may assume only
  that environment's plan-reader role: CloudFormation template reads on the environment's
  stacks (what `hpctl guard` and `cdk diff --no-change-set` call). Synthesis does no
  lookups (cdk.context.json is committed), so no CDK lookup role and no ReadOnlyAccess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_codestarnotifications as notifications
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import pipelines
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from config.delivery import LoadedPipeline
from config.loader import LoadedEnvironment
from config.schema.pipeline import PipelineConfig
from platform_constructs.cfn_lint import ignore_cfn_lint
from platform_constructs.l1 import default_resource
from platform_constructs.log_groups import FunctionLogGroups, log_group, stack_log_key
from platform_constructs.nag import acknowledge_known_wildcards, acknowledge_resource
from platform_constructs.storage import AccessLogBucket
from stacks.platform import PlatformStacks, build_platform, cdk_json_context

PIPELINE_STACK_NAME = "hyperpod-pipeline"
# The make targets the pipeline's CodeBuild steps run (see the Makefile).
TEST_COMMAND = "make test"
SYNTH_COMMAND = "make synth-pipeline"
SYNTH_OUTPUT = "cdk.out/pipeline"  # where SYNTH_COMMAND writes the cloud assembly
SETUP_COMMAND = "make setup-synth"  # hpctl with cfn-lint; not the test extras
# CodeBuild image with Python 3.11/3.12 (what scripts/bootstrap.sh accepts).
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
ACCESS_LOG_RETENTION_DAYS = 365
# Logs of any Lambda function in the pipeline stack (CDK Pipelines creates none today; the
# environments' functions are their Stages' own): a year, like the artifact access logs.
# Retention of the pipeline's own logs: its deploy-time functions and every CodeBuild step.
PIPELINE_LOG_RETENTION_DAYS = 365
GITHUB_OIDC_URL = "https://token.actions.githubusercontent.com"
GITHUB_OIDC_AUDIENCE = "sts.amazonaws.com"
NOTIFIED_EVENTS = (
    "codepipeline-pipeline-pipeline-execution-failed",
    "codepipeline-pipeline-manual-approval-needed",
)


class PlatformStage(cdk.Stage):
    """One environment, deployed by the pipeline exactly as `cdk deploy -c env=<name>`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline: PipelineConfig,
        loaded: LoadedEnvironment,
        **kwargs: Any,
    ) -> None:
        config = loaded.config
        super().__init__(
            scope,
            construct_id,
            env=cdk.Environment(account=config.account, region=config.region),
            **kwargs,
        )
        self.platform: PlatformStacks = build_platform(self, loaded)
        self.plan_reader = PlanReaderStack(
            self,
            plan_reader_stack_name(loaded),
            stack_name=plan_reader_stack_name(loaded),
            env=cdk.Environment(account=config.account, region=config.region),
            pipeline=pipeline,
            loaded=loaded,
        )


# What `hpctl guard` (GetTemplate) and `cdk diff --no-change-set` (DescribeStacks,
# GetTemplate, ListStackResources for nested stacks, GetTemplateSummary) call: templates and
# stack status, no resource data.
PLAN_READER_ACTIONS = (
    "cloudformation:DescribeStacks",
    "cloudformation:GetTemplate",
    "cloudformation:GetTemplateSummary",
    "cloudformation:ListStackResources",
)


def partition_of(region: str) -> str:
    """The ARN partition of a Region (the workflow builds role ARNs before it has a token)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def pull_request_role_name(environment: str) -> str:
    """The tooling-account role one environment's pull-request plan job assumes (OIDC)."""
    return f"hyperpod-pull-request-{environment}"


def pull_request_role_arn(pipeline: PipelineConfig, environment: str) -> str:
    return (
        f"arn:{partition_of(pipeline.region)}:iam::{pipeline.account}:role/"
        f"{pull_request_role_name(environment)}"
    )


def plan_reader_role_name(loaded: LoadedEnvironment) -> str:
    """The target-account role that reads the environment's templates for a pull request."""
    return f"{loaded.config.names.stack_prefix}-plan-reader"


def plan_reader_role_arn(loaded: LoadedEnvironment) -> str:
    config = loaded.config
    return (
        f"arn:{partition_of(config.region)}:iam::{config.account}:role/"
        f"{plan_reader_role_name(loaded)}"
    )


def plan_reader_stack_name(loaded: LoadedEnvironment) -> str:
    return f"{loaded.config.names.stack_prefix}-plan-reader"


def github_environment(pipeline: PipelineConfig, environment: str) -> str:
    """The protected GitHub environment whose plan job may read `environment`'s templates."""
    return f"{pipeline.pull_requests.github_environment_prefix}{environment}"


class PlanReaderStack(cdk.Stack):
    """In the target account: the role a pull request's plan reads templates with. Trusted
    only by the tooling account's pull-request role of this environment."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline: PipelineConfig,
        loaded: LoadedEnvironment,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        config = loaded.config
        stacks = (
            f"arn:{self.partition}:cloudformation:{config.region}:{config.account}:stack/"
            f"{config.names.stack_prefix}-*/*"
        )
        self.role = iam.Role(
            self,
            "PlanReader",
            role_name=plan_reader_role_name(loaded),
            description="Pull-request plans: reads this environment's templates, no data",
            max_session_duration=cdk.Duration.hours(1),
            assumed_by=iam.ArnPrincipal(pull_request_role_arn(pipeline, config.environment)),
            inline_policies={
                "ReadTemplates": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(actions=list(PLAN_READER_ACTIONS), resources=[stacks])
                    ]
                )
            },
        )
        acknowledge_resource(
            self.role,
            "IAM5",
            "Template reads on this environment's stacks only (name prefix); stack IDs are "
            "generated.",
            resource=stacks,
        )


def lookup_role_name(account: str, region: str) -> str:
    """The read-only role `cdk bootstrap --trust` lets the pipeline account assume (the
    pipeline's guard step, which runs reviewed code from the pipeline branch)."""
    return f"cdk-{cdk.DefaultStackSynthesizer.DEFAULT_QUALIFIER}-lookup-role-{account}-{region}"


def lookup_role_arn(account: str, region: str) -> str:
    return f"arn:{cdk.Aws.PARTITION}:iam::{account}:role/{lookup_role_name(account, region)}"


def guard_step(source: pipelines.IFileSetProducer, loaded: LoadedEnvironment) -> pipelines.Step:
    """`hpctl guard --env <name>` with the target account's lookup role (CloudFormation
    GetTemplate through its read-only policy); a destructive change fails the step."""
    config = loaded.config
    role = lookup_role_arn(config.account, config.region)
    return pipelines.CodeBuildStep(
        f"Guard-{config.environment}",
        input=source,
        commands=[
            SETUP_COMMAND,
            f"aws configure set profile.target.role_arn {role}",
            "aws configure set profile.target.credential_source EcsContainer",
            f"AWS_PROFILE=target .venv/bin/hpctl guard --env {config.environment}",
        ],
        role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[role])],
    )


class PipelineStack(cdk.Stack):
    """Exposes `pipeline`, `stages` (environment name -> PlatformStage) and `topic`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        pipeline: PipelineConfig,
        environments: Sequence[LoadedEnvironment],
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # Aspects stop at a Stage: each environment's Stage registers its own (build_platform).
        cdk.Aspects.of(self).add(
            FunctionLogGroups(
                retention_days=PIPELINE_LOG_RETENTION_DAYS, removal_policy=cdk.RemovalPolicy.RETAIN
            ),
            priority=cdk.AspectPriority.MUTATING,
        )
        source = pipelines.CodePipelineSource.connection(
            pipeline.source.repository,
            pipeline.source.branch,
            connection_arn=pipeline.source.connection_arn,
        )
        # Every CodeBuild project of the pipeline (synth, guards, asset publishing,
        # self-mutation) logs here instead of a never-expiring /aws/codebuild/<project>.
        self.build_logs = log_group(
            self,
            "BuildLogs",
            retention_days=PIPELINE_LOG_RETENTION_DAYS,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            encryption_key=stack_log_key(self, removal_policy=cdk.RemovalPolicy.RETAIN),
        )
        self.pipeline = self._code_pipeline(source)
        self.stages = self._add_stages(pipeline, environments, source)
        self.pipeline.build_pipeline()
        self._log_artifact_access()
        self._acknowledge_generated_grants()
        self.pull_request_roles = self._pull_request_roles(pipeline, environments)
        # CDK Pipelines writes the cross-account action role ARNs with Fn::Join (cfn-lint
        # prefers Fn::Sub, same value) and a DependsOn on the role it also references.
        ignore_cfn_lint(
            default_resource(self.pipeline.pipeline, codepipeline.CfnPipeline), "E3703", "W3005"
        )

        self.topic = self._notifications(pipeline)

    def _code_pipeline(self, source: pipelines.CodePipelineSource) -> pipelines.CodePipeline:
        return pipelines.CodePipeline(
            self,
            "Pipeline",
            synth=pipelines.ShellStep(
                "Synth",
                input=source,
                commands=[TEST_COMMAND, SYNTH_COMMAND],
                primary_output_directory=SYNTH_OUTPUT,
            ),
            # Artifacts cross into the environment accounts: encrypted with a rotated key.
            cross_account_keys=True,
            enable_key_rotation=True,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    build_image=BUILD_IMAGE, compute_type=codebuild.ComputeType.LARGE
                ),
                logging=codebuild.LoggingOptions(
                    cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.build_logs)
                ),
            ),
        )

    def _add_stages(
        self,
        pipeline: PipelineConfig,
        environments: Sequence[LoadedEnvironment],
        source: pipelines.CodePipelineSource,
    ) -> dict[str, PlatformStage]:
        """A Stage per environment, after its guard and, where configured, an approval."""
        stages: dict[str, PlatformStage] = {}
        for loaded in environments:
            name = loaded.config.environment
            stage = PlatformStage(self, name, pipeline=pipeline, loaded=loaded)
            guard = guard_step(source, loaded)
            pre: list[pipelines.Step] = [guard]
            if name in pipeline.approval_before:
                approval = pipelines.ManualApprovalStep(
                    f"Approve-{name}",
                    comment=f"Deploy {name}? The guard found no stateful resource replaced.",
                )
                # A person approves only what the guard has passed.
                approval.add_step_dependency(guard)
                pre.append(approval)
            self.pipeline.add_stage(stage, pre=pre)
            stages[name] = stage
        return stages

    def _notifications(self, pipeline: PipelineConfig) -> sns.Topic:
        """The encrypted topic the pipeline's events go to, with the configured emails."""
        key = kms.Key(
            self,
            "NotificationKey",
            description="Pipeline notifications",
            enable_key_rotation=True,
        )
        # CodeStar Notifications publishes to the encrypted topic.
        key.grant(
            iam.ServicePrincipal("codestar-notifications.amazonaws.com"),
            "kms:GenerateDataKey*",
            "kms:Decrypt",
        )
        topic = sns.Topic(self, "Notifications", master_key=key, enforce_ssl=True)
        for email in pipeline.notify.emails:
            topic.add_subscription(subscriptions.EmailSubscription(email))
        notifications.NotificationRule(
            self,
            "PipelineEvents",
            source=self.pipeline.pipeline,
            events=list(NOTIFIED_EVENTS),
            targets=[topic],
            detail_type=notifications.DetailType.BASIC,
        )
        return topic

    def _log_artifact_access(self) -> None:
        """Server access logs for the generated artifact bucket (it takes no log bucket)."""
        logs = AccessLogBucket(
            self,
            "AccessLogs",
            removal_policy=cdk.RemovalPolicy.RETAIN,
            retention_days=ACCESS_LOG_RETENTION_DAYS,
        )
        artifacts = self.pipeline.pipeline.artifact_bucket
        bucket = default_resource(artifacts, s3.CfnBucket)
        bucket.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=logs.bucket_name, log_file_prefix="artifacts/"
        )
        logs.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[logs.arn_for_objects("artifacts/*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": artifacts.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": self.account},
                },
            )
        )

    def _acknowledge_generated_grants(self) -> None:
        artifacts = default_resource(self.pipeline.pipeline.artifact_bucket, s3.CfnBucket)
        known = _generated_grants(self.get_logical_id(artifacts))
        for policy in _policies(self.pipeline):
            acknowledge_known_wildcards(policy, known)

    def _pull_request_roles(
        self, pipeline: PipelineConfig, environments: Sequence[LoadedEnvironment]
    ) -> dict[str, iam.Role]:
        """Per environment, what its pull-request plan job runs as (GitHub OIDC, only the
        job of that protected GitHub environment): assume that environment's plan-reader
        role, for `hpctl guard --env` and `cdk diff`. Nothing else; no stored keys."""
        arn = pipeline.pull_requests.github_oidc_provider_arn
        provider = (
            iam.OidcProviderNative.from_oidc_provider_arn(self, "GitHubOidc", arn)
            if arn
            else iam.OidcProviderNative(
                self,
                "GitHubOidc",
                url=GITHUB_OIDC_URL,
                client_ids=[GITHUB_OIDC_AUDIENCE],
                removal_policy=cdk.RemovalPolicy.RETAIN,
            )
        )
        issuer = GITHUB_OIDC_URL.removeprefix("https://")
        roles: dict[str, iam.Role] = {}
        for loaded in environments:
            name = loaded.config.environment
            subject = f"repo:{pipeline.source.repository}:environment:"
            roles[name] = iam.Role(
                self,
                f"PullRequestRole-{name}",
                role_name=pull_request_role_name(name),
                description=f"Pull-request plan of {name}: assumes its template reader only",
                max_session_duration=cdk.Duration.hours(1),
                assumed_by=iam.WebIdentityPrincipal(
                    provider.oidc_provider_arn,
                    conditions={
                        "StringEquals": {
                            f"{issuer}:aud": GITHUB_OIDC_AUDIENCE,
                            f"{issuer}:sub": subject + github_environment(pipeline, name),
                        }
                    },
                ),
                inline_policies={
                    "AssumePlanReader": iam.PolicyDocument(
                        statements=[
                            iam.PolicyStatement(
                                actions=["sts:AssumeRole"],
                                resources=[plan_reader_role_arn(loaded)],
                            )
                        ]
                    )
                },
            )
        return roles


def build_pipeline_app(
    loaded: LoadedPipeline, *, app: cdk.App | None = None, outdir: str | None = None
) -> tuple[cdk.App, PipelineStack]:
    """The pipeline app (`-c pipeline=true`). cdk-nag is registered on the app for the
    pipeline stack; each Stage registers its own for the environment's stacks."""
    if app is None:
        app = cdk.App(outdir=outdir, context={**cdk_json_context(), "pipeline": "true"})
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    config = loaded.config
    stack = PipelineStack(
        app,
        PIPELINE_STACK_NAME,
        env=cdk.Environment(account=config.account, region=config.region),
        pipeline=config,
        environments=loaded.environments,
    )
    return app, stack


def _generated_grants(artifact_bucket: str) -> list[tuple[re.Pattern[str], str]]:
    """The wildcards CDK Pipelines writes into the roles it generates, with why each is
    acceptable; anything else stays a cdk-nag finding."""
    return [
        (
            re.compile(r"Action::kms:(GenerateDataKey|ReEncrypt)\*"),
            "CDK Pipelines grants its roles the pipeline's own artifact key (grant_encrypt_decrypt).",
        ),
        (
            re.compile(r"Action::s3:(Abort|DeleteObject|GetBucket|GetObject|List)\*"),
            "CDK Pipelines grants its roles read/write on the pipeline's own artifact bucket.",
        ),
        (
            re.compile(rf"Resource::<{re.escape(artifact_bucket)}\.Arn>/\*"),
            "Objects of the pipeline's own artifact bucket (keys are per execution).",
        ),
        (
            re.compile(r"Resource::arn:[^:]+:logs:[^:]+:\d{12}:log-group:/aws/codebuild/.*"),
            "CodeBuild projects write their own log groups, named after generated projects.",
        ),
        (
            re.compile(r"Resource::arn:[^:]+:codebuild:[^:]+:\d{12}:report-group/.*"),
            "CodeBuild projects write their own test reports, named after generated projects.",
        ),
        (
            re.compile(r"Resource::arn:\*:iam::\d{12}:role/\*"),
            "Self-mutation assumes only roles tagged aws-cdk:bootstrap-role (a condition).",
        ),
        (
            re.compile(r"Resource::\*"),
            "cloudformation:DescribeStacks, s3:ListBucket and codebuild:StartBuild of the "
            "generated asset builds are not scoped by CDK Pipelines.",
        ),
    ]


def _policies(scope: Construct) -> list[iam.CfnPolicy]:
    return [c for c in scope.node.find_all() if isinstance(c, iam.CfnPolicy)]
