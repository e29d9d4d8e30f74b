"""HyperPod lifecycle scripts, delivered unzipped to an S3 prefix.

HyperPod downloads everything under `LifeCycleConfig.SourceS3Uri` onto each new node and runs
`OnCreate` from there, so the scripts must sit in S3 as plain files, not as the zip a CDK
asset is. A BucketDeployment copies the `lifecycle/` folder plus a generated
`lifecycle_config.json` (the scripts' only input) to a dedicated prefix of the artifact bucket
during the deploy; nothing is fetched from the internet at boot.

The deployment's handler is CDK's per-stack singleton, whose log group only the deployment
that creates it can choose; it gets one with the environment's retention from the
`FunctionLogGroups` aspect (`platform_constructs/log_groups.py`) instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct, IConstruct

from config.kubernetes import PLATFORM_LABEL_DOMAIN
from platform_constructs.cfn_lint import ignore_redundant_role_dependency
from platform_constructs.nag import acknowledge, acknowledge_resource

ON_CREATE = "on_create.sh"
CONFIG_FILE = "lifecycle_config.json"
# The tag that marks the deployment's role, the one principal the bucket lets change the
# prefix (a role tag, so the bucket's stack needs no reference to the role's).
WRITER_TAG = f"{PLATFORM_LABEL_DOMAIN}/lifecycle-writer"
# Every way to change or remove an object under the prefix.
WRITE_ACTIONS = ("s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObject")


@dataclass(frozen=True, kw_only=True)
class LifecycleSettings:
    """The contract with the scripts: the fields of `lifecycle_config.json`.

    Field names are the keys the scripts read; anything not listed keeps the scripts' own
    default.
    """

    # Image layers and pod data leave the root volume for the node's data volume: the group's
    # EBS volume when mounted, else the instance store, else they stay (lifecycle/README.md).
    # The mount points keep the scripts' defaults, the paths HyperPod and its AMI use.
    containerd_on_data_volume: bool = True
    kubelet_on_data_volume: bool = True
    # Every environment mounts FSx for Lustre, so the client is always configured. Best
    # effort on the node: a failure is logged and the node joins without the client.
    lustre_enabled: bool = True
    fsx_efa_enabled: bool

    def as_json(self) -> dict[str, object]:
        return asdict(self)


class LifecycleScripts(Construct):
    """Uploads the scripts and their config; `s3_uri` + `on_create` feed LifeCycleConfig."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source_dir: Path,
        bucket: s3.IBucket,
        prefix: str,
        settings: LifecycleSettings,
    ) -> None:
        super().__init__(scope, construct_id)
        if not (source_dir / ON_CREATE).is_file():
            raise ValueError(f"{source_dir} has no {ON_CREATE}; the lifecycle scripts are missing")
        if not prefix or prefix.startswith("/") or not prefix.endswith("/"):
            raise ValueError(f"prefix {prefix!r} must be relative and end with '/'")
        self.bucket = bucket
        self.prefix = prefix
        self.on_create = ON_CREATE
        self.settings = settings

        self.deployment = s3deploy.BucketDeployment(
            self,
            "Deployment",
            destination_bucket=bucket,
            destination_key_prefix=prefix,
            sources=[
                s3deploy.Source.asset(
                    str(source_dir),
                    # A developer's local config or Python caches must neither reach nodes
                    # nor change the asset hash; the generated config below is the only one.
                    exclude=[CONFIG_FILE, "*.example.json", "__pycache__", "*.pyc"],
                ),
                s3deploy.Source.json_data(CONFIG_FILE, settings.as_json()),
            ],
            # The prefix belongs to this deployment: files removed from lifecycle/ disappear
            # from S3 too, so a node never runs a stale helper.
            prune=True,
            # Node replacements keep running on_create.sh after a stack deletion that
            # retained the cluster, so the scripts stay.
            retain_on_delete=True,
        )
        self._acknowledge_handler()
        self._only_the_deployment_writes(bucket, prefix)

    def _only_the_deployment_writes(self, bucket: s3.IBucket, prefix: str) -> None:
        """Nodes run whatever is under the prefix as root: the bucket refuses writes there
        to anyone but the deployment's role (tagged here)."""
        cdk.Tags.of(self.deployment.handler_role).add(WRITER_TAG, "true")
        result = bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="OnlyTheDeploymentWritesLifecycleScripts",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(WRITE_ACTIONS),
                resources=[bucket.arn_for_objects(f"{prefix}*")],
                conditions={"StringNotEquals": {f"aws:PrincipalTag/{WRITER_TAG}": "true"}},
            )
        )
        if not result.statement_added:
            raise ValueError(f"{bucket.node.path} takes no bucket policy; pass the bucket itself")

    @property
    def s3_uri(self) -> str:
        return f"s3://{self.bucket.bucket_name}/{self.prefix}"

    def grant_read(self, role: iam.Role) -> None:
        """Read access to this prefix only: what a node needs to download the scripts."""
        objects = self.bucket.arn_for_objects(f"{self.prefix}*")
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadLifecycleScripts", actions=["s3:GetObject"], resources=[objects]
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListLifecycleScripts",
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{self.prefix}*"]}},
            )
        )
        # A bucket encrypted with a customer key also needs decrypt (SSE-S3 needs nothing).
        if self.bucket.encryption_key is not None:
            self.bucket.encryption_key.grant_decrypt(role)
        acknowledge_resource(
            role,
            "IAM5",
            "Nodes download every file under the lifecycle prefix, which this deployment "
            "owns and prunes; nothing else in the bucket is readable.",
            resource=objects,
        )

    def _acknowledge_handler(self) -> None:
        """The deployment's Lambda is CDK's own singleton; its findings are accepted here, on
        its role and function only."""
        role = self.deployment.handler_role
        acknowledge(
            role,
            "IAM4",
            "CDK's BucketDeployment handler uses AWSLambdaBasicExecutionRole for its own "
            "CloudWatch log group; the managed policy grants logs only.",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        generated_actions = [
            ("s3:GetObject*", "reads the staged asset zips and the files it syncs"),
            ("s3:GetBucket*", "reads bucket metadata of the asset and artifact buckets"),
            ("s3:List*", "lists the destination prefix to prune files removed from lifecycle/"),
            ("s3:DeleteObject*", "prunes stale scripts under its own prefix"),
            ("s3:Abort*", "aborts its own failed multipart uploads"),
        ]
        if self.bucket.encryption_key is not None:
            generated_actions += [
                ("kms:ReEncrypt*", "writes objects encrypted with the artifact bucket's key"),
                ("kms:GenerateDataKey*", "writes objects encrypted with the artifact bucket's key"),
            ]
        for action, reason in generated_actions:
            acknowledge(
                role,
                "IAM5",
                f"CDK's BucketDeployment handler {reason}; CDK generates this grant, scoped to "
                "the asset and artifact buckets.",
                finding=f"Action::{action}",
            )
        acknowledge_resource(
            role,
            "IAM5",
            "CDK's BucketDeployment grants object access on the whole artifact bucket; the "
            "handler only writes under the lifecycle prefix.",
            resource=self.bucket.arn_for_objects("*"),
        )
        stack = cdk.Stack.of(self)
        acknowledge_resource(
            role,
            "IAM5",
            "CDK's BucketDeployment handler reads the staged asset zips from the CDK "
            "bootstrap bucket, whose object keys are content hashes.",
            # The partition is a literal or a reference depending on CDK's feature flags;
            # resolving the same expression the grant uses matches either way.
            resource=f"arn:{stack.partition}:s3:::cdk-hnb659fds-assets-{stack.account}-{stack.region}/*",
        )
        handler = self._handler_function()
        if handler is not None:
            acknowledge(
                handler,
                "L1",
                "The runtime of CDK's BucketDeployment handler is pinned by aws-cdk-lib and "
                "moves with CDK upgrades; the project cannot choose it.",
            )
            ignore_redundant_role_dependency(handler)

    def _handler_function(self) -> IConstruct | None:
        # BucketDeployment creates one singleton function per stack, directly under the
        # stack, with this well-known id prefix.
        for child in cdk.Stack.of(self).node.children:
            if child.node.id.startswith("Custom::CDKBucketDeployment"):
                return child
        return None
