"""`hpctl guard`: refuse a change that would delete or replace a stateful resource.

Some config edits validate and synthesize cleanly yet destroy state on deploy: removing an
AZ deletes its subnets and replaces the HyperPod cluster (its VpcConfig is create-only);
moving FSx to another subnet replaces the file system. Only the templates show it, so the
guard compares two of them, stack by stack (matched by stack name):

- `hpctl guard OLD NEW`: two cloud assemblies (directories of `<stack>.template.json`, what
  `cdk synth --output DIR` writes);
- `hpctl guard --env NAME`: config/NAME.yaml synthesized now against the templates deployed
  in its account and Region (CloudFormation GetTemplate, the template as submitted). A stack
  not deployed yet has nothing to lose.

For every resource of a type in `STATEFUL_TYPES` in the old templates, it reports one line:
deleted (its logical ID, or its whole stack, is gone), replaced because its type changed, or
replaced because a create-only property changed (`hpctl.replacement`: the provider schemas'
createOnlyProperties plus the few they omit), naming the property. A create-only property
that references, by Ref/Fn::GetAtt/Fn::Sub, a resource of the same stack that is replaced
changes too (a subnet whose VPC is replaced is replaced). Exit 1 if any is found that
`--allow` does not accept, else 0.

This module compares and reads the assemblies; the command is `hpctl.guard_cmd`.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.loader import LoadedEnvironment
from config.names import STACK_UNITS
from hpctl import aws
from hpctl.replacement import (
    UnknownResourceTypeError,
    changed_properties,
    references,
    replacement_paths,
    values_at,
)

# The resource types whose loss loses state (data, the cluster and its nodes, what runs on
# EKS, a team's namespace): the one table of what the guard protects.
STATEFUL_TYPES: dict[str, str] = {
    "AWS::SageMaker::Cluster": "the HyperPod cluster and its nodes",
    "AWS::FSx::FileSystem": "the Lustre file system and its data",
    "AWS::FSx::DataRepositoryAssociation": "the file system's link to its S3 data",
    "AWS::S3::Bucket": "a bucket and its objects",
    "AWS::KMS::Key": "the key that decrypts the data",
    "AWS::EC2::VPC": "the VPC everything runs in",
    "AWS::EC2::VPCCidrBlock": "the VPC's secondary CIDR (the cluster subnets)",
    "AWS::EC2::Subnet": "a subnet nodes, FSx or endpoints live in",
    "AWS::EKS::Cluster": "the EKS control plane and everything it runs",
    "AWS::Logs::LogGroup": "a log group and its logs",
    "AWS::SageMaker::ComputeQuota": "a team's quota (its namespace goes with it)",
    "AWS::SageMaker::ClusterSchedulerConfig": "the cluster's scheduler config",
}

DELETED = "deleted"
REPLACED = "replaced"

Template = dict[str, Any]
# Stack name -> template, in the order the stacks are reported.
Assembly = dict[str, Template]


class GuardInputError(ValueError):
    """Input the guard cannot compare (a missing directory, no templates): exit 2."""


@dataclass(frozen=True)
class Finding:
    """One stateful resource the change deletes or replaces."""

    stack: str
    logical_id: str
    type: str
    action: str  # DELETED or REPLACED
    # The create-only properties that changed; empty for a deletion or a type change.
    properties: tuple[str, ...] = ()
    # Why a property changes although its text does not: the replaced resource it references.
    cause: str = ""
    allowed: bool = False

    @property
    def detail(self) -> str:
        if self.action == DELETED:
            return DELETED
        if not self.properties:
            return f"{REPLACED}: type changed"
        text = f"{REPLACED}: {', '.join(self.properties)} changed"
        return f"{text} ({self.cause})" if self.cause else text

    def line(self) -> str:
        text = f"{self.stack}/{self.logical_id} ({self.type}): {self.detail}"
        return f"{text} [allowed]" if self.allowed else text

    def as_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "logical_id": self.logical_id,
            "type": self.type,
            "action": self.action,
            "properties": list(self.properties),
            "detail": self.detail,
            "allowed": self.allowed,
        }


@dataclass(frozen=True)
class GuardReport:
    findings: list[Finding]
    # Stateful resources in the old templates.
    checked: int
    # --allow values that matched no finding (a typo, or a replacement no longer made).
    unused_allow: list[str] = field(default_factory=list)
    # --env only: stacks of the environment that are not deployed.
    not_deployed: list[str] = field(default_factory=list)

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if not f.allowed]

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "blocking": len(self.blocking),
            "findings": [f.as_dict() for f in self.findings],
            "unused_allow": self.unused_allow,
            "not_deployed": self.not_deployed,
        }

    def summary(self) -> str:
        allowed = len(self.findings) - len(self.blocking)
        text = (
            f"no stateful resource is deleted or replaced ({self.checked} checked)"
            if not allowed
            else f"no stateful resource is deleted or replaced beyond the {allowed} allowed "
            f"({self.checked} checked)"
        )
        if self.not_deployed:
            text += f"; not deployed yet: {', '.join(self.not_deployed)}"
        return text


# --------------------------------------------------------------------------- comparison


def _resources(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    resources = template.get("Resources") or {}
    return {k: v for k, v in resources.items() if isinstance(v, dict)}


def _properties(resource: Mapping[str, Any]) -> dict[str, Any]:
    properties = resource.get("Properties")
    return properties if isinstance(properties, dict) else {}


def _paths(type_: str) -> list[tuple[str, ...]]:
    """Where the type is replaced. Every stateful type must have a provider schema; other
    types (custom resources) without one only matter through what references them."""
    try:
        return replacement_paths(type_)
    except UnknownResourceTypeError:
        if type_ in STATEFUL_TYPES:
            raise
        return []


def _replaced(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]
) -> dict[str, tuple[tuple[str, ...], str]]:
    """Logical ID -> (changed create-only properties, cause) for every resource of any type
    that is in both templates and is replaced: its type or a create-only property changed,
    or a create-only property references (in the same stack) a resource that is replaced."""
    replaced: dict[str, tuple[tuple[str, ...], str]] = {}
    kept = {k: v for k, v in old.items() if k in new}
    for logical, before in kept.items():
        after = new[logical]
        if after.get("Type") != before.get("Type"):
            replaced[logical] = ((), "")
            continue
        changed = changed_properties(
            _paths(str(before.get("Type"))), _properties(before), _properties(after)
        )
        if changed:
            replaced[logical] = (tuple(changed), "")
    progress = True
    while progress:
        progress = False
        for logical, before in kept.items():
            if logical in replaced:
                continue
            hits: dict[str, str] = {}
            for path in _paths(str(before.get("Type"))):
                for shown, value in values_at(_properties(new[logical]), path):
                    targets = sorted(references(value) & replaced.keys())
                    if targets:
                        hits.setdefault(shown, targets[0])
            if hits:
                first = next(iter(hits.values()))
                replaced[logical] = (tuple(hits), f"{first} is replaced")
                progress = True
    return replaced


def compare_stack(stack: str, old: Template, new: Template | None) -> list[Finding]:
    """The stateful resources of `old` that `new` deletes or replaces (`new` None: the
    stack is gone, and all of them with it)."""
    before = _resources(old)
    after = _resources(new) if new is not None else {}
    replaced = _replaced(before, after)
    findings: list[Finding] = []
    for logical, resource in before.items():
        type_ = str(resource.get("Type"))
        if type_ not in STATEFUL_TYPES:
            continue
        if logical not in after:
            findings.append(Finding(stack, logical, type_, DELETED))
        elif logical in replaced:
            properties, cause = replaced[logical]
            findings.append(Finding(stack, logical, type_, REPLACED, properties, cause))
    return findings


def compare(
    old: Assembly,
    new: Assembly,
    allow: Collection[str] = (),
    not_deployed: Collection[str] = (),
) -> GuardReport:
    """Compare every stack of `old` with the stack of the same name in `new`. `allow`:
    logical IDs (or `stack/LogicalId`) whose deletion or replacement is deliberate."""
    findings: list[Finding] = []
    checked = 0
    for stack, template in old.items():
        checked += sum(
            1 for r in _resources(template).values() if str(r.get("Type")) in STATEFUL_TYPES
        )
        findings += compare_stack(stack, template, new.get(stack))
    used: set[str] = set()
    marked: list[Finding] = []
    for finding in findings:
        keys = {finding.logical_id, f"{finding.stack}/{finding.logical_id}"} & set(allow)
        used |= keys
        marked.append(dataclasses.replace(finding, allowed=bool(keys)))
    return GuardReport(
        findings=marked,
        checked=checked,
        unused_allow=[a for a in dict.fromkeys(allow) if a not in used],
        not_deployed=list(not_deployed),
    )


# --------------------------------------------------------------------------- inputs


def read_assembly(label: str, directory: Path) -> Assembly:
    """Stack name -> template for every `<stack>.template.json` directly in `directory`."""
    if not directory.is_dir():
        raise GuardInputError(
            f"{label} {directory}: no such directory; pass a cloud assembly directory "
            "(what `cdk synth --output DIR` writes, e.g. cdk.out/prod)"
        )
    files = sorted(directory.glob("*.template.json"))
    if not files:
        raise GuardInputError(
            f"{label} {directory}: no *.template.json in it; pass the directory "
            "`cdk synth --output DIR` wrote (e.g. cdk.out/prod)"
        )
    assembly: Assembly = {}
    for path in files:
        try:
            template = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise GuardInputError(
                f"{label} {path}: not a JSON template ({error}); synthesize it again"
            ) from error
        if not isinstance(template, dict) or not isinstance(template.get("Resources", {}), dict):
            raise GuardInputError(
                f"{label} {path}: not a CloudFormation template (no Resources object); "
                "synthesize it again"
            )
        assembly[path.name.removesuffix(".template.json")] = template
    return assembly


def _template_body(stack: str, body: object) -> Template:
    """GetTemplate's TemplateBody: botocore decodes a JSON body; a YAML one stays text."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except json.JSONDecodeError:
            from cfnlint.decode.cfn_yaml import loads  # type: ignore[import-untyped]

            body = loads(body)
    if not isinstance(body, dict):
        raise GuardInputError(f"stack {stack}: the deployed template is not an object")
    return dict(body)


def _not_deployed(failure: aws.AwsCallError) -> bool:
    return failure.code == "ValidationError" and "does not exist" in failure.message


def deployed_templates(client: Any, stack_names: list[str]) -> tuple[Assembly, list[str]]:
    """The template each stack was last deployed with (as submitted), and the stacks that
    are not deployed (an empty template: nothing to lose). AWS failures propagate."""
    deployed: Assembly = {}
    missing: list[str] = []
    for name in stack_names:
        try:
            response = aws.call(client, "get_template", StackName=name, TemplateStage="Original")
        except aws.AwsCallError as failure:
            if not _not_deployed(failure):
                raise
            deployed[name] = {}
            missing.append(name)
            continue
        deployed[name] = _template_body(name, response["TemplateBody"])
    return deployed, missing


def synthesized_templates(loaded: LoadedEnvironment) -> tuple[Assembly, list[str]]:
    """The environment synthesized as app.py does, in a temporary directory: (stack name ->
    template for the stacks it builds, the names of every stack it can build in the order
    they deploy, built or not: a stack the config no longer builds is deleted)."""
    from stacks.toolchain import use_bundled_node

    use_bundled_node()
    from stacks.platform import PlatformStacks, build_app

    names = loaded.config.names
    with tempfile.TemporaryDirectory(prefix="hpctl-guard-") as outdir:
        app, platform = build_app(loaded, outdir=outdir)
        app.synth()
        templates: Assembly = {
            stack.stack_name: json.loads(
                (Path(outdir) / stack.template_file).read_text(encoding="utf-8")
            )
            for stack in platform.by_name().values()
        }
    built = {short: stack.stack_name for short, stack in platform.by_name().items()}
    every = [
        built.get(f.name, names.stack(STACK_UNITS[f.name]))
        for f in dataclasses.fields(PlatformStacks)
    ]
    return templates, every
