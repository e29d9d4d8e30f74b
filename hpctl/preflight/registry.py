"""The preflight checks, in table order: each a name and a function of the shared
`CheckContext` that returns its rows, the runner, and the report of their rows (the `--json`
object). A new check is a module beside these and one entry here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from config.schema import EnvironmentConfig
from hpctl.aws import AwsCallError
from hpctl.preflight.admin_roles import ADMIN_ROLE, admin_role_rows
from hpctl.preflight.bucket_keys import BUCKET_KEY, bucket_key_rows
from hpctl.preflight.context import PROBLEM, STATUSES, CheckContext, Row, failure_row
from hpctl.preflight.digests import DIGEST, digest_rows
from hpctl.preflight.images import IMAGE, image_rows
from hpctl.preflight.kubernetes_version import KUBERNETES_VERSION, kubernetes_version_rows
from hpctl.preflight.quotas import QUOTA, quota_rows
from hpctl.preflight.training_plan import TRAINING_PLAN, training_plan_rows
from hpctl.preflight.zones import AVAILABILITY_ZONE, availability_zone_rows


@dataclass(frozen=True)
class Check:
    name: str
    rows: Callable[[CheckContext], list[Row]]


CHECKS: tuple[Check, ...] = (
    Check(TRAINING_PLAN, training_plan_rows),
    Check(QUOTA, quota_rows),
    Check(AVAILABILITY_ZONE, availability_zone_rows),
    Check(ADMIN_ROLE, admin_role_rows),
    Check(IMAGE, image_rows),
    Check(DIGEST, digest_rows),
    Check(KUBERNETES_VERSION, kubernetes_version_rows),
    Check(BUCKET_KEY, bucket_key_rows),
)


def run_checks(context: CheckContext) -> list[Row]:
    """Every check's rows, in table order. An AWS failure a check did not turn into a row
    itself becomes one problem row; the other checks still run."""
    rows: list[Row] = []
    for check in CHECKS:
        try:
            rows += check.rows(context)
        except AwsCallError as failure:
            rows.append(failure_row(failure, check.name, "-"))
    return rows


def preflight_report(config: EnvironmentConfig, rows: list[Row]) -> dict[str, Any]:
    """The environment, how many rows have each status, and every row."""
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    return {
        "environment": config.environment,
        "account": config.account,
        "region": config.region,
        "ok": counts[PROBLEM] == 0,
        "counts": counts,
        "checks": [r.as_dict() for r in rows],
    }
