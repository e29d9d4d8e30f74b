"""Training plans as `hpctl plans` handles them: what the API offers and accepts (counts,
durations, instance types, id and name patterns) and the checks of each option against it,
the search request, offerings flattened into rows, and the config block for a bought plan.
The commands are in `hpctl.plans_cmd`."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any

from config.instance_types import INSTANCE_TYPES, ULTRASERVER_TYPES, unknown_instance_type
from hpctl import aws
from hpctl.errors import InputError
from hpctl.options import duration_text, utc_iso

# Offerings come in powers of two up to 64 instances and last 1 to 182 days.
ALLOWED_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
MIN_DAYS, MAX_DAYS = 1, 182


# Patterns from the SageMaker API model (TrainingPlanOfferingId, TrainingPlanName).
OFFERING_ID = re.compile(r"[a-z0-9\-]{1,256}")
PLAN_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}")
PLAN_NAME_MAX = 64
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


class Target(StrEnum):
    hyperpod_cluster = "hyperpod-cluster"
    training_job = "training-job"


@lru_cache(maxsize=1)
def reservable_instance_types() -> frozenset[str]:
    """Instance types the training plan API accepts, from the API model botocore ships, so
    a type the service cannot reserve is refused before any call."""
    return aws.api_enum("sagemaker", "ReservedCapacityInstanceType")


# ------------------------------------------------------------------ option checks


def checked_instance_type(value: str) -> str:
    if value not in INSTANCE_TYPES:
        raise InputError(f"--instance-type: {unknown_instance_type(value)}")
    reservable = reservable_instance_types()
    if value not in reservable:
        offered = sorted(set(INSTANCE_TYPES) & reservable)
        raise InputError(
            f"--instance-type: {value} cannot be reserved with a training plan; "
            f"use one of {', '.join(offered)}"
        )
    return value


def checked_ultraserver_type(value: str) -> str:
    if value not in ULTRASERVER_TYPES:
        raise InputError(
            f"--ultraserver-type: unknown UltraServer type {value!r}; use one of "
            f"{', '.join(sorted(ULTRASERVER_TYPES))}"
        )
    return value


def checked_ultraserver_count(value: int) -> int:
    if value < 1:
        raise InputError(f"--count: {value} UltraServers; use 1 or more")
    return value


def checked_count(value: int) -> int:
    if value not in ALLOWED_COUNTS:
        raise InputError(
            f"--count: {value} instances are not offered; use one of "
            f"{', '.join(map(str, ALLOWED_COUNTS))}"
        )
    return value


def checked_days(option: str, duration: timedelta) -> int:
    """A plan's length in whole days, within what the API offers; `option` names it."""
    days = duration / timedelta(days=1)
    if not days.is_integer():
        raise InputError(
            f"{option}: {duration_text(duration)} is not whole days; plans last whole days, "
            f"e.g. {max(MIN_DAYS, round(days))}d"
        )
    if not MIN_DAYS <= days <= MAX_DAYS:
        raise InputError(
            f"{option}: {duration_text(duration)} is out of range; plans last {MIN_DAYS} to "
            f"{MAX_DAYS} days"
        )
    return int(days)


def today() -> date:
    return datetime.now(UTC).date()


def checked_start(text: str) -> datetime:
    """The start date as midnight UTC; a plan cannot start in the past."""
    try:
        if not ISO_DATE.fullmatch(text):
            raise ValueError
        day = date.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"--start: {text!r} is not a date; use YYYY-MM-DD, e.g. 2026-12-01"
        ) from None
    now = today()
    if day < now:
        raise InputError(
            f"--start: {day.isoformat()} is in the past; use {now.isoformat()} or later"
        )
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def checked_offering_id(value: str) -> str:
    if not OFFERING_ID.fullmatch(value):
        raise InputError(
            f"--offering-id: {value!r} is not an offering id (lowercase letters, digits and "
            "'-'; copy it from `hpctl plans search`)"
        )
    return value


def checked_plan_name(value: str) -> str:
    if len(value) > PLAN_NAME_MAX or not PLAN_NAME.fullmatch(value):
        raise InputError(
            f"--name: {value!r} is not a valid plan name (1-{PLAN_NAME_MAX} letters, "
            "digits and single or repeated '-' between them)"
        )
    return value


# ------------------------------------------------------------------ requests and rows


def search_request(
    instance_type: str,
    count: int,
    start: datetime,
    days: int,
    target: Target,
    *,
    ultraserver: bool = False,
) -> dict[str, Any]:
    """SearchTrainingPlanOfferings parameters: `count` instances of `instance_type`, or with
    `ultraserver` `count` UltraServers of that UltraServer type (the API's UltraServerType and
    UltraServerCount). Duration is in hours in the API."""
    what = (
        {"UltraServerType": instance_type, "UltraServerCount": count}
        if ultraserver
        else {"InstanceType": instance_type, "InstanceCount": count}
    )
    return {
        **what,
        "StartTimeAfter": start,
        "DurationHours": days * 24,
        "TargetResources": [target.value],
    }


def offering_row(offering: dict[str, Any]) -> dict[str, Any]:
    """One offering, flattened. An offering may bundle several reserved capacities (one per
    AZ and time slot): the row sums their instances and spans their times."""
    parts = offering.get("ReservedCapacityOfferings", [])
    starts = [p["StartTime"] for p in parts if p.get("StartTime")]
    ends = [p["EndTime"] for p in parts if p.get("EndTime")]
    return {
        "offering_id": offering["TrainingPlanOfferingId"],
        "availability_zones": sorted(
            {p["AvailabilityZone"] for p in parts if p.get("AvailabilityZone")}
        ),
        "instance_types": sorted({p["InstanceType"] for p in parts}),
        "instance_count": sum(p["InstanceCount"] for p in parts),
        # UltraServer capacity: whole UltraServers of a type (ReservedCapacityType
        # "UltraServer"); none for instance capacity.
        "ultraserver_types": sorted(
            {p["UltraServerType"] for p in parts if p.get("UltraServerType")}
        ),
        "ultraserver_count": sum(p.get("UltraServerCount", 0) for p in parts),
        "start": utc_iso(min(starts)) if starts else None,
        "end": utc_iso(max(ends)) if ends else None,
        "duration_hours": offering.get("DurationHours"),
        "duration_minutes": offering.get("DurationMinutes", 0),
        "upfront_fee": offering.get("UpfrontFee"),
        "currency": offering.get("CurrencyCode"),
        "target_resources": offering["TargetResources"],
    }


def plan_availability_zones(plan: dict[str, Any]) -> list[str]:
    """AZs of a plan's reserved capacities (empty while the service has not placed it)."""
    return sorted(
        {
            s["AvailabilityZone"]
            for s in plan.get("ReservedCapacitySummaries", [])
            if s.get("AvailabilityZone")
        }
    )


def config_snippet(arn: str, zones: list[str]) -> str:
    """The `training_plan` block of an instance group in the environment YAML. Without
    exactly one AZ the key is left out on purpose: a guessed AZ would put the group's
    subnet where the capacity is not, and the config check rejects a missing key."""
    lines = ["training_plan:", f"  arn: {arn}"]
    if len(zones) == 1:
        lines.append(f"  availability_zone: {zones[0]}")
    return "\n".join(lines)
