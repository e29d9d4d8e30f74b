"""An insecure bucket planted in the real dev platform must stop the synth with AwsSolutions
findings: proof that `build_app` registers the pack (its own app: seconds, so `slow`)."""

from __future__ import annotations

import json

import pytest
from aws_cdk import aws_s3 as s3

from stacks.platform import build_app
from tests.support import environment

pytestmark = pytest.mark.slow


def test_planted_nag_violation_is_caught(tmp_path):
    """An unencrypted, unlogged bucket without SSL enforcement."""
    app, platform = build_app(environment("dev"), outdir=str(tmp_path))
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
