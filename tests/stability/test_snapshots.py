"""One snapshot per environment and stack, asset hashes masked.

A change to a template shows up as a reviewable diff of tests/stability/snapshots/. After an
intended change, rewrite them from a fresh synth and review the diff:

    UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/stability/test_snapshots.py
    git diff -- tests/stability/snapshots
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support import SYNTH_GROUP

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
_ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def masked(template: dict) -> str:
    return _ASSET_HASH.sub("<asset-hash>", json.dumps(template, indent=1, sort_keys=True)) + "\n"


def test_templates_match_snapshots(env):
    mismatched = []
    for name, template in env.templates.items():
        path = SNAPSHOTS / env.env_name / f"{name}.json"
        current = masked(template)
        if os.environ.get("UPDATE_SNAPSHOTS") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(current)
            continue
        assert path.exists(), (
            f"no snapshot {path.relative_to(SNAPSHOTS.parent)}; create it with UPDATE_SNAPSHOTS=1"
        )
        if path.read_text() != current:
            mismatched.append(name)
    assert mismatched == [], (
        f"{env.env_name}: templates differ from snapshots for {mismatched}; review the change "
        "and refresh with UPDATE_SNAPSHOTS=1"
    )


def test_every_snapshot_belongs_to_a_stack(env):
    # A renamed or removed stack leaves no stale snapshot behind.
    assert {p.stem for p in (SNAPSHOTS / env.env_name).glob("*.json")} == set(env.templates)


def test_masking_hides_only_asset_hashes():
    template = {"Code": {"S3Key": "0" * 64 + ".zip"}, "Name": "bucket-" + "a" * 63}
    text = masked(template)
    assert "<asset-hash>.zip" in text
    assert "a" * 63 in text
