"""The way in, across stacks, in every environment: the admin host (network stack) reaches
the private API endpoint (rules in the EKS stack), its role has the access entry its config
names (AmazonEKSViewPolicy in every shipped environment), and kubectl on it is the very
object the kubectl handler's layer uploads. The endpoint stays private."""

from __future__ import annotations

import json

import pytest

from config.kubernetes import ADMIN_HOST_ACCESS_POLICIES
from tests.support import SYNTH_GROUP, SynthResult, resources_of

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def exported_admin(result: SynthResult, attribute: str) -> str:
    """The export name the EKS stack imports for the admin host's `attribute`."""
    host = result.stacks["network"].admin_host
    construct = host.role if attribute == "Arn" else host.security_group
    logical = result.logical_id("network", construct)
    outputs = result.templates["network"]["Outputs"]
    (name,) = [
        o["Export"]["Name"]
        for o in outputs.values()
        if "Export" in o and o["Value"] == {"Fn::GetAtt": [logical, attribute]}
    ]
    return name


def test_the_api_endpoint_stays_private(env):
    (cluster,) = resources_of(env.templates["eks"], "AWS::EKS::Cluster").values()
    vpc = cluster["Properties"]["ResourcesVpcConfig"]
    assert vpc["EndpointPrivateAccess"] is True
    assert vpc["EndpointPublicAccess"] is False
    assert env.config.eks.public_access_cidrs == []


def test_the_control_plane_admits_https_from_the_admin_host_only_in_both_directions(env):
    eks = env.stacks["eks"]
    control_plane = env.logical_id("eks", eks.cluster.control_plane_security_group)
    host = {"Fn::ImportValue": exported_admin(env, "GroupId")}
    ingress = [
        r["Properties"]
        for r in resources_of(env.templates["eks"], "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"].get("SourceSecurityGroupId") == host
    ]
    assert ingress == [
        {
            "Description": "Admin host to the Kubernetes API",
            "FromPort": 443,
            "GroupId": {"Fn::GetAtt": [control_plane, "GroupId"]},
            "IpProtocol": "tcp",
            "SourceSecurityGroupId": host,
            "ToPort": 443,
        }
    ]
    egress = [
        r["Properties"]
        for r in resources_of(env.templates["eks"], "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == host
    ]
    assert egress == [
        {
            "Description": "Admin host to the Kubernetes API",
            "DestinationSecurityGroupId": {"Fn::GetAtt": [control_plane, "GroupId"]},
            "FromPort": 443,
            "GroupId": host,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]


def test_the_admin_host_role_has_the_configured_access_policy_cluster_wide(env):
    access = env.config.network.admin_host.kubernetes_access
    assert access == "view"
    role = {"Fn::ImportValue": exported_admin(env, "Arn")}
    (entry,) = [
        e["Properties"]
        for e in resources_of(env.templates["eks"], "AWS::EKS::AccessEntry").values()
        if e["Properties"]["PrincipalArn"] == role
    ]
    assert entry["ClusterName"] == {
        "Ref": env.logical_id("eks", env.stacks["eks"].cluster.resource)
    }
    assert entry["Type"] == "STANDARD"
    (policy,) = entry["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert json.dumps(policy["PolicyArn"]).endswith(
        f'cluster-access-policy/{ADMIN_HOST_ACCESS_POLICIES[access]}"]]}}'
    )
    # No Kubernetes group: what the host may do is the access policy, nothing more.
    assert "KubernetesGroups" not in entry


def test_kubectl_on_the_admin_host_is_the_kubectl_handlers_layer_object(env):
    (layer,) = [
        r["Properties"]["Content"]
        for k, r in resources_of(env.templates["eks"], "AWS::Lambda::LayerVersion").items()
        if k.startswith("KubectlKubectlLayer")
    ]
    host = env.stacks["network"].admin_host
    assert env.resolved("network", host.tools.s3_object_key) == layer["S3Key"]
    instance = env.logical_id("network", host.instance)
    user_data = json.dumps(env.templates["network"]["Resources"][instance]["Properties"])
    assert layer["S3Key"] in user_data
