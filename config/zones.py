"""Availability Zone IDs: how an environment names physical zones, and where each account's
name -> ID mapping is recorded.

AZ names (us-east-1a) map to different physical zones in different accounts of the older
Regions; AZ IDs (use1-az4) are the same physical zone in every account ("AZ IDs", AWS
Regions and Availability Zones guide). Training plans reserve capacity in a physical zone and
EKS refuses control-plane subnets in some zone IDs, so an environment may name its zones by
ID. CloudFormation subnets and CDK still take names, so each ID is turned into this account's
name through the mapping recorded in cdk.context.json (written by `hpctl zones --env NAME`
from ec2:DescribeAvailabilityZones), the same committed file that pins the account's AZ
names for synth: synth stays offline, and a reviewer sees the mapping in the diff.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from config.errors import ConfigError

CONTEXT_FILE = Path(__file__).resolve().parent.parent / "cdk.context.json"

ZONE_ID = re.compile(r"^[a-z]+\d+-az\d+$")


def is_zone_id(value: str) -> bool:
    return bool(ZONE_ID.match(value))


def zone_ids_key(account: str, region: str) -> str:
    """The context key of an account's name -> ID mapping in one Region."""
    return f"availability-zone-ids:account={account}:region={region}"


def zone_names_key(account: str, region: str) -> str:
    """The key under which CDK itself caches an account's AZ names (its AZ context provider)."""
    return f"availability-zones:account={account}:region={region}"


def _read_context(path: Path) -> dict[str, object]:
    """The context file's entries; a file that is not a JSON object is one ConfigError line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as error:
        raise ConfigError(
            path.name,
            [
                f"line {error.lineno} column {error.colno}: {error.msg}; fix the JSON (a "
                "merge conflict?) or restore it from git"
            ],
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(path.name, ["expected a JSON object of context entries"])
    return data


def recorded_zone_ids(
    account: str, region: str, context_file: Path = CONTEXT_FILE
) -> dict[str, str]:
    """The recorded name -> zone ID mapping of `account` in `region`; empty when none is."""
    entry = _read_context(context_file).get(zone_ids_key(account, region))
    if not isinstance(entry, dict):
        return {}
    return {str(name): str(zone_id) for name, zone_id in entry.items()}


def record_zones(
    account: str,
    region: str,
    zone_ids: Mapping[str, str],
    available: Iterable[str],
    context_file: Path = CONTEXT_FILE,
) -> None:
    """Write the account's AZ name -> ID mapping and, as CDK's own lookup lists them, the
    names of the `available` zones into the context file, keeping every other entry; keys
    stay sorted so the diff shows only what changed."""
    context = _read_context(context_file)
    context[zone_names_key(account, region)] = sorted(available)
    context[zone_ids_key(account, region)] = {name: zone_ids[name] for name in sorted(zone_ids)}
    context_file.write_text(
        json.dumps(dict(sorted(context.items())), indent=2) + "\n", encoding="utf-8"
    )
