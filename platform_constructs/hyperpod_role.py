"""IAM roles of a HyperPod cluster: the node execution role and the autoscaler's cluster role.

The execution role is what AWS's own HyperPod EKS templates give it
(aws/sagemaker-hyperpod-cluster-setup eks/cloudformation/sagemaker-iam-role-template.yaml;
awsome-distributed-training hyperpod-eks-tf modules/sagemaker_iam_role): the AWS-managed
AmazonSageMakerClusterInstanceRolePolicy, which AWS extends when its node agents need more
(node logs and metrics under /aws/sagemaker/Clusters, Session Manager channels), plus inline
VPC CNI, ECR, Pod Identity and lifecycle-script statements, scoped as far as each API allows
(this VPC, its cluster subnets, the EKS cluster) where the templates use account-wide ARNs.
The managed policy's own grants (logs of every cluster under /aws/sagemaker/Clusters, not
only this one's) are not repeated inline: a narrower copy beside it would narrow nothing.
Nodes get no checkpoint access: training pods cannot use the node role (only host-network
pods reach instance metadata), and each team's pods get their own prefix through EKS Pod
Identity (platform_constructs/team_workspace.py). Actions that AWS does not authorize per
resource (EC2 Describe*, ecr:GetAuthorizationToken) keep `*`, narrowed by a condition key
where one exists, and every wildcard is acknowledged on its own.

Against the templates' inline statements, permission by permission:
- ec2:AttachNetworkInterface: granted, on ENIs of this VPC and on node instances (the VPC CNI
  attaches further ENIs with it).
- ENI create/assign/modify/delete and their permission actions: granted on ENIs conditioned on
  ec2:Vpc = this VPC, creation also on the cluster subnets and security group (the templates
  name the VPC ARN as a resource, which these actions are not authorized on).
- ec2:CreateTags: on ENIs of this VPC (the templates: any ENI of any account).
- ec2:Describe* (instances, instance types, tags, ENIs, subnets, VPCs, DHCP options, security
  groups): on "*", limited to this Region.
- ecr pulls and GetAuthorizationToken: pulls on repositories of this Region (the templates:
  "*"); the token has no resource type.
- cloudwatch:DescribeAlarms: only on the rollback alarms instance groups name
  (platform_constructs/hyperpod_cluster.py); the templates grant every alarm.
- eks-auth:AssumeRoleForPodIdentity: on this EKS cluster, as the templates do.
- s3:ListBucket / s3:GetObject: the lifecycle scripts' prefix of the artifact bucket (the
  templates: the whole scripts bucket).
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from platform_constructs.nag import acknowledge, acknowledge_resource

# HyperPod writes node logs to /aws/sagemaker/Clusters/<cluster name>/<cluster id>.
LOG_GROUP_PREFIX = "/aws/sagemaker/Clusters"
# What AWS's HyperPod templates attach to the execution role.
CLUSTER_INSTANCE_ROLE_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"


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
        network_interfaces = stack.format_arn(
            service="ec2", resource="network-interface", resource_name="*"
        )
        instances = stack.format_arn(
            service="ec2", resource="instance", resource_name="*", account="*"
        )
        repositories = stack.format_arn(
            service="ecr", resource="repository", resource_name="*", account="*"
        )
        statements = [
            *_network_statements(
                stack,
                vpc=vpc,
                subnets=subnets,
                security_group=security_group,
                network_interfaces=network_interfaces,
                instances=instances,
            ),
            *_image_and_identity_statements(
                repositories=repositories, eks_cluster_arn=eks_cluster_arn
            ),
        ]

        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"Nodes of HyperPod cluster {cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(CLUSTER_INSTANCE_ROLE_POLICY)
            ],
            inline_policies={"HyperPodNode": iam.PolicyDocument(statements=statements)},
        )
        # Policies attached later (lifecycle read access) are kept with the role too.
        cdk.Aspects.of(self).add(_Retention(removal_policy))
        self._acknowledge(
            network_interfaces=network_interfaces,
            instances=instances,
            repositories=repositories,
        )

    def _acknowledge(
        self,
        *,
        network_interfaces: str,
        instances: str,
        repositories: str,
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
        ):
            acknowledge_resource(role, "IAM5", reason, resource=resource)
        acknowledge(
            role,
            "IAM5",
            "EC2 Describe* and ecr:GetAuthorizationToken support no resource-level "
            "permissions; the Describe calls are limited to this region.",
            finding="Resource::*",
        )
        acknowledge(
            role,
            "IAM4",
            "AWS's HyperPod EKS templates attach this AWS-maintained policy to the execution "
            "role; AWS extends it when HyperPod's node agents need new permissions (node logs "
            "and metrics under /aws/sagemaker/Clusters, Session Manager channels).",
            finding=f"Policy::arn:<AWS::Partition>:iam::aws:policy/{CLUSTER_INSTANCE_ROLE_POLICY}",
        )


def _network_statements(
    stack: cdk.Stack,
    *,
    vpc: ec2.IVpc,
    subnets: Sequence[ec2.ISubnet],
    security_group: ec2.ISecurityGroup,
    network_interfaces: str,
    instances: str,
) -> list[iam.PolicyStatement]:
    """The node's ENIs (HyperPod's and the VPC CNI's), limited to this VPC, and the
    Describe calls the VPC CNI makes."""
    vpc_arn = stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
    in_this_vpc = {"StringEquals": {"ec2:Vpc": vpc_arn}}
    subnet_arns = [
        stack.format_arn(service="ec2", resource="subnet", resource_name=s.subnet_id)
        for s in subnets
    ]
    security_group_arn = stack.format_arn(
        service="ec2", resource="security-group", resource_name=security_group.security_group_id
    )
    return [
        # HyperPod attaches each node to the VPC through an ENI it creates in a cluster
        # subnet with the cluster security group.
        iam.PolicyStatement(
            sid="CreateNodeInterfaces",
            actions=["ec2:CreateNetworkInterface"],
            resources=[network_interfaces, security_group_arn, *subnet_arns],
            conditions=in_this_vpc,
        ),
        # The VPC CNI assigns pod addresses on the node's ENI and attaches further ENIs;
        # HyperPod shares the ENI with its own account and removes it with the node.
        # Only ENIs in this VPC.
        iam.PolicyStatement(
            sid="ManageNodeInterfaces",
            actions=[
                "ec2:AssignPrivateIpAddresses",
                "ec2:AttachNetworkInterface",
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
        # Attach, detach and attribute changes also name the instance (owned by
        # HyperPod's service account, so no account can be pinned) and may set the
        # cluster group; the ENI half of the authorization above still limits them to
        # this VPC.
        iam.PolicyStatement(
            sid="NodeInterfaceAttachments",
            actions=[
                "ec2:AttachNetworkInterface",
                "ec2:DetachNetworkInterface",
                "ec2:ModifyNetworkInterfaceAttribute",
            ],
            resources=[instances, security_group_arn],
        ),
        _describe_network_statement(stack.region),
    ]


def _describe_network_statement(region: str) -> iam.PolicyStatement:
    # Describe calls cannot be scoped to resources; pinned to this region. The VPC CNI
    # on each node reads its instance, the instance type's ENI and address limits
    # (it has no built-in figures for ml.* types) and ENI tags: AWS's HyperPod
    # templates grant exactly these (aws/sagemaker-hyperpod-cluster-setup
    # sagemaker-iam-role-template.yaml AmazonEKSCNIDescribePolicy; awsome-distributed-
    # training hyperpod-eks-tf sagemaker_iam_role eks_cni_policy).
    return iam.PolicyStatement(
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
        conditions={"StringEquals": {"aws:RequestedRegion": region}},
    )


def _image_and_identity_statements(
    *, repositories: str, eks_cluster_arn: str
) -> list[iam.PolicyStatement]:
    """Container image pulls and the Pod Identity agent's credential exchange."""
    return [
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
    ]


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
