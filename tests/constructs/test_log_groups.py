"""Function log groups on a bare stack: the aspect gives every function without one a group
of its template (L2 functions and raw CfnResource providers alike), encrypted with the
stack's log key, keeps what a function already has, and `log_to` wires a function by hand so
the aspect leaves it alone. The log key admits CloudWatch Logs for this account's groups only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs

from platform_constructs.log_groups import (
    LOG_GROUP_METADATA,
    FunctionLogGroups,
    has_log_group,
    log_group,
    log_to,
    stack_log_key,
)
from tests.support import bare_stack, inline_function, only, resources_of, template_of


def _with_aspect(stack: cdk.Stack, days: int = 90, retain: bool = True) -> dict[str, Any]:
    policy = cdk.RemovalPolicy.RETAIN if retain else cdk.RemovalPolicy.DESTROY
    cdk.Aspects.of(stack).add(
        FunctionLogGroups(retention_days=days, removal_policy=policy),
        priority=cdk.AspectPriority.MUTATING,
    )
    return template_of(stack).to_json()


def _log_group(stack: cdk.Stack, construct_id: str, days: int = 7) -> logs.LogGroup:
    destroy = cdk.RemovalPolicy.DESTROY
    return log_group(
        stack,
        construct_id,
        retention_days=days,
        removal_policy=destroy,
        encryption_key=stack_log_key(stack, removal_policy=destroy),
    )


def _provider_handler(stack: cdk.Stack, tmp_path: Path) -> cdk.CfnResource:
    """CDK's CustomResourceProvider: its function is a raw CfnResource, no L2 option."""
    (tmp_path / "index.js").write_text("exports.handler = async () => ({});\n")
    provider = cdk.CustomResourceProvider.get_or_create_provider(
        stack,
        "Custom::Planted",
        code_directory=str(tmp_path),
        runtime=cdk.CustomResourceProviderRuntime.NODEJS_22_X,
    )
    handler = provider.node.find_child("Handler")
    assert isinstance(handler, cdk.CfnResource)
    return handler


def test_an_l2_function_gets_a_group_with_retention_and_removal_policy():
    stack = bare_stack()
    function = inline_function(stack, "Fn", logging_format=lambda_.LoggingFormat.JSON)
    template = _with_aspect(stack, days=30, retain=False)
    group_id = stack.get_logical_id(function.node.find_child("LogGroup").node.default_child)
    group = template["Resources"][group_id]
    key_id = stack.get_logical_id(stack.node.find_child("LogKey").node.default_child)
    assert group["Properties"] == {
        "RetentionInDays": 30,
        "KmsKeyId": {"Fn::GetAtt": [key_id, "Arn"]},
    }
    assert group["DeletionPolicy"] == group["UpdateReplacePolicy"] == "Delete"
    key = template["Resources"][key_id]
    assert key["DeletionPolicy"] == key["UpdateReplacePolicy"] == "Delete"
    # The rest of the function's LoggingConfig stays.
    assert only(resources_of(template, "AWS::Lambda::Function"))["Properties"]["LoggingConfig"] == {
        "LogFormat": "JSON",
        "LogGroup": {"Ref": group_id},
    }


def test_a_raw_provider_function_gets_a_group_beside_it(tmp_path):
    stack = bare_stack()
    handler = _provider_handler(stack, tmp_path)
    template = _with_aspect(stack)
    group = handler.node.scope.node.find_child("HandlerLogGroup")
    group_id = stack.get_logical_id(group.node.default_child)
    assert template["Resources"][group_id]["DeletionPolicy"] == "Retain"
    assert template["Resources"][stack.get_logical_id(handler)]["Properties"]["LoggingConfig"] == {
        "LogGroup": {"Ref": group_id}
    }


def test_a_function_with_its_own_group_is_left_alone(tmp_path):
    stack = bare_stack()
    own = _log_group(stack, "Own")
    inline_function(stack, "Fn", log_group=own)
    by_hand = _provider_handler(stack, tmp_path)
    log_to(by_hand, own)
    assert has_log_group(by_hand)
    assert [m.data for m in by_hand.node.metadata if m.type == LOG_GROUP_METADATA] == [
        own.node.path
    ]
    template = _with_aspect(stack)
    (group_id,) = resources_of(template, "AWS::Logs::LogGroup")
    for function in resources_of(template, "AWS::Lambda::Function").values():
        assert function["Properties"]["LoggingConfig"] == {"LogGroup": {"Ref": group_id}}


def test_log_to_refuses_a_second_group_and_what_is_no_function(tmp_path):
    stack = bare_stack()
    group = _log_group(stack, "Logs")
    handler = _provider_handler(stack, tmp_path)
    log_to(handler, group)
    with pytest.raises(ValueError, match="already logs"):
        log_to(handler, group)
    with pytest.raises(TypeError, match="not a function"):
        log_to(group.node.default_child, group)


def test_a_taken_construct_id_is_an_error_not_a_silent_skip():
    stack = bare_stack()
    function = inline_function(stack, "Fn")
    logs.LogGroup.from_log_group_name(function, "LogGroup", "/aws/lambda/someone-else")
    with pytest.raises(Exception, match="LogGroup is taken"):
        _with_aspect(stack)


def test_only_periods_cloudwatch_logs_accepts():
    with pytest.raises(ValueError, match="not a CloudWatch Logs retention period"):
        FunctionLogGroups(retention_days=100, removal_policy=cdk.RemovalPolicy.DESTROY)
    with pytest.raises(ValueError, match="not a CloudWatch Logs retention period"):
        _log_group(bare_stack(), "L", days=0)


def test_the_log_key_admits_cloudwatch_logs_for_this_accounts_groups_only():
    stack = bare_stack()
    key = stack_log_key(stack, removal_policy=cdk.RemovalPolicy.RETAIN)
    template = template_of(stack).to_json()
    resource = template["Resources"][stack.get_logical_id(key.node.default_child)]
    assert resource["Properties"]["EnableKeyRotation"] is True
    (logs_statement,) = [
        s
        for s in resource["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Sid") == "AllowCloudWatchLogsForThisAccountsLogGroups"
    ]
    assert logs_statement["Principal"] == {"Service": f"logs.{stack.region}.amazonaws.com"}
    assert logs_statement["Condition"] == {
        "ArnLike": {
            "kms:EncryptionContext:aws:logs:arn": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        f":logs:{stack.region}:{stack.account}:log-group:*",
                    ],
                ]
            }
        }
    }


def test_a_stack_has_one_log_key_kept_as_long_as_its_groups():
    stack = bare_stack()
    key = stack_log_key(stack, removal_policy=cdk.RemovalPolicy.RETAIN)
    assert stack_log_key(stack, removal_policy=cdk.RemovalPolicy.RETAIN) is key
    with pytest.raises(ValueError, match="another removal policy"):
        stack_log_key(stack, removal_policy=cdk.RemovalPolicy.DESTROY)
