"""Every Lambda function logs to a log group of its own template, with a retention.

A function without one logs to `/aws/lambda/<function>`, which Lambda creates on the first
invocation, outside CloudFormation, with events that never expire. The platform runs only
CDK's deploy-time functions (the kubectl provider's handler and framework, the
BucketDeployment handler, the providers behind `restrict_default_security_group` and
`AwsCustomResource`), and most of them take no log group: `KubectlProviderOptions` has no
such option, nor has the `CustomResourceProvider` singleton, and BucketDeployment's reaches
its per-stack singleton handler only from the deployment that happens to create it.

- `FunctionLogGroups`, an aspect registered once per environment (`build_platform`) and on
  the pipeline stack, covers every `AWS::Lambda::Function` in the tree, whatever made it (an
  L2 `lambda.Function`, a `SingletonFunction`, a raw `CfnResource`): a function without a log
  group gets an `AWS::Logs::LogGroup` next to it, with the retention and removal policy
  given, and `LoggingConfig.LogGroup` referencing it.
- A construct that wants more (the network's groups share its key) creates the group and
  calls `log_to`, or gives an L2 function `log_group=`; the aspect leaves such functions
  alone.

Every group is encrypted with a customer managed key (checkov CKV_AWS_158). `log_key` is the
one key policy: CloudWatch Logs of the stack's Region may use the key, only in the encryption
context of a log group of this account and Region (CloudWatch Logs User Guide, "Encrypt log
data in CloudWatch Logs using AWS KMS"). The writers (Lambda, EKS, the Prometheus workspace)
need no key permission: CloudWatch Logs encrypts. `stack_log_key` is the one key per stack
for groups that have no other: the aspect's, the EKS control plane's, the workspace's.

The reference orders the template: the group exists before the function, so before any
custom resource can invoke it, and outlives it on deletion. The groups take generated names,
not `/aws/lambda/<function>`: Lambda already created that group for every function deployed
before (creating it again fails the deployment), and a retained group of that name would
block redeploying the stack. The Lambda console shows each function's group (Configuration,
Logging). Lambda writes with the function's role: the roles of CDK's functions here carry
AWSLambdaBasicExecutionRole or AWSLambdaVPCAccessExecutionRole (any log group of the
account); a function with a narrower role needs the write grant from its construct.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from config.regions import LOG_RETENTION_DAYS
from platform_constructs.l1 import default_resource

FUNCTION_TYPE = "AWS::Lambda::Function"
# Node metadata (cloud assembly only, not the template) marking a function `log_to` wired:
# a property override is invisible to the aspect otherwise.
LOG_GROUP_METADATA = "hyperpod:log-group"
# Construct ID of a stack's own log key, at the stack's root (`stack_log_key`).
STACK_LOG_KEY_ID = "LogKey"
# The deletion policy a removal policy writes (RemovalPolicy.SNAPSHOT is not used here).
_DELETION_POLICY = {
    cdk.RemovalPolicy.RETAIN: cdk.CfnDeletionPolicy.RETAIN,
    cdk.RemovalPolicy.DESTROY: cdk.CfnDeletionPolicy.DELETE,
}


def log_key(scope: Construct, construct_id: str, *, removal_policy: cdk.RemovalPolicy) -> kms.Key:
    """A rotated key that CloudWatch Logs may use for the log groups of this account and
    Region only. Keep it as long as its groups: their events are unreadable without it."""
    stack = cdk.Stack.of(scope)
    key = kms.Key(
        scope,
        construct_id,
        description=f"Encrypts the CloudWatch Logs groups of {stack.stack_name}",
        enable_key_rotation=True,
        removal_policy=removal_policy,
    )
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowCloudWatchLogsForThisAccountsLogGroups",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=[
                "kms:Encrypt*",
                "kms:Decrypt*",
                "kms:ReEncrypt*",
                "kms:GenerateDataKey*",
                "kms:Describe*",
            ],
            resources=["*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name="*",
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                }
            },
        )
    )
    return key


def stack_log_key(scope: Construct, *, removal_policy: cdk.RemovalPolicy) -> kms.Key:
    """The log key of `scope`'s stack (`log_key` at the stack's root), created on first use."""
    stack = cdk.Stack.of(scope)
    existing = stack.node.try_find_child(STACK_LOG_KEY_ID)
    if existing is None:
        return log_key(stack, STACK_LOG_KEY_ID, removal_policy=removal_policy)
    if not isinstance(existing, kms.Key):
        raise TypeError(f"{existing.node.path} is taken by something other than the log key")
    resource = existing.node.default_child
    if not isinstance(resource, cdk.CfnResource) or (
        resource.cfn_options.deletion_policy != _DELETION_POLICY[removal_policy]
    ):
        # Groups kept past the stack need their key kept too, and the other way round.
        raise ValueError(f"{existing.node.path} exists with another removal policy")
    return existing


def has_log_group(function: cdk.CfnResource) -> bool:
    """Whether `function` already names the log group it logs to: in the properties its
    construct set (`log_group=` of an L2 function), or through `log_to`."""
    if any(entry.type == LOG_GROUP_METADATA for entry in function.node.metadata):
        return True
    properties: Any = cdk.Stack.of(function).resolve(function._cfn_properties) or {}
    # An L1 (`lambda.CfnFunction`) holds its properties camelCase, a raw CfnResource as written.
    config = properties.get("loggingConfig", properties.get("LoggingConfig")) or {}
    return config.get("logGroup", config.get("LogGroup")) is not None


def log_group(
    scope: Construct,
    construct_id: str,
    *,
    retention_days: int,
    removal_policy: cdk.RemovalPolicy,
    encryption_key: kms.IKey,
) -> logs.LogGroup:
    """A log group encrypted with `encryption_key` (a `log_key`) whose events expire after
    `retention_days` (a period CloudWatch Logs accepts; `logs.RetentionDays` is a named enum,
    so the number is set on the resource)."""
    _check_retention(retention_days)
    group = logs.LogGroup(
        scope,
        construct_id,
        encryption_key=encryption_key,
        removal_policy=removal_policy,
        retention=logs.RetentionDays.INFINITE,
    )
    default_resource(group, logs.CfnLogGroup).retention_in_days = retention_days
    return group


def log_to(function: cdk.CfnResource, group: logs.ILogGroup) -> None:
    """Send the logs of `function` (an `AWS::Lambda::Function` whose construct takes no log
    group) to `group`, keeping the rest of its `LoggingConfig`."""
    if function.cfn_resource_type != FUNCTION_TYPE:
        raise TypeError(f"{function.node.path} is a {function.cfn_resource_type}, not a function")
    if has_log_group(function):
        raise ValueError(f"{function.node.path} already logs to a log group of its own")
    function.add_property_override("LoggingConfig.LogGroup", group.log_group_name)
    function.node.add_metadata(LOG_GROUP_METADATA, group.node.path)


@jsii.implements(cdk.IAspect)
class FunctionLogGroups:
    """Gives every Lambda function without a log group one of its own (see the module
    docstring). Register with `cdk.Aspects.of(scope).add(..., priority=AspectPriority.MUTATING)`."""

    def __init__(self, *, retention_days: int, removal_policy: cdk.RemovalPolicy) -> None:
        _check_retention(retention_days)  # here, not first at synth
        self.retention_days = retention_days
        self.removal_policy = removal_policy

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, cdk.CfnResource) or node.cfn_resource_type != FUNCTION_TYPE:
            return
        if has_log_group(node):
            return
        # `LogGroup` under an L2 function (its resource is the `Resource` child),
        # `<id>LogGroup` beside any other function resource.
        scope = node.node.scope
        if not isinstance(scope, Construct):  # never: a CfnResource has a stack above it
            raise TypeError(f"{node.node.path} is not in a construct tree")
        construct_id = "LogGroup" if node.node.id == "Resource" else f"{node.node.id}LogGroup"
        if scope.node.try_find_child(construct_id) is not None:
            raise ValueError(
                f"{node.node.path} logs to no group of its own and {scope.node.path}/"
                f"{construct_id} is taken: give the function its log group (log_group=, log_to)"
            )
        group = log_group(
            scope,
            construct_id,
            retention_days=self.retention_days,
            removal_policy=self.removal_policy,
            encryption_key=stack_log_key(scope, removal_policy=self.removal_policy),
        )
        log_to(node, group)


def _check_retention(days: int) -> None:
    if days not in LOG_RETENTION_DAYS:
        raise ValueError(
            f"{days} is not a CloudWatch Logs retention period; use one of "
            f"{', '.join(map(str, LOG_RETENTION_DAYS))}"
        )
