"""Helpers the test layers share, one per pattern.

- Config rules: `environment_data` reads an environment file as plain data, `one_error_on`
  mutates it and expects exactly one error line naming a field (`config_errors` returns
  all of them); `loaded_from` / `variant_of` turn valid data into a `LoadedEnvironment` the
  way `load_file` does; `environment` loads a shipped file; `eks_config` builds an `eks`
  section on its own.
- Apps: `synthesize` builds and synthesizes one environment with `stacks.platform.build_app`
  (what app.py runs) and returns a `SynthResult` (templates, stacks, and lookups across
  them: `logical_id`, `resolved`, `exported`); `cluster_network` reaches the network
  construct; `synthesize_pipeline` does the same for the delivery pipeline app
  (`PipelineSynth`); `cfn_lint` lints a template with rules loaded once per session.
- Constructs: `bare_stack` gives a fresh stack in its own app, `template_of` its template,
  `resources_of` the resources of one type, `imported_cluster` a Kubernetes cluster handle
  for manifest constructs; `kubernetes_objects`, `instance_type_affinity` and
  `security_group_rules` read what a template applies or allows.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from config.eks_versions import SUPPORTED_KUBERNETES_VERSIONS
from config.errors import ConfigError
from config.loader import CONFIG_DIR, LoadedEnvironment, load_environment, parse_config, planned
from stacks.toolchain import use_bundled_node

if TYPE_CHECKING:
    import aws_cdk as cdk
    from aws_cdk import aws_eks_v2 as eks_v2
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import cx_api
    from aws_cdk.assertions import Template

    from config.delivery import LoadedPipeline
    from stacks.pipeline_stack import PipelineStack
    from stacks.platform import PlatformStacks

# jsii starts Node on the first CDK import (CDK is imported lazily here, so that the
# config and training tests never load it): the pinned Node is chosen first.
use_bundled_node()

REPO = Path(__file__).resolve().parent.parent
ENVIRONMENTS = ("dev", "staging", "prod")
# Tests that use the session synth fixtures (synth_all, dev, staging, prod, env, pipeline)
# all carry `pytest.mark.xdist_group(SYNTH_GROUP)`: the three environments and the pipeline
# app are synthesized once, on one worker. tests/conftest.py refuses a test that uses them
# without it.
SYNTH_GROUP = "synth"
# Tests that synthesize their own variants of an environment (and the session's
# `prod_baseline` they compare with): one worker, in parallel with the main synth.
VARIANTS_GROUP = "variants"

ACCOUNT = "111111111111"
REGION = "us-west-2"
# The oldest and newest Kubernetes minors the platform runs (config/eks_versions.py), named
# as kubernetes_validate names its schemas: manifests are validated against both.
KUBERNETES_VALIDATE_VERSIONS = tuple(
    f"{version}.0"
    for version in (SUPPORTED_KUBERNETES_VERSIONS[0], SUPPORTED_KUBERNETES_VERSIONS[-1])
)

Mutation = Callable[[dict[str, Any]], object]

# --------------------------------------------------------------------------- config


@functools.cache
def _environment_text(name: str) -> str:
    return (CONFIG_DIR / f"{name}.yaml").read_text(encoding="utf-8")


def environment_data(name: str = "dev") -> dict[str, Any]:
    """config/<name>.yaml as plain data, a fresh copy on every call."""
    return copy.deepcopy(yaml.safe_load(_environment_text(name)))


@functools.cache
def environment(name: str) -> LoadedEnvironment:
    """config/<name>.yaml loaded as `cdk synth -c env=<name>` loads it (cached)."""
    return load_environment(name)


def loaded_from(data: dict[str, Any], source: str = "test.yaml") -> LoadedEnvironment:
    """Validate and plan `data` like `load_file` (schema first, then the platform plan)."""
    return planned(parse_config(data, source), Path(source))


def variant_of(name: str, mutate: Mutation) -> LoadedEnvironment:
    """config/<name>.yaml changed by `mutate`, which must leave it valid."""
    data = environment_data(name)
    mutate(data)
    return loaded_from(data, f"{name}-variant.yaml")


def eks_config(**values: Any) -> Any:
    """An `eks` section on its own: the default Kubernetes version, one admin, `values` on
    top."""
    from config.eks_versions import DEFAULT_KUBERNETES_VERSION
    from config.schema import EksConfig

    return EksConfig.model_validate(
        {
            "kubernetes_version": DEFAULT_KUBERNETES_VERSION,
            "admin_role_arns": [f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin"],
            **values,
        }
    )


def config_errors(mutate: Mutation, *, base: str = "dev") -> list[str]:
    """The error lines (`hpctl validate` / synth) for config/<base>.yaml changed by `mutate`."""
    data = environment_data(base)
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        loaded_from(data)
    return caught.value.lines


def one_error_on(field: str, mutate: Mutation, *, base: str = "dev") -> str:
    """Expect exactly one self-contained line, naming `field`; return it."""
    lines = config_errors(mutate, base=base)
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith(f"{field}: "), line
    assert "\n" not in line and "Traceback" not in line, line
    return line


# --------------------------------------------------------------------------- whole apps


@dataclass(frozen=True)
class SynthResult:
    """One environment built by `build_app` and synthesized into `outdir`."""

    env_name: str
    loaded: LoadedEnvironment
    outdir: Path
    platform: PlatformStacks
    stacks: dict[str, cdk.Stack]  # short name ("network", "cluster_addons", ...) -> stack
    templates: dict[str, dict[str, Any]]  # short name -> template

    @property
    def config(self) -> Any:
        return self.loaded.config

    @property
    def layout(self) -> Any:
        return self.loaded.layout

    def template(self, short_name: str) -> Template:
        from aws_cdk.assertions import Template

        return Template.from_json(self.templates[short_name])

    def template_path(self, short_name: str) -> Path:
        return self.outdir / f"{self.stacks[short_name].stack_name}.template.json"

    def resources(self, short_name: str, type_: str) -> dict[str, dict[str, Any]]:
        return resources_of(self.templates[short_name], type_)

    def logical_id(self, short_name: str, construct: Any) -> str:
        """Logical ID of a resource, or of an L2 construct's default resource."""
        import aws_cdk as cdk

        resource = (
            construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        )
        return self.stacks[short_name].get_logical_id(resource)

    def resolved(self, short_name: str, token: Any) -> Any:
        """A token as stack `short_name`'s own template writes it."""
        return self.stacks[short_name].resolve(token)

    def exported(self, value: Any) -> tuple[str, Any]:
        """Follow {"Fn::ImportValue": name} to the output that exports `name`:
        (short name of the exporting stack, the output's value in its template)."""
        assert isinstance(value, dict) and set(value) == {"Fn::ImportValue"}, value
        name = value["Fn::ImportValue"]
        for short, template in self.templates.items():
            for output in template.get("Outputs", {}).values():
                if output.get("Export", {}).get("Name") == name:
                    return short, output["Value"]
        raise AssertionError(f"no stack exports {name}")


def synthesize(loaded: LoadedEnvironment, outdir: Path) -> SynthResult:
    """Build and synthesize one environment exactly as app.py does (cdk-nag included)."""
    from stacks.platform import build_app

    app, platform = build_app(loaded, outdir=str(outdir))
    app.synth()
    stacks = platform.by_name()
    templates = {
        name: json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
        for name, stack in stacks.items()
    }
    return SynthResult(
        env_name=loaded.config.environment,
        loaded=loaded,
        outdir=outdir,
        platform=platform,
        stacks=stacks,
        templates=templates,
    )


@dataclass(frozen=True)
class PipelineSynth:
    """The delivery pipeline app (`-c pipeline=true`, every environment a Stage) built by
    `build_pipeline_app` and synthesized into `outdir`."""

    loaded: LoadedPipeline
    stack: PipelineStack
    outdir: Path
    template: dict[str, Any]  # the pipeline stack's
    assembly: cx_api.CloudAssembly  # every stack, those inside the Stages included


def synthesize_pipeline(outdir: Path) -> PipelineSynth:
    """Build and synthesize the pipeline app from config/delivery/pipeline.yaml."""
    from config.delivery import load_pipeline
    from stacks.pipeline_stack import PIPELINE_STACK_NAME, build_pipeline_app

    loaded = load_pipeline()
    app, stack = build_pipeline_app(loaded, outdir=str(outdir))
    assembly = app.synth()
    template = json.loads((outdir / f"{PIPELINE_STACK_NAME}.template.json").read_text())
    return PipelineSynth(
        loaded=loaded, stack=stack, outdir=outdir, template=template, assembly=assembly
    )


@functools.cache
def _cfn_lint_rules() -> Any:
    """cfn-lint's default rules, loaded once: loading them (and the data files they read)
    takes seconds, which `cfnlint.api.lint_file` pays on every call."""
    from cfnlint.config import ConfigMixIn
    from cfnlint.runner import Runner

    return Runner(ConfigMixIn()).rules


def cfn_lint(template: str, region: str) -> list[Any]:
    """cfn-lint's matches for one template's text in `region`, as `cfn-lint --regions REGION`
    reports them with its default rules (metadata directives honoured)."""
    from cfnlint.api import lint

    return list(lint(template, rules=_cfn_lint_rules(), regions=[region]))


# --------------------------------------------------------------------------- constructs


def bare_stack(
    name: str = "Test", *, account: str | None = ACCOUNT, region: str | None = REGION
) -> cdk.Stack:
    """A stack in a fresh app, for one construct fed its props (no environment file)."""
    import aws_cdk as cdk

    env = cdk.Environment(account=account, region=region) if account or region else None
    return cdk.Stack(cdk.App(), name, env=env)


def inline_function(stack: cdk.Stack, construct_id: str, **kwargs: Any) -> lambda_.Function:
    """A minimal Python Lambda function with inline code (what log-group tests attach to)."""
    from aws_cdk import aws_lambda as lambda_

    return lambda_.Function(
        stack,
        construct_id,
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
        **kwargs,
    )


def template_of(stack: cdk.Stack) -> Template:
    from aws_cdk.assertions import Template

    return Template.from_stack(stack)


def resources_of(template: dict[str, Any] | Template, type_: str) -> dict[str, dict[str, Any]]:
    """Logical ID -> resource, for every resource of `type_`."""
    raw = template if isinstance(template, dict) else template.to_json()
    return {k: v for k, v in raw["Resources"].items() if v["Type"] == type_}


def only(found: dict[str, Any]) -> Any:
    """The single value of `found`."""
    assert len(found) == 1, list(found)
    return next(iter(found.values()))


def imported_cluster(stack: cdk.Stack, name: str = "c") -> eks_v2.ICluster:
    """An EKS cluster reference with a kubectl provider, for manifest constructs."""
    from aws_cdk import aws_eks_v2 as eks_v2
    from aws_cdk import aws_iam as iam

    provider = eks_v2.KubectlProvider.from_kubectl_provider_attributes(
        stack,
        "Provider",
        service_token=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", f"arn:aws:iam::{ACCOUNT}:role/kubectl"),
    )
    return eks_v2.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name=name, kubectl_provider=provider
    )


def kubernetes_objects(template: dict[str, Any] | Template) -> list[dict[str, Any]]:
    """Every Kubernetes object the template applies. A CloudFormation value inside a
    manifest (a bucket name from another stack) reads as `<token N>`; `manifest_tokens`
    gives the values behind them."""
    texts, _ = _manifests(template)
    return [o for text in texts for o in json.loads(text)]


def manifest_tokens(template: dict[str, Any] | Template) -> dict[str, Any]:
    """`<token N>` placeholder -> the CloudFormation value it stands for, over every manifest
    of the template (the numbering `kubernetes_objects` uses)."""
    return _manifests(template)[1]


def _manifests(template: dict[str, Any] | Template) -> tuple[list[str], dict[str, Any]]:
    texts: list[str] = []
    tokens: dict[str, Any] = {}
    for resource in resources_of(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        text, found = _manifest_text(resource["Properties"]["Manifest"], start=len(tokens))
        texts.append(text)
        tokens.update(found)
    return texts, tokens


def _manifest_text(manifest: Any, start: int = 0) -> tuple[str, dict[str, Any]]:
    if isinstance(manifest, str):
        return manifest, {}
    separator, parts = manifest["Fn::Join"]
    tokens: dict[str, Any] = {}
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        else:
            placeholder = f"<token {start + len(tokens)}>"
            tokens[placeholder] = part
            texts.append(placeholder)
    return separator.join(texts), tokens


def instance_type_affinity(daemonset: dict[str, Any]) -> list[str]:
    """The instance types a DaemonSet is pinned to by its one required node affinity term."""
    terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert len(terms) == 1
    (expression,) = terms[0]["matchExpressions"]
    assert expression["key"] == "node.kubernetes.io/instance-type"
    assert expression["operator"] == "In"
    values: list[str] = expression["values"]
    return values


def security_group_rules(
    template: dict[str, Any], group: str, direction: str = "Egress"
) -> list[dict[str, Any]]:
    """Every `direction` ("Egress"/"Ingress") rule of security group `group` (logical ID):
    inline in the group and separate AWS::EC2::SecurityGroup<direction> resources."""
    inline = template["Resources"][group]["Properties"].get(f"SecurityGroup{direction}", [])
    separate = [
        r["Properties"]
        for r in resources_of(template, f"AWS::EC2::SecurityGroup{direction}").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [group, "GroupId"]}
    ]
    return [*inline, *separate]


def cluster_network(result: SynthResult) -> Any:
    """The network stack's ClusterNetwork construct (public subnets, NAT gateways, the log
    key: what the stack does not export)."""
    from platform_constructs.network import ClusterNetwork

    construct = result.stacks["network"].node.find_child("Network")
    assert isinstance(construct, ClusterNetwork)
    return construct
