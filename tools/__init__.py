"""Development tooling the tests and set-up run, never shipped: not in the installed package
(pyproject.toml's package list) nor in the training image (its build context is training/).

- `torch_api`: the torch names and keywords the training package uses, checked against the
  installed torch or, read from source, against the training image's release (`torch_source`).
- `observability_check`: the alert rules and dashboards held to the metric catalogue
  (`promql_check`, `rule_check`, `dashboard_check`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parents[1]
TRAINING_DIR: Final = REPO / "training"
