"""One snapshot per environment and stack, asset hashes masked.

A change to a template shows up as a reviewable diff of tests/infra/snapshots/. After an
intended change, refresh with: UPDATE_SNAPSHOTS=1 make test PYTEST_ARGS="tests/infra/test_snapshots.py"
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ENVIRONMENTS

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
_ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def masked(template: dict) -> str:
    return _ASSET_HASH.sub("<asset-hash>", json.dumps(template, indent=1, sort_keys=True)) + "\n"


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_templates_match_snapshots(synth_all, env):
    result = synth_all[env]
    mismatched = []
    for name, template in result.templates.items():
        path = SNAPSHOTS / env / f"{name}.json"
        current = masked(template)
        if os.environ.get("UPDATE_SNAPSHOTS") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(current)
            continue
        assert path.exists(), f"no snapshot {path.relative_to(SNAPSHOTS.parent)}; create it with UPDATE_SNAPSHOTS=1"
        if path.read_text() != current:
            mismatched.append(name)
    assert mismatched == [], (
        f"{env}: templates differ from snapshots for {mismatched}; review the change and "
        "refresh with UPDATE_SNAPSHOTS=1"
    )


def test_masking_hides_only_asset_hashes():
    template = {"Code": {"S3Key": "0" * 64 + ".zip"}, "Name": "bucket-" + "a" * 63}
    text = masked(template)
    assert "<asset-hash>.zip" in text
    assert "a" * 63 in text
