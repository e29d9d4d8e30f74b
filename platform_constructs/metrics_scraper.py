"""The trainer's metrics into the platform's Prometheus workspace: an Amazon Managed Service for
Prometheus managed collector (`AWS::APS::Scraper`) on the EKS cluster.

The HyperPod observability add-on collects the infrastructure metrics but documents no way to
scrape arbitrary pods, so the trainer's endpoint (training/metrics_export.py) gets a collector of
its own, writing to the same workspace. What it scrapes is generated here from
`config.kubernetes`, the names `hpctl job render` puts on every worker: pods with the metrics
label, on their container port of the metrics name; each series gets `namespace` and
`training_job` (from the job label), the labels config/observability_metrics.py catalogues.

Set-up, as the AMP User Guide's "Set up managed collectors for Amazon EKS" page
(https://docs.aws.amazon.com/prometheus/latest/userguide/AMP-collector-how-to.html) decides it:
- Subnets in at least two Availability Zones, with the cluster's private endpoint enabled and
  VPC DNS on: the cluster's own control-plane subnets, whose ENIs reach the API privately.
- Cluster access: with the cluster in `API` authentication mode, AMP creates the scraper's
  access entry and its access policy itself ("Configure Amazon EKS for scraper access with
  access entries"). The `aps-collector-role` ClusterRole and the `aps-collector-user` mapping
  are the manual path for `aws-auth` ConfigMap clusters only; an AccessEntry of our own for the
  scraper's role would collide with the one AMP creates.
- A workspace encrypted with a customer managed key (the platform's is) takes a scraper only
  with a role configuration: a source role the scraper service assumes and a target role that
  may write to the workspace, in the same account ("Creating scraper for workspaces enabled
  with customer managed keys"). Both trust policies are scoped to this account's scrapers
  (the scraper's own ARN exists only after it is created, and it needs the roles first).
- Scrape interval: managed collectors accept 30 seconds or more ("Scraper limitations").
- The scrape configuration is base64-encoded (CloudFormation's ScrapeConfiguration.
  ConfigurationBlob; AMP API CreateScraper); `Fn::Base64` keeps it readable in the template.

Network: the scraper's ENIs get a security group of their own whose only rules are TCP to the
pods' group on the metrics port and HTTPS to the control plane's group, each mirrored by an
ingress rule on the other side (all in this construct's stack).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import aws_cdk as cdk
import yaml
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from config.kubernetes import (
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    TRAINING_JOB_LABEL,
)
from platform_constructs.network import HTTPS

# The scrape job: Prometheus sets it as `job` on every series it collects.
SCRAPE_JOB: Final = "hptrain"
SCRAPER_SERVICE: Final = "scraper.aps.amazonaws.com"
METRICS_TCP: Final = ec2.Port.tcp(METRICS_PORT)
# The rule CDK puts in a group that allows no outbound traffic: an address no packet goes to.
NO_TRAFFIC_CIDR: Final = "255.255.255.255/32"
NO_TRAFFIC_PORT: Final = ec2.Port.icmp_type_and_code(252, 86)


def pod_label_meta(key: str) -> str:
    """The meta label Prometheus's Kubernetes pod discovery gives pod label `key`: characters
    outside [a-zA-Z0-9_] become `_`."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def scrape_configuration(scrape_interval_s: int) -> dict[str, Any]:
    """The Prometheus configuration of the trainer's collector (as data)."""
    return {
        # At least 30 s: the observability schema checks it.
        "global": {"scrape_interval": f"{scrape_interval_s}s"},
        "scrape_configs": [
            {
                "job_name": SCRAPE_JOB,
                "kubernetes_sd_configs": [{"role": "pod"}],
                "relabel_configs": [
                    # Only the platform's training pods, while they run...
                    {
                        "action": "keep",
                        "source_labels": [pod_label_meta(METRICS_LABEL)],
                        "regex": re.escape(METRICS_LABEL_VALUE),
                    },
                    {
                        "action": "keep",
                        "source_labels": ["__meta_kubernetes_pod_phase"],
                        "regex": "Running",
                    },
                    # ...and of their ports, the metrics one (pod discovery makes one target
                    # per declared container port).
                    {
                        "action": "keep",
                        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": re.escape(METRICS_PORT_NAME),
                    },
                    {
                        "action": "replace",
                        "source_labels": ["__meta_kubernetes_namespace"],
                        "target_label": "namespace",
                    },
                    {
                        "action": "replace",
                        "source_labels": [pod_label_meta(TRAINING_JOB_LABEL)],
                        "target_label": "training_job",
                    },
                ],
            }
        ],
    }


def scrape_configuration_yaml(scrape_interval_s: int) -> str:
    return yaml.safe_dump(
        scrape_configuration(scrape_interval_s), sort_keys=False, default_flow_style=False
    )


class TrainingMetricsScraper(Construct):
    """Exposes `scraper` (the CfnScraper), `security_group`, `source_role` and `target_role`.

    `subnets`: at least two, in two Availability Zones, from which the cluster's private API
    endpoint is reachable. `pod_security_group`: the group of the nodes the training pods run
    on (pods use their node's group); `api_security_group`: the control plane's group that
    admits HTTPS to the private endpoint."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_arn: str,
        workspace_arn: str,
        vpc: ec2.IVpc,
        subnets: Sequence[ec2.ISubnet],
        pod_security_group: ec2.ISecurityGroup,
        api_security_group: ec2.ISecurityGroup,
        scrape_interval_s: int,
    ) -> None:
        super().__init__(scope, construct_id)
        if len({s.availability_zone for s in subnets}) < 2:
            raise ValueError("a managed collector needs subnets in at least two Availability Zones")
        stack = cdk.Stack.of(self)

        self.security_group = self._security_group(vpc, pod_security_group, api_security_group)
        self.source_role, self.target_role, become_target = self._roles(stack, workspace_arn)
        self.scraper = self._scraper(cluster_arn, workspace_arn, subnets, scrape_interval_s)
        # The source role's policy (a resource of its own) exists before the service uses it;
        # the roles themselves are referenced above.
        if become_target.policy_dependable is not None:
            self.scraper.node.add_dependency(become_target.policy_dependable)

    def _security_group(
        self,
        vpc: ec2.IVpc,
        pod_security_group: ec2.ISecurityGroup,
        api_security_group: ec2.ISecurityGroup,
    ) -> ec2.SecurityGroup:
        security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            description="Managed Prometheus collector: trainer metrics port and the Kubernetes API",
            allow_all_outbound=False,
        )
        # Egress here and the mirrored ingress on the peer's group, both in this stack.
        security_group.connections.allow_to(
            pod_security_group, METRICS_TCP, "Managed Prometheus collector to trainer metrics"
        )
        security_group.connections.allow_to(
            api_security_group, HTTPS, "Managed Prometheus collector to the Kubernetes API"
        )
        # Both egress rules are separate resources (their peers are groups), which leaves the
        # group without an inline egress rule, and then EC2 keeps its default allow-all egress.
        # CDK's own match-nothing rule, inline, removes that default.
        security_group.add_egress_rule(
            ec2.Peer.ipv4(NO_TRAFFIC_CIDR), NO_TRAFFIC_PORT, "Disallow all other traffic"
        )
        return security_group

    def _roles(
        self, stack: cdk.Stack, workspace_arn: str
    ) -> tuple[iam.Role, iam.Role, iam.AddToPrincipalPolicyResult]:
        """The source role the service assumes, the target role that writes to the
        workspace, and the source role's grant to assume the target role."""
        # The CMK workspace's role configuration: trust limited to this account's scrapers.
        scrapers = stack.format_arn(
            service="aps",
            resource="scraper",
            resource_name="*",
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )
        source_role = iam.Role(
            self,
            "SourceRole",
            assumed_by=iam.ServicePrincipal(SCRAPER_SERVICE).with_conditions(
                {
                    "ArnLike": {"aws:SourceArn": scrapers},
                    "StringEquals": {"aws:SourceAccount": stack.account},
                }
            ),
            description="Managed Prometheus collector of trainer metrics (source role)",
        )
        target_role = iam.Role(
            self,
            "TargetRole",
            assumed_by=iam.ArnPrincipal(source_role.role_arn).with_conditions(
                {"StringLike": {"sts:ExternalId": scrapers}}
            ),
            description="Managed Prometheus collector of trainer metrics: remote write",
            inline_policies={
                "RemoteWrite": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(actions=["aps:RemoteWrite"], resources=[workspace_arn])
                    ]
                )
            },
        )
        become_target = source_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[target_role.role_arn])
        )
        return source_role, target_role, become_target

    def _scraper(
        self,
        cluster_arn: str,
        workspace_arn: str,
        subnets: Sequence[ec2.ISubnet],
        scrape_interval_s: int,
    ) -> aps.CfnScraper:
        return aps.CfnScraper(
            self,
            "Resource",
            alias="training-metrics",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster_arn,
                    subnet_ids=[s.subnet_id for s in subnets],
                    security_group_ids=[self.security_group.security_group_id],
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(
                    workspace_arn=workspace_arn
                )
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=cdk.Fn.base64(scrape_configuration_yaml(scrape_interval_s))
            ),
            role_configuration=aps.CfnScraper.RoleConfigurationProperty(
                source_role_arn=self.source_role.role_arn,
                target_role_arn=self.target_role.role_arn,
            ),
        )
