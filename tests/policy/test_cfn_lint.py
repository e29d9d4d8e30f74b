"""cfn-lint over every template of every environment, a planted violation it must catch, and
the one way suppressions are written."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs

from platform_constructs.cfn_lint import ignore_cfn_lint, ignore_redundant_role_dependency
from tests.support import SYNTH_GROUP, bare_stack, cfn_lint, template_of

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def _lint_findings(path: Path, region: str) -> list[str]:
    matches = cfn_lint(path.read_text(encoding="utf-8"), region)
    return [f"{m.rule.id} {getattr(m, 'path_string', '')} {m.message}" for m in matches]


def test_cfn_lint_reports_nothing_for_any_template(env):
    region = env.stacks["network"].region
    findings = {name: _lint_findings(env.template_path(name), region) for name in env.stacks}
    assert {name: f for name, f in findings.items() if f} == {}


def test_planted_cfn_lint_violation_is_caught(dev):
    template = copy.deepcopy(dev.templates["network"])
    template["Resources"]["PlantedBadEgress"] = {
        "Type": "AWS::EC2::SecurityGroupEgress",
        "Properties": {"GroupId": "sg-12345678", "IpProtocol": "tcp", "FromPort": "https"},
    }
    matches = cfn_lint(json.dumps(template), dev.stacks["network"].region)
    rule_ids = {m.rule.id for m in matches}
    assert any(r.startswith("E") for r in rule_ids), rule_ids
    assert all("PlantedBadEgress" in "/".join(map(str, m.path)) for m in matches), [
        str(m) for m in matches
    ]


def test_subnets_name_their_az_deliberately_for_cfn_lint(env):
    for logical, subnet in env.resources("network", "AWS::EC2::Subnet").items():
        assert subnet["Metadata"]["cfn-lint"]["config"]["ignore_checks"] == ["W3010"], logical


def test_ignore_cfn_lint_merges_into_existing_metadata():
    stack = bare_stack("Lint")
    resource = sqs.CfnQueue(stack, "Queue")
    resource.add_metadata("owner", {"team": "platform"})
    resource.add_metadata(
        "cfn-lint", {"config": {"ignore_checks": ["W3010"], "regions": ["us-west-2"]}}
    )
    ignore_cfn_lint(resource, "W3005")
    ignore_cfn_lint(resource, "W3005", "W3011")
    metadata = template_of(stack).to_json()["Resources"]["Queue"]["Metadata"]
    assert metadata["owner"] == {"team": "platform"}
    assert metadata["cfn-lint"] == {
        "config": {"ignore_checks": ["W3010", "W3005", "W3011"], "regions": ["us-west-2"]}
    }
    with pytest.raises(ValueError):
        ignore_cfn_lint(resource)


def test_redundant_role_dependency_is_ignored_on_the_function_resource():
    stack = bare_stack("Handler")
    function = lambda_.Function(
        stack,
        "Handler",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): pass"),
    )
    ignore_redundant_role_dependency(function)
    ignore_redundant_role_dependency(None)  # a handler CDK did not create: nothing to do
    resources = template_of(stack).to_json()["Resources"]
    (logical,) = [k for k, v in resources.items() if v["Type"] == "AWS::Lambda::Function"]
    assert resources[logical]["Metadata"]["cfn-lint"] == {"config": {"ignore_checks": ["W3005"]}}
