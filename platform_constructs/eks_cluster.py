"""The EKS control plane HyperPod orchestrates through.

Built from the CloudFormation types directly (`AWS::EKS::Cluster`, `AWS::EKS::AccessEntry`):
no Lambda-backed cluster resource, no nested stack, nothing created that is not listed
here. Kubernetes objects are applied separately (see `eks_kubectl.py`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import aws_cdk as cdk
import jsii
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from platform_constructs.log_groups import stack_log_key
from platform_constructs.nag import acknowledge

# Every control-plane log type: HyperPod support cases and security reviews need the audit
# and authenticator trails, and the scheduler/controller logs explain stuck pods.
CONTROL_PLANE_LOG_TYPES: tuple[str, ...] = (
    "api",
    "audit",
    "authenticator",
    "controllerManager",
    "scheduler",
)

CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"


def cluster_access_policy_arn(policy_name: str) -> str:
    """ARN of an EKS access policy (these live in the `eks` service namespace, no region)."""
    return f"arn:{cdk.Aws.PARTITION}:eks::aws:cluster-access-policy/{policy_name}"


# Never retained: standalone rules name another group (e.g. the kubectl provider's, deleted
# with the stack) and would block its deletion (a retained group keeps its inline rules);
# access entries must go when they leave the template, or removing an admin from config (or
# replacing an entry) would leave that principal cluster admin. After the stack is deleted,
# admins of a retained cluster are granted again through the EKS API (docs/teardown.md).
_NOT_RETAINED = frozenset(
    {"AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress", "AWS::EKS::AccessEntry"}
)


@jsii.implements(cdk.IAspect)
class _RetainEverything:
    def visit(self, node: IConstruct) -> None:
        if isinstance(node, cdk.CfnResource) and node.cfn_resource_type not in _NOT_RETAINED:
            node.apply_removal_policy(cdk.RemovalPolicy.RETAIN)


def retain_with_cluster(scope: IConstruct, removal_policy: cdk.RemovalPolicy) -> None:
    """Under a RETAIN policy, keep every resource in `scope` (added now or later) when its
    stack is deleted: a retained cluster keeps running, and it needs its role, security
    group, key and in-cluster objects as much as the cluster resource itself. Standalone
    security group rules and access entries are left out (see above). Under DESTROY,
    nothing changes."""
    if removal_policy == cdk.RemovalPolicy.RETAIN:
        cdk.Aspects.of(scope).add(_RetainEverything())


def admin_access_entry_id(principal_arn: str) -> str:
    """Construct ID of a cluster admin's access entry, derived from the principal alone.

    The role name (letters and digits of the ARN's last segment) keeps logical IDs readable;
    a short hash of the whole ARN keeps them distinct for roles with the same name in other
    accounts or paths, or names that differ only in punctuation.
    """
    if cdk.Token.is_unresolved(principal_arn):
        raise ValueError("admin principals must be literal ARNs (the ID is derived from the ARN)")
    name = re.sub(r"[^A-Za-z0-9]", "", principal_arn.rsplit("/", 1)[-1])[:64]
    digest = hashlib.sha256(principal_arn.encode("utf-8")).hexdigest()[:8]
    return f"Admin{name}{digest}"


class EksCluster(Construct):
    """EKS cluster with API authentication, a private endpoint, every control-plane log
    type, KMS envelope encryption of secrets, and cluster-admin access entries.

    `control_plane_subnets` hold the control plane's cross-account ENIs (EKS needs two AZs
    at least). `security_groups` are added to those ENIs next to the one EKS creates; pass
    the group the nodes use so nodes and control plane reach each other.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        kubernetes_version: str,
        vpc: ec2.IVpc,
        control_plane_subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        admin_role_arns: Sequence[str],
        public_access_cidrs: Sequence[str],
        log_retention_days: int,
        removal_policy: cdk.RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        if len({s.availability_zone for s in control_plane_subnets}) < 2:
            raise ValueError("EKS needs control-plane subnets in at least two Availability Zones")
        removal = removal_policy
        self.cluster_name = cluster_name
        # A retained cluster outlives its stack: its IAM role (the control plane manages its
        # ENIs with it), security group and key access stay with it.
        retain_with_cluster(self, removal)

        self.secrets_key = self._secrets_key(cluster_name, removal)
        self.log_key = stack_log_key(self, removal_policy=removal)
        self.log_group = self._control_plane_logs(cluster_name, log_retention_days, removal)
        self.role, key_access = self._cluster_role()

        # Only the kubectl provider's SG (added by its owner) may reach the API privately,
        # besides the nodes' group passed in `security_groups`.
        self.control_plane_security_group = ec2.SecurityGroup(
            self,
            "ControlPlaneSecurityGroup",
            vpc=vpc,
            description=f"EKS {cluster_name} control plane: HTTPS from in-VPC clients",
            allow_all_outbound=False,
        )

        public = list(public_access_cidrs)
        self.resource = self._cluster(
            kubernetes_version, control_plane_subnets, security_groups, public, removal
        )
        self.resource.apply_removal_policy(removal)
        self.resource.node.add_dependency(self.log_group)
        # The key permissions must be attached before EKS validates the encryption key.
        self.resource.node.add_dependency(key_access)
        if public:
            acknowledge(
                self.resource,
                "EKS1",
                "The public API endpoint is enabled only because eks.public_access_cidrs lists "
                "operator networks, and it is restricted to exactly those CIDRs",
            )

        self.cluster_arn = self.resource.attr_arn
        # The security group EKS creates and attaches to the control plane ENIs.
        self.cluster_security_group_id = self.resource.attr_cluster_security_group_id

        # Keyed by principal, never by list position: PrincipalArn cannot change in place, so
        # a position-keyed entry would be "replaced" by another admin's ARN whenever the list
        # shifts, and the new entry would collide with the one still holding that principal.
        self.admin_access_entries = [
            self.grant_cluster_admin(admin_access_entry_id(arn), arn) for arn in admin_role_arns
        ]

    def _secrets_key(self, cluster_name: str, removal_policy: cdk.RemovalPolicy) -> kms.Key:
        # Envelope encryption of Kubernetes secrets. Retained with the cluster: losing the
        # key would make every secret in a retained cluster unreadable.
        return kms.Key(
            self,
            "SecretsKey",
            description=f"Envelope encryption of Kubernetes secrets in EKS cluster {cluster_name}",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )

    def _control_plane_logs(
        self, cluster_name: str, retention_days: int, removal_policy: cdk.RemovalPolicy
    ) -> logs.CfnLogGroup:
        # EKS writes control-plane logs to this fixed group name and creates it, unencrypted
        # and never expiring, if it is missing (EKS User Guide, "Send control plane logs to
        # CloudWatch Logs"); created first, its key (the stack's log key) and retention are
        # ours, as terraform-aws-modules/terraform-aws-eks does
        # (`cloudwatch_log_group_kms_key_id`).
        log_group = logs.CfnLogGroup(
            self,
            "ControlPlaneLogs",
            log_group_name=f"/aws/eks/{cluster_name}/cluster",
            retention_in_days=retention_days,
            kms_key_id=self.log_key.key_arn,
        )
        log_group.apply_removal_policy(removal_policy)
        return log_group

    def _cluster_role(self) -> tuple[iam.Role, iam.Policy]:
        """The control plane's role and its access to the secrets key."""
        role = iam.Role(
            self,
            "ClusterRole",
            assumed_by=iam.ServicePrincipal("eks.amazonaws.com"),
            description=f"EKS control plane of {self.cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEKSClusterPolicy")
            ],
        )
        acknowledge(
            role,
            "IAM4",
            "AmazonEKSClusterPolicy is the AWS-maintained service-role policy EKS documents for "
            "the cluster role; AWS updates it as the control plane needs new actions",
            finding="Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy",
        )
        # What EKS needs on the key to wrap and unwrap data keys for secrets.
        key_access = iam.Policy(
            self,
            "SecretsKeyAccess",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    actions=["kms:Encrypt", "kms:Decrypt", "kms:DescribeKey", "kms:CreateGrant"],
                    resources=[self.secrets_key.key_arn],
                )
            ],
        )
        return role, key_access

    def _cluster(
        self,
        kubernetes_version: str,
        control_plane_subnets: Sequence[ec2.ISubnet],
        security_groups: Sequence[ec2.ISecurityGroup],
        public: list[str],
        removal_policy: cdk.RemovalPolicy,
    ) -> eks.CfnCluster:
        return eks.CfnCluster(
            self,
            "Resource",
            name=self.cluster_name,
            version=kubernetes_version,
            role_arn=self.role.role_arn,
            access_config=eks.CfnCluster.AccessConfigProperty(
                authentication_mode="API",
                # Admins come from config as access entries; the deploying role keeps none.
                bootstrap_cluster_creator_admin_permissions=False,
            ),
            # The add-ons are EKS-managed and pinned below; without this EKS would also
            # install unmanaged copies of vpc-cni, kube-proxy and coredns.
            bootstrap_self_managed_addons=False,
            resources_vpc_config=eks.CfnCluster.ResourcesVpcConfigProperty(
                subnet_ids=[s.subnet_id for s in control_plane_subnets],
                security_group_ids=[
                    self.control_plane_security_group.security_group_id,
                    *(g.security_group_id for g in security_groups),
                ],
                endpoint_private_access=True,
                endpoint_public_access=bool(public),
                public_access_cidrs=public or None,
            ),
            encryption_config=[
                eks.CfnCluster.EncryptionConfigProperty(
                    provider=eks.CfnCluster.ProviderProperty(key_arn=self.secrets_key.key_arn),
                    resources=["secrets"],
                )
            ],
            logging=eks.CfnCluster.LoggingProperty(
                cluster_logging=eks.CfnCluster.ClusterLoggingProperty(
                    enabled_types=[
                        eks.CfnCluster.LoggingTypeConfigProperty(type=t)
                        for t in CONTROL_PLANE_LOG_TYPES
                    ]
                )
            ),
            deletion_protection=removal_policy == cdk.RemovalPolicy.RETAIN,
        )

    def grant_cluster_admin(self, construct_id: str, principal_arn: str) -> eks.CfnAccessEntry:
        """Access entry binding `principal_arn` to AmazonEKSClusterAdminPolicy, cluster scope."""
        return eks.CfnAccessEntry(
            self,
            construct_id,
            cluster_name=self.resource.ref,
            principal_arn=principal_arn,
            type="STANDARD",
            access_policies=[
                eks.CfnAccessEntry.AccessPolicyProperty(
                    policy_arn=cluster_access_policy_arn(CLUSTER_ADMIN_POLICY),
                    access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"),
                )
            ],
        )
