"""Apply Kubernetes objects to an L1 EKS cluster from CloudFormation.

CloudFormation has no resource type for Kubernetes objects, so this is the one place the
platform runs Lambda code: the CDK-maintained kubectl provider (`aws_eks_v2.KubectlProvider`,
handler and provider framework) bound to the cluster through an imported-cluster reference.
kubectl and the AWS CLI come from pinned PyPI layer packages and are uploaded as assets;
nothing is downloaded at deploy time.

Network paths (no internet egress): the handler reaches the EKS API (DescribeCluster)
through the `eks` interface endpoint and the Kubernetes API through the private endpoint;
the provider framework invokes the handler through the `lambda` interface endpoint and
answers CloudFormation at its pre-signed S3 response URL through the S3 gateway endpoint.

Logs: the provider takes no log group, so both functions get theirs, in this stack, from the
`FunctionLogGroups` aspect (`platform_constructs/log_groups.py`) that `build_platform`
registers with the environment's retention.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks_v2
from aws_cdk import aws_iam as iam
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from constructs import Construct

from platform_constructs.cfn_lint import ignore_redundant_role_dependency
from platform_constructs.eks_cluster import EksCluster
from platform_constructs.l1 import default_resource
from platform_constructs.nag import acknowledge
from platform_constructs.network import HTTPS, InlinePrefixList

# Minor version of the bundled kubectl (the layer package above). kubectl supports API
# servers one minor version older or newer; the config schema's supported versions stay
# inside that window (a test checks it).
KUBECTL_MINOR = (1, 34)
MANAGEABLE_KUBERNETES_VERSIONS: tuple[str, ...] = tuple(
    f"{KUBECTL_MINOR[0]}.{KUBECTL_MINOR[1] + skew}" for skew in (-1, 0, 1)
)


def check_kubectl_skew(kubernetes_version: str) -> None:
    """Refuse a cluster version the bundled kubectl cannot manage (config validation
    normally rejects it first)."""
    if kubernetes_version not in MANAGEABLE_KUBERNETES_VERSIONS:
        raise ValueError(
            f"the bundled kubectl {KUBECTL_MINOR[0]}.{KUBECTL_MINOR[1]} manages Kubernetes "
            f"{', '.join(MANAGEABLE_KUBERNETES_VERSIONS)}, not {kubernetes_version}; use one "
            "of those (a new version needs the matching kubectl layer package)"
        )


class KubectlAccess(Construct):
    """A kubectl provider inside the VPC with cluster-admin access to `cluster`.

    `kubernetes` is the handle other constructs pass as `cluster=` to
    `aws_eks_v2.KubernetesManifest` / `HelmChart`, in this stack or a later one.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: EksCluster,
        kubernetes_version: str,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        endpoint_security_group: ec2.ISecurityGroup,
        s3_prefix_list_id: str,
    ) -> None:
        """`endpoint_security_group`: the group of the VPC's interface endpoints (it must
        admit HTTPS from `subnets`; the VPC needs `eks` and `lambda` endpoints).
        `s3_prefix_list_id`: the Region's S3 prefix list, routed by the S3 gateway endpoint."""
        super().__init__(scope, construct_id)
        check_kubectl_skew(kubernetes_version)

        self.security_group = self._security_group(
            cluster, vpc, endpoint_security_group, s3_prefix_list_id
        )
        role = self._handler_role(cluster)
        self.provider = self._provider(cluster, vpc, subnets, role)
        self._acknowledge_provider_findings()
        self._remove_unused_ecr_public_condition()
        for function in (
            self.provider.node.find_child("Handler"),
            self.provider.node.find_child("Provider").node.find_child("framework-onEvent"),
        ):
            ignore_redundant_role_dependency(function)

        self.access_entry = cluster.grant_cluster_admin("KubectlProviderAccess", role.role_arn)
        self.kubernetes = eks_v2.Cluster.from_cluster_attributes(
            self,
            "Kubernetes",
            cluster_name=cluster.resource.ref,
            vpc=vpc,
            kubectl_provider=self.provider,
        )

    def _security_group(
        self,
        cluster: EksCluster,
        vpc: ec2.IVpc,
        endpoint_security_group: ec2.ISecurityGroup,
        s3_prefix_list_id: str,
    ) -> ec2.SecurityGroup:
        # The endpoint is private: the handler runs in the VPC and is the only client the
        # control-plane group admits besides the nodes. Egress is HTTPS to exactly the three
        # places the functions talk to (see the module docstring), nothing else.
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description=f"kubectl provider of EKS {cluster.cluster_name}",
            allow_all_outbound=False,
        )
        # Inline (see InlinePrefixList): the group always has an inline egress rule, so EC2's
        # default allow-all egress never stays behind.
        security_group.add_egress_rule(
            InlinePrefixList(s3_prefix_list_id),
            HTTPS,
            "CloudFormation responses (S3 gateway endpoint)",
        )
        security_group.add_egress_rule(
            endpoint_security_group, HTTPS, "EKS and Lambda APIs (interface endpoints)"
        )
        security_group.add_egress_rule(
            cluster.control_plane_security_group, HTTPS, "Kubernetes API (private endpoint)"
        )
        cluster.control_plane_security_group.add_ingress_rule(
            security_group, HTTPS, "kubectl provider to the Kubernetes API"
        )
        return security_group

    def _handler_role(self, cluster: EksCluster) -> iam.Role:
        # An explicit role keeps the handler's permissions to what applying manifests needs:
        # the provider would otherwise attach ECR read-only policies for OCI Helm charts,
        # which this platform does not install.
        role = iam.Role(
            self,
            "HandlerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"kubectl provider of EKS {cluster.cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "service-role/AWSLambdaVPCAccessExecutionRole"
                )
            ],
            inline_policies={
                "DescribeCluster": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn]
                        )
                    ]
                )
            },
        )
        acknowledge(
            role,
            "IAM4",
            "AWSLambdaVPCAccessExecutionRole is the AWS-maintained minimum for a Lambda in a "
            "VPC (its own ENIs and log streams); the handler must run in the VPC to reach the "
            "private API endpoint",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
        )
        return role

    def _provider(
        self,
        cluster: EksCluster,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        role: iam.Role,
    ) -> eks_v2.KubectlProvider:
        # The provider needs an ICluster for the handler's eks:DescribeCluster scope and
        # the VPC placement; a reference by name is all it uses.
        reference = eks_v2.Cluster.from_cluster_attributes(
            self, "ClusterReference", cluster_name=cluster.resource.ref, vpc=vpc
        )
        return eks_v2.KubectlProvider(
            self,
            "Provider",
            cluster=reference,
            kubectl_layer=KubectlV34Layer(self, "KubectlLayer"),
            private_subnets=list(subnets),
            security_groups=[self.security_group],
            # Immutable: the provider cannot widen it behind our back.
            role=role.without_policy_updates(),
        )

    def depend_on_access(self, construct: Construct) -> None:
        """Make `construct` (a manifest in this stack) wait until the provider may apply it.
        (The provider's functions and roles it already reaches through its service token.)"""
        construct.node.add_dependency(self.access_entry)

    def _acknowledge_provider_findings(self) -> None:
        """The provider framework (the custom-resource entry point invoking the handler) and
        the handler's runtime are CDK's, not ours: acknowledge exactly what they create."""
        framework = self.provider.node.find_child("Provider")
        acknowledge(
            framework,
            "IAM4",
            "The CDK provider framework's Lambda uses AWSLambdaBasicExecutionRole for its own "
            "log streams; the role is created by the framework and not configurable here",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        )
        acknowledge(
            framework,
            "IAM4",
            "The CDK provider framework's Lambda runs in the VPC next to the handler and uses "
            "AWSLambdaVPCAccessExecutionRole for its ENIs",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole",
        )
        handler = self.provider.node.find_child("Handler")
        handler_function = default_resource(handler, cdk.CfnResource)
        acknowledge(
            handler,
            "L1",
            "The kubectl handler's runtime is chosen by the CDK release that ships the handler "
            "code and the AWS CLI layer (the newest Python its Region table lists); overriding "
            "it would run that code on a runtime the release was not tested with",
        )
        acknowledge(
            framework,
            "IAM5",
            "The provider framework may invoke any version of the kubectl handler function "
            "(the ':*' suffix is the function's versions, not other functions)",
            finding=f"Resource::<{cdk.Stack.of(self).get_logical_id(handler_function)}.Arn>:*",
        )

    def _remove_unused_ecr_public_condition(self) -> None:
        """The provider declares an `aws`-partition condition for the ECR Public policy it
        attaches to its own role; with our immutable role nothing uses it, and an unused
        condition is a template lint warning."""
        for construct in self.node.find_all():
            scope = construct.node.scope
            unused = isinstance(construct, cdk.CfnCondition) and construct.node.id == "HasEcrPublic"
            if unused and scope is not None:
                scope.node.try_remove_child(construct.node.id)
