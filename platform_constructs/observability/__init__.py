"""The platform's Grafana dashboards and Prometheus alert rules, kept as files.

`rules/*.yaml` are Prometheus rule files: the observability stack loads each into the
Amazon Managed Service for Prometheus workspace as one rule groups namespace named after
the file. `dashboards/*.json` are Grafana dashboards whose Prometheus panels use the
`${datasource}` variable and whose FSx panels use `${cloudwatch}`. The tests hold both to
the metric catalogue (config/observability_metrics.py) with tools/observability_check.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

HERE: Final = Path(__file__).resolve().parent
RULES_DIR: Final = HERE / "rules"
DASHBOARDS_DIR: Final = HERE / "dashboards"


def rule_files() -> list[Path]:
    """Every rules file, sorted by name."""
    return sorted(RULES_DIR.glob("*.yaml"))


def dashboard_files() -> list[Path]:
    """Every dashboard file, sorted by name."""
    return sorted(DASHBOARDS_DIR.glob("*.json"))
