"""The policy harness: cfn-lint over every template of every environment, proof that the
cdk-nag AwsSolutions pack ran, and planted violations both tools must catch."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from cfnlint.api import ManualArgs, lint, lint_file

from tests.conftest import ENVIRONMENTS, SynthResult, cdk_json_context


def _lint_findings(path: Path, region: str) -> list[str]:
    matches = lint_file(path, config=ManualArgs(regions=[region]))
    return [f"{m.rule.id} {m.path_string if hasattr(m, 'path_string') else ''} {m.message}" for m in matches]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cfn_lint_reports_nothing_for_any_template(synth_all, env):
    result = synth_all[env]
    region = result.stacks["network"].region
    findings = {
        name: _lint_findings(result.template_path(name), region) for name in result.stacks
    }
    assert {name: f for name, f in findings.items() if f} == {}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_cdk_nag_reports_nothing_unacknowledged(synth_all, env):
    # The plugin writes a report on every synth; a failing pack would be listed here (and
    # would already have stopped the synth). That the pack really runs is proven by the
    # planted violation below, built through the same registration path.
    report = json.loads((synth_all[env].outdir / "validation-report.json").read_text())
    assert [p for p in report["pluginReports"] if p["conclusion"] != "success"] == []


def _acknowledgments(result: SynthResult):
    import aws_cdk as cdk

    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    root = result.stacks["network"].node.root
    for construct in root.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                for rule_id, reason in entry.data.items():
                    yield construct, rule_id, reason


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_acknowledgment_is_narrow_and_explained(synth_all, env):
    import aws_cdk as cdk

    for construct, rule_id, reason in _acknowledgments(synth_all[env]):
        where = f"{construct.node.path}: {rule_id}"
        # cdk-nag findings, or CDK's own template validator (which cfn-lint also runs).
        assert rule_id.startswith(("AwsSolutions::AwsSolutions-", "CloudFormation-Validate::")), where
        # On a resource or its construct, never on a whole stack or app.
        assert not isinstance(construct, (cdk.Stack, cdk.Stage)), where
        assert len(reason) >= 30, where
        if "-IAM5" in rule_id:
            # Wildcard acknowledgments name the exact wildcard they accept.
            assert "[" in rule_id and rule_id.endswith("]"), where


def test_planted_nag_violation_is_caught(tmp_path):
    """An unencrypted, unlogged bucket without SSL enforcement planted in the real dev
    platform must stop the synth with AwsSolutions findings."""
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3

    from config.loader import load_environment
    from stacks.platform import build_platform, register_policy_checks

    app = cdk.App(outdir=str(tmp_path), context={**cdk_json_context(), "env": "dev"})
    register_policy_checks(app)
    platform = build_platform(app, load_environment("dev"))
    s3.Bucket(platform.storage, "PlantedInsecureBucket")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    violations = {
        v["ruleName"]: [c["constructPath"] for c in v["violatingConstructs"]]
        for p in report["pluginReports"]
        for v in p["violations"]
    }
    planted = f"{platform.storage.stack_name}/PlantedInsecureBucket/Resource"
    assert planted in violations.get("AwsSolutions-S1", [])
    assert planted in violations.get("AwsSolutions-S10", [])
    # Nothing else was flagged: the real stacks stay clean.
    assert all(paths == [planted] for paths in violations.values()), violations


def test_planted_cfn_lint_violation_is_caught(dev):
    template = copy.deepcopy(dev.templates["network"])
    template["Resources"]["PlantedBadEgress"] = {
        "Type": "AWS::EC2::SecurityGroupEgress",
        "Properties": {"GroupId": "sg-12345678", "IpProtocol": "tcp", "FromPort": "https"},
    }
    matches = lint(json.dumps(template), regions=[dev.stacks["network"].region])
    rule_ids = {m.rule.id for m in matches}
    assert any(r.startswith("E") for r in rule_ids), rule_ids
    assert all("PlantedBadEgress" in "/".join(map(str, m.path)) for m in matches), [
        str(m) for m in matches
    ]
