"""availability-zone: every configured zone exists in the Region for this account, is
available, and has the zone ID cdk.context.json records for it."""

from __future__ import annotations

from config.schema import EnvironmentConfig
from hpctl.aws import AwsCallError, call
from hpctl.errors import one_line
from hpctl.preflight.context import OK, PROBLEM, CheckContext, Row, failure_row, joined

AVAILABILITY_ZONE = "availability-zone"


def _zone_uses(config: EnvironmentConfig, zone: str) -> list[str]:
    uses = []
    if zone in config.hyperpod.availability_zones:
        uses.append("cluster subnets")
    if zone == config.storage.fsx.availability_zone:
        uses.append("FSx")
    uses += [
        f"plan of {g.name}"
        for g in config.hyperpod.groups_by_name()
        if g.training_plan is not None and g.training_plan.availability_zone == zone
    ]
    return uses


def availability_zone_rows(context: CheckContext) -> list[Row]:
    config = context.config
    zones = config.network.availability_zones
    try:
        found = call(context.client("ec2"), "describe_availability_zones")["AvailabilityZones"]
    except AwsCallError as failure:
        return [failure_row(failure, AVAILABILITY_ZONE, zone) for zone in zones]
    by_name = {z["ZoneName"]: z for z in found}
    offered = joined(
        name
        for name, z in by_name.items()
        if z.get("ZoneType", "availability-zone") == "availability-zone"
    )
    rows = []
    for zone in zones:
        uses = _zone_uses(config, zone)
        used_by = f"; used by {', '.join(uses)}" if uses else ""
        info = by_name.get(zone)
        if info is None:
            rows.append(
                Row(
                    AVAILABILITY_ZONE,
                    zone,
                    PROBLEM,
                    f"not an Availability Zone of {config.region} for this account{used_by}",
                    f"use zones this account has: {offered}",
                )
            )
            continue
        state = info.get("State", "unknown")
        zone_id = info.get("ZoneId", "unknown zone ID")
        problems = []
        if state != "available":
            messages = "; ".join(m.get("Message", "") for m in info.get("Messages", []))
            problems.append(f"state {state}" + (f" ({one_line(messages)})" if messages else ""))
        if info.get("OptInStatus") == "not-opted-in":
            problems.append("not opted in")
        if info.get("ZoneType", "availability-zone") != "availability-zone":
            problems.append(f"a {info['ZoneType']}, not an Availability Zone")
        fix = f"use other zones of {offered}"
        recorded = config.zone_id(zone)
        if not problems and recorded is not None and recorded != zone_id:
            # Synth placed every subnet by this record: a stale one puts them in other zones.
            problems.append(f"cdk.context.json records {recorded} for it")
            fix = (
                f"run hpctl zones --env {config.environment} --write, commit cdk.context.json "
                "and check the diff of the next synth"
            )
        if problems:
            rows.append(
                Row(
                    AVAILABILITY_ZONE,
                    zone,
                    PROBLEM,
                    f"{zone_id}: {'; '.join(problems)}{used_by}",
                    fix,
                )
            )
        else:
            rows.append(Row(AVAILABILITY_ZONE, zone, OK, f"{zone_id}, {state}{used_by}"))
    return rows
