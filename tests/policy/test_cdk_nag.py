"""cdk-nag (AwsSolutions) over every environment: the pack ran and reported nothing
unacknowledged, and every acknowledgment is narrow and explained. The planted violation that
proves the pack runs is in test_planted_nag.py."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from platform_constructs.nag import acknowledge, nag_resource_string
from tests.support import SYNTH_GROUP, SynthResult, bare_stack

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def test_cdk_nag_reports_nothing_unacknowledged(env):
    # The plugin writes a report on every synth; a failing pack would be listed here (and
    # would already have stopped the synth). That the pack really runs is proven by the
    # planted violation, built through the same `build_app`.
    report = json.loads((env.outdir / "validation-report.json").read_text())
    assert report["pluginReports"]
    assert [p for p in report["pluginReports"] if p["conclusion"] != "success"] == []


def _acknowledgments(result: SynthResult):
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    root = result.stacks["network"].node.root
    for construct in root.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                for rule_id, reason in entry.data.items():
                    yield construct, rule_id, reason


def test_every_acknowledgment_is_narrow_and_explained(env):
    found = 0
    for construct, rule_id, reason in _acknowledgments(env):
        found += 1
        where = f"{construct.node.path}: {rule_id}"
        # cdk-nag findings, or CDK's own template validator (which cfn-lint also runs).
        assert rule_id.startswith(("AwsSolutions::AwsSolutions-", "CloudFormation-Validate::")), (
            where
        )
        # On a resource or its construct, never on a whole stack or app.
        assert not isinstance(construct, cdk.Stack | cdk.Stage), where
        assert len(reason) >= 30, where
        if "-IAM5" in rule_id:
            # Wildcard acknowledgments name the exact wildcard they accept.
            assert "[" in rule_id and rule_id.endswith("]"), where
    assert found


def test_an_acknowledgment_needs_a_specific_reason():
    with pytest.raises(ValueError, match="needs a specific reason"):
        acknowledge(bare_stack(), "S1", "because")


def test_findings_are_written_the_way_cdk_nag_prints_them():
    assert nag_resource_string({"Ref": "Bucket"}) == "<Bucket>"
    assert nag_resource_string({"Fn::GetAtt": ["Bucket", "Arn"]}) == "<Bucket.Arn>"
    assert nag_resource_string({"Fn::Join": ["", [{"Fn::GetAtt": ["Bucket", "Arn"]}, "/*"]]}) == (
        "<Bucket.Arn>/*"
    )
    assert nag_resource_string({"Fn::ImportValue": "stack:ExportsOutputBucketArn"}) == (
        "stack:ExportsOutputBucketArn"
    )
    with pytest.raises(ValueError, match="cannot write"):
        nag_resource_string({"Fn::Sub": "x"})
