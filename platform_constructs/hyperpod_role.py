"""IAM roles of a HyperPod cluster: the node execution role and the autoscaler's cluster role.

The execution role follows AWS's list for HyperPod with EKS orchestration (the statements of
AmazonSageMakerClusterInstanceRolePolicy plus the VPC CNI, ECR and Pod Identity permissions),
written as inline statements scoped as far as each API allows (this VPC, its cluster subnets,
this cluster's log group, the EKS cluster) instead of attaching the broad managed policy.
Nodes get no checkpoint access: training pods cannot use the node role (only host-network
pods reach instance metadata), and each team's pods get their own prefix through EKS Pod
Identity (platform_constructs/team_workspace.py). Actions that AWS does not authorize per resource (EC2 Describe*,
ecr:GetAuthorizationToken, cloudwatch:PutMetricData, ssmmessages) keep `*`, narrowed by a
condition key where one exists, and every wildcard is acknowledged on its own.

Against AmazonSageMakerClusterInstanceRolePolicy (SageMaker developer guide, AWS managed
policies for HyperPod), statement by statement: log streams and the log group under
/aws/sagemaker/Clusters (here this cluster's only), PutMetricData in the
/aws/sagemaker/Clusters namespace, the four ssmmessages channel actions, and s3:ListBucket /
s3:GetObject for lifecycle scripts (the managed policy allows any sagemaker-* bucket of the
account; here the stack grants read on the scripts' prefix of the artifact bucket). Not
granted although AWS's templates add it: ec2:AttachNetworkInterface, with which the VPC CNI
attaches further ENIs; a HyperPod node keeps its one ENI, as the capacity plan assumes.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from platform_constructs.nag import acknowledge, acknowledge_resource

# HyperPod writes node logs to /aws/sagemaker/Clusters/<cluster name>/<cluster id> and metrics
# to this namespace.
LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters"
METRICS_NAMESPACE = "/aws/sagemaker/Clusters"


class HyperPodExecutionRole(Construct):
    """The role every instance group's nodes assume (one role for the whole cluster)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        eks_cluster_arn: str,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        vpc_arn = stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
        network_interfaces = stack.format_arn(
            service="ec2", resource="network-interface", resource_name="*"
        )
        in_this_vpc = {"StringEquals": {"ec2:Vpc": vpc_arn}}
        subnet_arns = [
            stack.format_arn(service="ec2", resource="subnet", resource_name=s.subnet_id)
            for s in subnets
        ]
        security_group_arn = stack.format_arn(
            service="ec2", resource="security-group", resource_name=security_group.security_group_id
        )
        instances = stack.format_arn(
            service="ec2", resource="instance", resource_name="*", account="*"
        )
        repositories = stack.format_arn(
            service="ecr", resource="repository", resource_name="*", account="*"
        )
        log_group = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{LOG_GROUP_PREFIX}/{cluster_name}/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )

        statements = [
            # HyperPod attaches each node to the VPC through an ENI it creates in a cluster
            # subnet with the cluster security group.
            iam.PolicyStatement(
                sid="CreateNodeInterfaces",
                actions=["ec2:CreateNetworkInterface"],
                resources=[network_interfaces, security_group_arn, *subnet_arns],
                conditions=in_this_vpc,
            ),
            # The VPC CNI assigns pod addresses on the node's ENI; HyperPod shares the ENI
            # with its own account and removes it with the node. Only ENIs in this VPC.
            iam.PolicyStatement(
                sid="ManageNodeInterfaces",
                actions=[
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DetachNetworkInterface",
                    "ec2:ModifyNetworkInterfaceAttribute",
                    "ec2:CreateTags",
                ],
                resources=[network_interfaces],
                conditions=in_this_vpc,
            ),
            # Detach and attribute changes also name the instance (owned by HyperPod's
            # service account, so no account can be pinned) and may set the cluster group;
            # the ENI half of the authorization above still limits them to this VPC.
            iam.PolicyStatement(
                sid="NodeInterfaceAttachments",
                actions=["ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute"],
                resources=[instances, security_group_arn],
            ),
            # Describe calls cannot be scoped to resources; pinned to this region. The VPC CNI
            # on each node reads its instance, the instance type's ENI and address limits
            # (it has no built-in figures for ml.* types) and ENI tags: AWS's HyperPod
            # templates grant exactly these (aws/sagemaker-hyperpod-cluster-setup
            # sagemaker-iam-role-template.yaml AmazonEKSCNIDescribePolicy; awsome-distributed-
            # training hyperpod-eks-tf sagemaker_iam_role eks_cni_policy).
            iam.PolicyStatement(
                sid="DescribeNetwork",
                actions=[
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeTags",
                ],
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": stack.region}},
            ),
            # Container images: add-on images come from AWS-owned registries in other
            # accounts, training images from this account; all in this region.
            iam.PolicyStatement(
                sid="PullImages",
                actions=[
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                resources=[repositories],
            ),
            iam.PolicyStatement(
                sid="RegistryLogin",
                actions=["ecr:GetAuthorizationToken"],
                resources=["*"],
            ),
            # The Pod Identity agent on each node exchanges pod credentials for this cluster.
            iam.PolicyStatement(
                sid="PodIdentity",
                actions=["eks-auth:AssumeRoleForPodIdentity"],
                resources=[eks_cluster_arn],
            ),
            # Lifecycle and agent logs go to this cluster's log group only.
            iam.PolicyStatement(
                sid="ClusterLogGroup",
                actions=["logs:CreateLogGroup"],
                resources=[log_group],
            ),
            iam.PolicyStatement(
                sid="ClusterLogStreams",
                actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[f"{log_group}:log-stream:*"],
            ),
            iam.PolicyStatement(
                sid="ClusterMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": METRICS_NAMESPACE}},
            ),
            # Session Manager is how operators reach HyperPod nodes; the channel actions
            # have no resource type.
            iam.PolicyStatement(
                sid="SessionManagerChannels",
                actions=[
                    "ssmmessages:CreateControlChannel",
                    "ssmmessages:CreateDataChannel",
                    "ssmmessages:OpenControlChannel",
                    "ssmmessages:OpenDataChannel",
                ],
                resources=["*"],
            ),
        ]

        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Nodes of HyperPod cluster {cluster_name}",
            inline_policies={"HyperPodNode": iam.PolicyDocument(statements=statements)},
        )
        # Policies attached later (lifecycle read access) are kept with the role too.
        cdk.Aspects.of(self).add(_Retention(removal_policy))
        self._acknowledge(
            network_interfaces=network_interfaces,
            instances=instances,
            repositories=repositories,
            log_group=log_group,
        )

    def _acknowledge(
        self,
        *,
        network_interfaces: str,
        instances: str,
        repositories: str,
        log_group: str,
    ) -> None:
        role = self.role
        for resource, reason in (
            (
                network_interfaces,
                "ENI actions name interfaces HyperPod creates at node launch, so their IDs "
                "cannot be known; every ENI statement is conditioned on ec2:Vpc = this VPC.",
            ),
            (
                instances,
                "HyperPod node instances live in a service-owned account with unknown IDs; "
                "detaching still requires the ENI to be in this VPC.",
            ),
            (
                repositories,
                "Kubelet pulls add-on images from AWS-owned ECR registries in other accounts; "
                "pulls are read-only and limited to this region.",
            ),
            (
                log_group,
                "HyperPod names the log group /aws/sagemaker/Clusters/<name>/<cluster id>; the "
                "id is assigned at creation, so the grant stops at this cluster's name.",
            ),
            (
                f"{log_group}:log-stream:*",
                "Log streams are named per instance group and instance at launch; limited to "
                "this cluster's log group.",
            ),
        ):
            acknowledge_resource(role, "IAM5", reason, resource=resource)
        acknowledge(
            role,
            "IAM5",
            "EC2 Describe*, ecr:GetAuthorizationToken, cloudwatch:PutMetricData and the "
            "ssmmessages channel actions support no resource-level permissions; each is "
            "limited by region or metric namespace where a condition key exists.",
            finding="Resource::*",
        )


@jsii.implements(cdk.IAspect)
class _Retention:
    """Applies the cluster's removal policy to the role and every policy attached to it: a
    retained cluster keeps replacing failed nodes, and they assume this role."""

    def __init__(self, removal_policy: cdk.RemovalPolicy) -> None:
        self._removal_policy = removal_policy

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, cdk.CfnResource):
            node.apply_removal_policy(self._removal_policy)


class HyperPodAutoscalingRole(Construct):
    """The cluster role HyperPod's managed Karpenter assumes to add and remove nodes; kept
    with a retained cluster, which goes on scaling after its stack is deleted."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, construct_id)
        cdk.Aspects.of(self).add(_Retention(removal_policy))
        stack = cdk.Stack.of(self)
        # The cluster ARN ends in an id assigned at creation, and the role must exist before
        # the cluster: scope to clusters of this account and region.
        clusters = stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("hyperpod.sagemaker.amazonaws.com"),
            description=f"Karpenter autoscaling of HyperPod cluster {cluster_name}",
            inline_policies={
                "HyperPodAutoscaling": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            sid="ScaleClusterNodes",
                            actions=[
                                "sagemaker:BatchAddClusterNodes",
                                "sagemaker:BatchDeleteClusterNodes",
                            ],
                            resources=[clusters],
                        )
                    ]
                )
            },
        )
        acknowledge_resource(
            self.role,
            "IAM5",
            "The HyperPod cluster id in its ARN is assigned at creation and the role must "
            "exist first; limited to clusters of this account and region.",
            resource=clusters,
        )
