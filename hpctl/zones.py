"""The Availability Zones `hpctl zones` shows and records: the account and Region an
environment file names (read before the file can be validated: it may still name zones only
this record resolves), the Region's zones as EC2 reports them, and how they compare with
cdk.context.json. The command is in `hpctl.zones_cmd`."""

from __future__ import annotations

from typing import Any

from config.errors import ConfigError
from config.loader import read_yaml
from hpctl import aws
from hpctl.errors import InputError
from hpctl.options import environment_file


def account_and_region(env: str) -> tuple[str, str]:
    """`account` and `region` of config/<env>.yaml, without validating the rest."""
    path = environment_file(env)
    try:
        data = read_yaml(path)
    except ConfigError as error:
        raise InputError("--env: " + "; ".join(error.located_lines())) from None
    fields = data if isinstance(data, dict) else {}
    account, region = fields.get("account"), fields.get("region")
    if not isinstance(account, str) or not isinstance(region, str):
        raise InputError(
            f"--env: {path.name} needs `account` (quoted) and `region` before zones can be "
            "looked up; add them"
        )
    return account, region


def account_zones(connection: aws.Connection) -> dict[str, dict[str, Any]]:
    """name -> zone for the Region's Availability Zones (not Local or Wavelength Zones)."""
    found = aws.call(connection.client("ec2"), "describe_availability_zones")
    return {
        z["ZoneName"]: z
        for z in found["AvailabilityZones"]
        if z.get("ZoneType", "availability-zone") == "availability-zone"
    }


def moved_zones(mapping: dict[str, str], recorded: dict[str, str]) -> list[str]:
    """`name old -> new` for every zone name the record maps to another zone ID. Zones
    written by ID resolve through the record: changing an entry moves every subnet and the
    file system placed by it to another zone, which replaces them."""
    return [
        f"{name} {recorded[name]} -> {zone_id}"
        for name, zone_id in mapping.items()
        if recorded.get(name, zone_id) != zone_id
    ]


def zone_rows(
    found: dict[str, dict[str, Any]], mapping: dict[str, str], recorded: dict[str, str]
) -> list[dict[str, str]]:
    """One row per zone, by name: its zone ID, state and what the record says."""
    return [
        {
            "name": name,
            "zone_id": zone_id,
            "state": str(found[name].get("State", "unknown")),
            "recorded": recorded.get(name, "-"),
        }
        for name, zone_id in mapping.items()
    ]
