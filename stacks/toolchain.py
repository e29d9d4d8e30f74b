"""Process set-up every entry point that starts jsii needs (app.py, tests, benchmarks)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def use_bundled_node() -> None:
    """jsii spawns `node`: prefer the pinned Node next to the interpreter (linked there by
    scripts/bootstrap.sh) over an end-of-life system one. Call before importing aws_cdk."""
    bundled = Path(sys.executable).parent / "node"
    if bundled.exists():
        os.environ.setdefault("JSII_NODE", str(bundled))
