"""What one task-governance team's jobs need inside its namespace.

Creating a team's compute quota makes HyperPod task governance create the namespace
`hyperpod-ns-<team>` (with its LocalQueue). The quota is created only once the add-on's Kueue
controller is available (`task_governance.kueue_controller_available`), and the namespace
may appear after CloudFormation reports the quota created. So the workspace first waits for
the namespace to be Active (a `KubernetesObjectValue` polls it; see NAMESPACE_WAIT for what
is known of that step), then applies what the team's jobs name:

- the FSx claims (through `FsxStaticVolume.add_team`): the team's own directory tree and the
  data repository's directory, read-only; nothing else of the file system,
- the service account training pods run as, mapped by EKS Pod Identity to a role that may
  read and write only the team's prefix of the checkpoint bucket (another team's writable
  checkpoints would be code execution in this team's jobs: checkpoints are unpickled), read
  the data bucket and publish metrics to one CloudWatch namespace,
- a ConfigMap with the values a job cannot know before deploy (the managed tier's S3 path),
- a one-shot Job, run as root, that creates the team's directories on the file system and
  gives them to the team's user and group (config/teams.py; docs/fsx.md).
  It runs in the platform's own namespace (`default`, where teams have no access), through
  the whole-file-system claim there: the team namespace has no claim above the team's tree.

Nothing here owns the namespace: deleting the workspace leaves it to task governance.

The directory Job is named after a hash of its own spec. Kubernetes refuses changes to a
Job's pod template, and the kubectl handler updates a manifest with `kubectl apply`, so a
Job under a fixed name could never change. A new spec gets a new name: CloudFormation
updates the manifest, the handler applies the new Job (it runs again; it is idempotent) and
prunes the old one. After ttlSecondsAfterFinished the finished Job is gone from the cluster
(its directories stay); should the manifest be applied again with the spec unchanged, the
Job is created again and runs again, changing nothing.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct, IDependable

from config.addons import ServiceAccount
from config.kubernetes import DEFAULT_NAMESPACE, FSX_CLAIM_NAME, FSX_MOUNT
from config.teams import (
    TEAM_DIRECTORY_MODE,
    TEAMS_ROOT,
    TEAMS_ROOT_MODE,
    team_directory,
)
from platform_constructs.eks_addons import PodIdentity
from platform_constructs.eks_fsx_volume import FsxStaticVolume
from platform_constructs.nag import acknowledge, acknowledge_resource

# Known: creating a quota creates `hyperpod-ns-<team>` (aws/sagemaker-hyperpod-cli,
# examples/end_to_end_walkthrough/00-getting-started/00-setup.md), and by then Kueue's
# controller is available, so nodes exist. Not documented by AWS: which component creates
# the namespace, or how long after the quota. The bound is the one AWS's Terraform module
# gives a quota to reach Created (awslabs/awsome-distributed-training, task_governance/
# scripts/manage-compute-quota.sh: 60 polls 10 s apart), inside the kubectl handler's
# 15-minute Lambda. On timeout CloudFormation shows this wait (`Workspace-<team>`'s
# NamespaceReady) failing with "Timeout waiting for output from kubectl command: ['get',
# ..., 'namespace', 'hyperpod-ns-<team>', ...]": check the quota's Status and
# FailureReason (`aws sagemaker describe-compute-quota`).
NAMESPACE_WAIT = cdk.Duration.minutes(10)

DIRECTORY_JOB_PREFIX = "team-directories-"
# Retries cover a node or mount hiccup; a finished Job is removed after a day, long enough
# to read its log.
DIRECTORY_JOB_BACKOFF_LIMIT = 4
DIRECTORY_JOB_TTL_S = 86_400
DIRECTORY_JOB_DEADLINE_S = 900


@dataclass(frozen=True, kw_only=True)
class TeamWorkspaceProps:
    """`checkpoint_prefix`: the key prefix (ending in "/") the team owns in the checkpoint
    bucket; `config`: ConfigMap `config_map` data; `metrics_namespace`: the one CloudWatch
    namespace the team's pods may publish to; `user_id`, `group_id`: the numeric user and
    group that own the team's `directories` on the file system (parents first, the team's
    own directory first of all) and that its pods run as; `setup_image`: a pinned image
    with a POSIX shell, mkdir, chown and chmod; `tolerations`: what lets the directory Job
    onto the cluster's (tainted) nodes."""

    team: str
    namespace: str
    service_account: str
    config_map: str
    config: Mapping[str, str]
    checkpoint_prefix: str
    metrics_namespace: str
    user_id: int
    group_id: int
    directories: tuple[str, ...]
    setup_image: str
    tolerations: Sequence[Mapping[str, Any]] = ()


class TeamWorkspace(Construct):
    """Exposes `namespace_ready` (the wait), `identity` (`role`, `association`),
    `manifest` (service account + ConfigMap), `claim` and `directories` (the Job)."""

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
        self.claim = volume.add_team(props.namespace, team_directory(props.team))
        self.claim.node.add_dependency(self.namespace_ready)
        self.directories = eks_v2.KubernetesManifest(
            self,
            "Directories",
            cluster=cluster,
            manifest=[directory_job(props)],
            overwrite=True,
        )
        # After the team exists, before its claims: a pod of the team's first job then mounts
        # a directory that exists.
        self.directories.node.add_dependency(self.namespace_ready)
        self.claim.node.add_dependency(self.directories)

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


def directory_script(user_id: int, group_id: int, directories: Sequence[str]) -> str:
    """The shell script that creates `directories` (parents first) owned by `user_id` and
    `group_id`, and TEAMS_ROOT root's; idempotent, and only the named directories are
    changed (never what jobs wrote inside them)."""
    lines = [
        "set -eu",
        f"mkdir -p {TEAMS_ROOT}",
        f"chown 0:0 {TEAMS_ROOT}",
        f"chmod {TEAMS_ROOT_MODE:o} {TEAMS_ROOT}",
        f"for dir in {' '.join(shlex.quote(d) for d in directories)}; do",
        '  mkdir -p "$dir"',
        f'  chown {user_id}:{group_id} "$dir"',
        f'  chmod {TEAM_DIRECTORY_MODE:o} "$dir"',
        '  ls -ldn "$dir"',
        "done",
    ]
    return "\n".join(lines) + "\n"


def directory_job(props: TeamWorkspaceProps) -> dict[str, Any]:
    """The batch/v1 Job that creates the team's directories, named after its spec's hash."""
    container: dict[str, Any] = {
        "name": "directories",
        "image": props.setup_image,
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "/bin/sh",
            "-c",
            directory_script(props.user_id, props.group_id, props.directories),
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"memory": "64Mi"},
        },
        "volumeMounts": [{"name": "fsx", "mountPath": FSX_MOUNT}],
        # Root with only what the script needs: CHOWN; FOWNER to chmod a directory it has
        # just given away; FSETID to keep setgid on a directory whose group root is not in;
        # DAC_OVERRIDE because a later run walks through the team's directories, of which
        # root is neither owner nor group. Lustre root squash would defeat it (docs/fsx.md,
        # "Root squash").
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {
                "drop": ["ALL"],
                "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
            },
        },
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [{"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM_NAME}}],
    }
    if props.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in props.tolerations]
    spec = {
        "backoffLimit": DIRECTORY_JOB_BACKOFF_LIMIT,
        "activeDeadlineSeconds": DIRECTORY_JOB_DEADLINE_S,
        "ttlSecondsAfterFinished": DIRECTORY_JOB_TTL_S,
        "template": {"spec": pod_spec},
    }
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{DIRECTORY_JOB_PREFIX}{digest}", "namespace": DEFAULT_NAMESPACE},
        "spec": spec,
    }


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
