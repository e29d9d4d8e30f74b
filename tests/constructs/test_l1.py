"""Checked access to the CloudFormation resource under an L2 construct."""

from __future__ import annotations

import pytest
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs

from platform_constructs.l1 import default_resource
from tests.support import bare_stack


def test_default_resource_returns_the_l1_of_the_expected_kind():
    stack = bare_stack()
    bucket = s3.Bucket(stack, "Bucket")
    resource = default_resource(bucket, s3.CfnBucket)
    assert isinstance(resource, s3.CfnBucket)
    assert resource.node.path == bucket.node.default_child.node.path == "Test/Bucket/Resource"


def test_default_resource_of_another_kind_names_the_construct():
    stack = bare_stack()
    queue = sqs.Queue(stack, "Queue")
    with pytest.raises(TypeError, match="Test/Queue: expected a CfnBucket default child"):
        default_resource(queue, s3.CfnBucket)
