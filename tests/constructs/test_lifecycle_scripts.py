"""The lifecycle-script delivery construct on a bare stack: what it refuses, what it grants."""

from __future__ import annotations

import importlib.util
import json

import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from platform_constructs.lifecycle_scripts import LifecycleScripts, LifecycleSettings
from stacks.hyperpod_stack import LIFECYCLE_DIR
from tests.support import bare_stack, resources_of, template_of

SETTINGS = LifecycleSettings(fsx_efa_enabled=True)


def scripts(stack, *, source_dir=LIFECYCLE_DIR, prefix="lifecycle/") -> LifecycleScripts:
    # A bucket of the app (with a policy, which the construct extends).
    bucket = s3.Bucket(stack, "Artifacts", bucket_name="artifacts")
    return LifecycleScripts(
        stack, "Lifecycle", source_dir=source_dir, bucket=bucket, prefix=prefix, settings=SETTINGS
    )


@pytest.mark.parametrize("prefix", ["", "/lifecycle/", "lifecycle"])
def test_prefix_must_be_relative_and_end_with_a_slash(prefix):
    with pytest.raises(ValueError, match="must be relative and end with '/'"):
        scripts(bare_stack(), prefix=prefix)


def test_a_folder_without_on_create_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"on_create\.sh"):
        scripts(bare_stack(), source_dir=tmp_path)


def test_nodes_read_only_the_lifecycle_prefix():
    stack = bare_stack()
    lifecycle = scripts(stack)
    assert stack.resolve(lifecycle.s3_uri) == {
        "Fn::Join": [
            "",
            [
                "s3://",
                {"Ref": stack.get_logical_id(lifecycle.bucket.node.default_child)},
                "/lifecycle/",
            ],
        ]
    }
    assert lifecycle.on_create == "on_create.sh"
    assert SETTINGS.as_json()["fsx_efa_enabled"] is True
    role = iam.Role(stack, "Nodes", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    lifecycle.grant_read(role)
    statements = {
        s["Sid"]: s
        for policy in resources_of(template_of(stack), "AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "Sid" in s
    }
    read, listing = statements["ReadLifecycleScripts"], statements["ListLifecycleScripts"]
    assert read["Action"] == "s3:GetObject"
    assert read["Resource"]["Fn::Join"][1][-1] == "/lifecycle/*"
    assert listing["Action"] == "s3:ListBucket"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["lifecycle/*"]}}


def test_generated_config_uses_the_hyperpod_storage_layout_and_the_scripts_accept_it():
    """containerd and kubelet go to the data volume, whose mount points are the scripts' own
    defaults (the group's EBS volume at /opt/sagemaker, the instance store at
    /opt/dlami/nvme); the log goes to the one file HyperPod uploads."""
    settings = LifecycleSettings(fsx_efa_enabled=False).as_json()
    assert settings["containerd_on_data_volume"] is settings["kubelet_on_data_volume"] is True
    assert "log_dir" not in settings
    spec = importlib.util.spec_from_file_location(
        "read_config", LIFECYCLE_DIR / "lib/read_config.py"
    )
    assert spec is not None and spec.loader is not None
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    values, warnings = reader.parse(json.dumps(settings))
    assert warnings == []
    assert values["ebs_volume_mount_point"] == "/opt/sagemaker"
    assert values["instance_store_mount_point"] == "/opt/dlami/nvme"


def test_only_the_tagged_deployment_role_writes_the_prefix():
    stack = bare_stack()
    deployed = scripts(stack)
    template = template_of(stack).to_json()
    (policy,) = resources_of(template, "AWS::S3::BucketPolicy").values()
    (deny,) = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid") == "OnlyTheDeploymentWritesLifecycleScripts"
    ]
    assert deny["Effect"] == "Deny" and deny["Principal"] == {"AWS": "*"}
    assert sorted(deny["Action"]) == ["s3:DeleteObject", "s3:DeleteObjectVersion", "s3:PutObject"]
    assert deny["Resource"]["Fn::Join"][1][-1] == "/lifecycle/*"
    assert deny["Condition"] == {
        "StringNotEquals": {"aws:PrincipalTag/hyperpod-platform/lifecycle-writer": "true"}
    }
    role_id = stack.get_logical_id(deployed.deployment.handler_role.node.default_child)
    tags = resources_of(template, "AWS::IAM::Role")[role_id]["Properties"]["Tags"]
    assert {"Key": "hyperpod-platform/lifecycle-writer", "Value": "true"} in tags


def test_an_imported_bucket_without_a_policy_is_refused():
    stack = bare_stack()
    bucket = s3.Bucket.from_bucket_name(stack, "Imported", "artifacts")
    with pytest.raises(ValueError, match="takes no bucket policy"):
        LifecycleScripts(
            stack,
            "Lifecycle",
            source_dir=LIFECYCLE_DIR,
            bucket=bucket,
            prefix="l/",
            settings=SETTINGS,
        )
