"""What one task-governance team's jobs need inside its namespace.

Creating a team's compute quota makes HyperPod task governance create the namespace
`hyperpod-ns-<team>` (with its LocalQueue); it does so asynchronously, after CloudFormation
reports the quota created. So the workspace first waits for the namespace to be Active (a
`KubernetesObjectValue` polls it), then applies what the team's jobs name:

- the FSx claim (through `FsxStaticVolume.add_namespace`),
- the service account training pods run as, mapped by EKS Pod Identity to a role that may
  read and write only the team's prefix of the checkpoint bucket (another team's writable
  checkpoints would be code execution in this team's jobs: checkpoints are unpickled), read
  the data bucket and publish metrics to one CloudWatch namespace,
- a ConfigMap with the values a job cannot know before deploy (the managed tier's S3 path).

Nothing here owns the namespace: deleting the workspace leaves it to task governance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct, IDependable

from config.addons import ServiceAccount
from platform_constructs.eks_addons import PodIdentity
from platform_constructs.eks_fsx_volume import FsxStaticVolume
from platform_constructs.nag import acknowledge, acknowledge_resource

# Task governance creates the namespace within seconds of the quota; the kubectl handler
# polls every 10 s and must finish inside its Lambda's 15 minutes.
NAMESPACE_WAIT = cdk.Duration.minutes(10)


@dataclass(frozen=True, kw_only=True)
class TeamWorkspaceProps:
    """`checkpoint_prefix`: the key prefix (ending in "/") the team owns in the checkpoint
    bucket; `config`: ConfigMap `config_map` data; `metrics_namespace`: the one CloudWatch
    namespace the team's pods may publish to."""

    team: str
    namespace: str
    service_account: str
    config_map: str
    config: Mapping[str, str]
    checkpoint_prefix: str
    metrics_namespace: str


class TeamWorkspace(Construct):
    """Exposes `namespace_ready` (the wait), `identity` (`role`, `association`),
    `manifest` (service account + ConfigMap) and `claim`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: TeamWorkspaceProps,
        cluster: eks_v2.ICluster,
        cluster_name: str,
        volume: FsxStaticVolume,
        checkpoint_bucket: s3.IBucket,
        data_bucket: s3.IBucket,
        created_after: IDependable,
    ) -> None:
        """`created_after`: what makes task governance create the namespace (the quota)."""
        super().__init__(scope, construct_id)
        self.namespace_ready = eks_v2.KubernetesObjectValue(
            self,
            "NamespaceReady",
            cluster=cluster,
            object_type="namespace",
            object_name=props.namespace,
            json_path=".status.phase",
            timeout=NAMESPACE_WAIT,
        )
        self.namespace_ready.node.add_dependency(created_after)

        self.identity = PodIdentity(
            self,
            "Identity",
            cluster_name=cluster_name,
            service_account=ServiceAccount(namespace=props.namespace, name=props.service_account),
            description=f"Training jobs of team {props.team}",
            statements=_team_statements(props, checkpoint_bucket),
        )
        data_bucket.grant_read(self.identity.role)
        if checkpoint_bucket.encryption_key is not None:
            checkpoint_bucket.encryption_key.grant(
                self.identity.role, "kms:Decrypt", "kms:GenerateDataKey"
            )
        self._acknowledge(props, checkpoint_bucket, data_bucket)

        self.manifest = eks_v2.KubernetesManifest(
            self,
            "Manifest",
            cluster=cluster,
            manifest=[
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": props.service_account, "namespace": props.namespace},
                },
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": props.config_map, "namespace": props.namespace},
                    "data": dict(sorted(props.config.items())),
                },
            ],
            overwrite=True,
        )
        self.manifest.node.add_dependency(self.namespace_ready)
        self.claim = volume.add_namespace(props.namespace)
        self.claim.node.add_dependency(self.namespace_ready)

    def _acknowledge(
        self, props: TeamWorkspaceProps, checkpoint_bucket: s3.IBucket, data_bucket: s3.IBucket
    ) -> None:
        role = self.identity.role
        acknowledge_resource(
            role,
            "IAM5",
            f"Checkpoint object keys are chosen per job and step under the team's own prefix "
            f"({props.checkpoint_prefix}); other teams' prefixes stay out of reach.",
            resource=checkpoint_bucket.arn_for_objects(f"{props.checkpoint_prefix}*"),
        )
        acknowledge(
            role,
            "IAM5",
            "cloudwatch:PutMetricData has no resource type; the statement is conditioned on "
            f"the {props.metrics_namespace} namespace.",
            finding="Resource::*",
        )
        # grant_read on the data bucket: read-only, every dataset object.
        for action in ("s3:GetObject*", "s3:GetBucket*", "s3:List*"):
            acknowledge(
                role,
                "IAM5",
                "Read-only access to the data bucket from grant_read: jobs read any dataset.",
                finding=f"Action::{action}",
            )
        acknowledge_resource(
            role,
            "IAM5",
            "Read-only access to the data bucket from grant_read: jobs read any dataset.",
            resource=data_bucket.arn_for_objects("*"),
        )


def _team_statements(
    props: TeamWorkspaceProps, checkpoint_bucket: s3.IBucket
) -> list[iam.PolicyStatement]:
    prefix = props.checkpoint_prefix
    return [
        iam.PolicyStatement(
            sid="TeamCheckpointObjects",
            actions=[
                "s3:GetObject",
                "s3:PutObject",
                "s3:DeleteObject",
                "s3:AbortMultipartUpload",
                "s3:ListMultipartUploadParts",
            ],
            resources=[checkpoint_bucket.arn_for_objects(f"{prefix}*")],
        ),
        # Listing is by prefix too, so other teams' key names stay hidden as well.
        iam.PolicyStatement(
            sid="TeamCheckpointListing",
            actions=["s3:ListBucket"],
            resources=[checkpoint_bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}},
        ),
        iam.PolicyStatement(
            sid="TrainingMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": props.metrics_namespace}},
        ),
    ]
