"""HyperPod task governance: the cluster's scheduler config (priority classes, fair share,
idle-resource sharing) and one compute quota per team.

Both are SageMaker resources that reference the HyperPod cluster by ARN; they become Kueue
objects (ClusterQueue, LocalQueue `hyperpod-ns-<team>-localqueue`, WorkloadPriorityClass
`<class>-priority`) and creating a quota creates the team's namespace `hyperpod-ns-<team>`
(aws/sagemaker-hyperpod-cli, examples/end_to_end_walkthrough/00-getting-started/00-setup.md).

Neither may be created before Kueue serves: the walkthrough reports a scheduler config
created before the task governance add-on is fully installed ending CreateFailed, and AWS's
Terraform module for HyperPod on EKS (awslabs/awsome-distributed-training,
1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/hyperpod-eks-tf/modules/
task_governance/main.tf, `wait_for_kueue_webhook`) waits, after the add-on and before any
quota, for the deployment `kueue-controller-manager` in `kueue-system` to be available, at
most 300 s. `kueue_controller_available` is that wait. The controller is a Deployment: it
has an available replica only once a node runs it, so with continuous provisioning (the
cluster InService before its nodes) this is where the governance stack waits for nodes.

aws-cdk-lib 2.275 has no L1 class for AWS::SageMaker::ComputeQuota, so it is a
`CfnResource` built from a team's `TeamQuota` (config/teams.py, the platform plan's);
cfn-lint checks it against the CloudFormation schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IDependable

from config.teams import QuotaResource, TeamQuota

COMPUTE_QUOTA_TYPE = "AWS::SageMaker::ComputeQuota"

# The task governance add-on's Kueue controller. AWS's Terraform module waits 300 s for it
# (`kubectl wait --for=condition=available ... --timeout=300s`; see above), on a cluster whose
# nodes already run; here continuous provisioning may still be bringing the first node that
# can run it, so the wait takes what the kubectl handler's 15-minute Lambda allows.
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONTROLLER = "kueue-controller-manager"
KUEUE_WAIT = cdk.Duration.minutes(14)
# The construct ID is the logical ID's prefix CloudFormation shows next to the failure, and
# the handler's message names the command: "Timeout waiting for output from kubectl command:
# ['get', '-n', 'kueue-system', 'deployment', 'kueue-controller-manager', ...]". Check the
# add-on (`aws eks describe-addon`) and whether any node is Ready to run its controller.
KUEUE_WAIT_ID = "KueueControllerAvailable"


def kueue_controller_available(
    scope: Construct, *, cluster: eks_v2.ICluster, after: Sequence[IDependable]
) -> eks_v2.KubernetesObjectValue:
    """Waits, after `after` (the task governance add-on), until Kueue's controller has an
    available replica; the scheduler config and the quotas go after it."""
    wait = eks_v2.KubernetesObjectValue(
        scope,
        KUEUE_WAIT_ID,
        cluster=cluster,
        object_type="deployment",
        object_name=KUEUE_CONTROLLER,
        object_namespace=KUEUE_NAMESPACE,
        # Absent (empty output, so the handler keeps polling) until a replica is available.
        json_path=".status.availableReplicas",
        timeout=KUEUE_WAIT,
    )
    wait.node.add_dependency(*after)
    return wait


@dataclass(frozen=True, kw_only=True)
class PriorityClass:
    name: str
    weight: int


def _enabled(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _acknowledge_unknown_type(resource: cdk.CfnResource) -> None:
    """CDK's built-in template validation bundles resource schemas older than these types
    and reports them unknown (F3006); the test suite lints every template with cfn-lint
    1.58, which has their real schemas."""
    cdk.Validations.of(resource).acknowledge(
        cdk.Acknowledgment(
            id="CloudFormation-Validate::F3006",
            reason=f"{resource.cfn_resource_type} postdates the resource schemas CDK's "
            "validator bundles; cfn-lint checks it against the real schema",
        )
    )


class SchedulerConfig(Construct):
    """The cluster policy: priority classes and how idle compute is shared."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name: str,
        cluster_arn: str,
        priority_classes: Sequence[PriorityClass],
        fair_share: bool,
        idle_resource_sharing: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.resource = sagemaker.CfnClusterSchedulerConfig(
            self,
            "Resource",
            name=name,
            cluster_arn=cluster_arn,
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=[
                    sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(
                        name=c.name, weight=c.weight
                    )
                    for c in sorted(priority_classes, key=lambda c: c.name)
                ],
                fair_share=_enabled(fair_share),
                idle_resource_sharing=_enabled(idle_resource_sharing),
            ),
        )
        _acknowledge_unknown_type(self.resource)


def _resource(resource: QuotaResource) -> dict[str, Any]:
    fields = {
        "InstanceType": resource.instance_type,
        "Count": resource.count,
        "Accelerators": resource.accelerators,
        "VCpu": resource.vcpu,
        "MemoryInGiB": resource.memory_gib,
    }
    return {key: value for key, value in fields.items() if value is not None}


def compute_quota_properties(name: str, cluster_arn: str, quota: TeamQuota) -> dict[str, Any]:
    """The CloudFormation properties of one team's AWS::SageMaker::ComputeQuota."""
    sharing: dict[str, Any] = {"Strategy": quota.sharing}
    if quota.borrow_limit_percent is not None:
        sharing["BorrowLimit"] = quota.borrow_limit_percent
    return {
        "Name": name,
        "ClusterArn": cluster_arn,
        "ActivationState": "Enabled",
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [
                _resource(r) for r in sorted(quota.resources, key=lambda r: r.instance_type)
            ],
            "ResourceSharingConfig": sharing,
            "PreemptTeamTasks": "LowerPriority" if quota.preempt_lower_priority else "Never",
        },
        "ComputeQuotaTarget": {
            "TeamName": quota.team,
            "FairShareWeight": quota.fair_share_weight,
        },
    }


class ComputeQuota(Construct):
    """One team's guaranteed capacity and sharing rules. Quota edits update in place; the
    name, cluster and team are fixed at creation (changing them replaces the quota)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, name: str, cluster_arn: str, quota: TeamQuota
    ) -> None:
        super().__init__(scope, construct_id)
        self.resource = cdk.CfnResource(
            self,
            "Resource",
            type=COMPUTE_QUOTA_TYPE,
            properties=compute_quota_properties(name, cluster_arn, quota),
        )
        _acknowledge_unknown_type(self.resource)
        self.team = quota.team
