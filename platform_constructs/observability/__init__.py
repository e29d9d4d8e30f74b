"""The platform's Grafana dashboards and Prometheus alert rules, kept as files.

`rules/*.yaml` are Prometheus rule files: the observability stack loads each into the
Amazon Managed Service for Prometheus workspace as one rule groups namespace named after
the file. `dashboards/*.json` are Grafana dashboards whose Prometheus panels use the
`${datasource}` variable and whose FSx panels use `${cloudwatch}`. The tests hold both to
the metric catalogue (config/observability_metrics.py) with tools/observability_check.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

import yaml

HERE: Final = Path(__file__).resolve().parent
RULES_DIR: Final = HERE / "rules"
DASHBOARDS_DIR: Final = HERE / "dashboards"


def rule_files() -> list[Path]:
    """Every rules file, sorted by name."""
    return sorted(RULES_DIR.glob("*.yaml"))


def dashboard_files() -> list[Path]:
    """Every dashboard file, sorted by name."""
    return sorted(DASHBOARDS_DIR.glob("*.json"))


# The rule groups namespace with each team's GPU quota, built from the environment's config
# (`team_quota_rules`); the GPU accounting rules (rules/teams.yaml) compare usage with it.
QUOTA_NAMESPACE: Final = "team-quotas"
QUOTA_RECORD: Final = "namespace:gpu_quota:count"


def team_quota_rules(quotas: Mapping[str, float]) -> str:
    """A rules file recording `quotas` (team namespace -> guaranteed GPUs) as one
    QUOTA_RECORD series per team, labelled with its namespace."""
    rules = [
        {"record": QUOTA_RECORD, "expr": f"vector({gpus:g})", "labels": {"namespace": namespace}}
        for namespace, gpus in sorted(quotas.items())
    ]
    document = {"groups": [{"name": "team-gpu-quota", "rules": rules}]}
    return yaml.safe_dump(document, sort_keys=False)
