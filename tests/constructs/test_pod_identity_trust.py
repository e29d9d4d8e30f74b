"""A Pod Identity role's trust, evaluated the way IAM evaluates it against the AssumeRole
request EKS Pod Identity makes for a pod.

What that request carries is documented by EKS and nothing more: principal
pods.eks.amazonaws.com, actions sts:AssumeRole and sts:TagSession, and the session tags of
`POD_IDENTITY_SESSION_TAGS` as `aws:RequestTag/<key>` (EKS User Guide, "Create IAM role with
trust policy required by EKS Pod Identity" and "Grant Pods access to AWS resources based on
tags"). A condition on any other key meets a request without that key, which IAM refuses: the
pod then gets no credentials at run time, long after the deploy succeeded.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import aws_iam as iam

from config.addons import POD_IDENTITY_SESSION_TAGS, ServiceAccount
from platform_constructs.eks_addons import PodIdentity
from tests.support import ACCOUNT, REGION, bare_stack, only, resources_of, template_of

CLUSTER = "c"
SERVICE_ACCOUNT = ServiceAccount(namespace="aws-hyperpod", name="controller")
CLUSTER_ARN = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}"


def _pod_request(
    *,
    cluster_arn: str = CLUSTER_ARN,
    namespace: str = SERVICE_ACCOUNT.namespace,
    service_account: str = SERVICE_ACCOUNT.name,
) -> dict[str, str]:
    """The request context of EKS Pod Identity's AssumeRole for one pod: its session tags."""
    tags = {
        "eks-cluster-arn": cluster_arn,
        "eks-cluster-name": cluster_arn.rsplit("/", 1)[1],
        "kubernetes-namespace": namespace,
        "kubernetes-service-account": service_account,
        "kubernetes-pod-name": "controller-7d9f-abcde",
        "kubernetes-pod-uid": "0f0e0d0c-0b0a-0908-0706-050403020100",
    }
    assert set(tags) == set(POD_IDENTITY_SESSION_TAGS)
    return {f"aws:RequestTag/{key}": value for key, value in tags.items()}


def _resolved(value: Any) -> Any:
    """A trust value with the partition filled in (the only token a bare stack leaves)."""
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return separator.join(_resolved(part) for part in parts)
    if value == {"Ref": "AWS::Partition"}:
        return "aws"
    assert isinstance(value, str), value
    return value


_OPERATORS = {"StringEquals", "ArnEquals"}  # all this evaluator knows: exact matches


def _admits(statement: dict[str, Any], request: dict[str, str]) -> bool:
    """IAM's answer for the trust statement: every condition key must be in the request and
    equal one of the statement's values (a missing key fails a non-IfExists operator)."""
    if statement["Effect"] != "Allow" or statement["Principal"] != {
        "Service": "pods.eks.amazonaws.com"
    }:
        return False
    if not {"sts:AssumeRole", "sts:TagSession"} <= set(statement["Action"]):
        return False
    for operator, conditions in statement.get("Condition", {}).items():
        assert operator in _OPERATORS, f"evaluator does not know {operator}"
        for key, expected in conditions.items():
            values = expected if isinstance(expected, list) else [expected]
            if key not in request or request[key] not in {_resolved(v) for v in values}:
                return False
    return True


def _trust(service_account: ServiceAccount = SERVICE_ACCOUNT) -> dict[str, Any]:
    stack = bare_stack()
    PodIdentity(
        stack,
        "Identity",
        cluster_name=CLUSTER,
        service_account=service_account,
        description="d",
        statements=[iam.PolicyStatement(actions=["sts:GetCallerIdentity"], resources=["*"])],
    )
    role = only(resources_of(template_of(stack), "AWS::IAM::Role"))
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    return statement


def test_the_trust_tests_only_keys_eks_pod_identity_sets():
    documented = {f"aws:RequestTag/{key}" for key in POD_IDENTITY_SESSION_TAGS}
    keys = {key for conditions in _trust()["Condition"].values() for key in conditions}
    assert keys <= documented, keys - documented
    # The role is pinned to one cluster, namespace and service account.
    assert {
        "aws:RequestTag/eks-cluster-arn",
        "aws:RequestTag/kubernetes-namespace",
        "aws:RequestTag/kubernetes-service-account",
    } <= keys


def test_a_pod_of_the_service_account_in_this_cluster_gets_credentials():
    assert _admits(_trust(), _pod_request())


@pytest.mark.parametrize(
    "other",
    [
        {"cluster_arn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/other"},
        {"cluster_arn": f"arn:aws:eks:{REGION}:222222222222:cluster/{CLUSTER}"},
        {"namespace": "hyperpod-ns-other"},
        {"service_account": "default"},
    ],
)
def test_pods_of_another_cluster_account_namespace_or_service_account_are_refused(other):
    assert not _admits(_trust(), _pod_request(**other))


def test_a_condition_on_a_key_eks_does_not_send_refuses_every_pod():
    """The failure the trust avoids: `aws:SourceArn` is absent from the documented request."""
    statement = _trust()
    statement["Condition"]["ArnEquals"] = {"aws:SourceArn": CLUSTER_ARN}
    assert not _admits(statement, _pod_request())
