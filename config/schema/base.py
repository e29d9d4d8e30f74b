"""What every section of the schema shares: field types and the small rules several sections
apply (the strict base model is `config.model.Strict`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import (
    AfterValidator,
    BeforeValidator,
    StringConstraints,
    ValidationInfo,
)

from config.regions import LOG_RETENTION_DAYS, zone_ids
from config.zones import is_zone_id

PARTITION = r"aws(-cn|-us-gov|-iso|-iso-b)?"
REGION_PATTERN = r"^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d$"
ACCOUNT_PATTERN = r"^\d{12}$"
AccountId = Annotated[str, StringConstraints(pattern=ACCOUNT_PATTERN)]
Email = Annotated[str, StringConstraints(pattern=r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")]

# Private ranges a VPC's primary CIDR must come from.
RFC1918 = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


def _parse_cidr(value: object) -> ipaddress.IPv4Network:
    """CIDR syntax with a message that says what to write instead."""
    if isinstance(value, ipaddress.IPv4Network):
        return value
    text = str(value).strip()
    if "/" not in text:
        raise ValueError(f"{text!r} is not a CIDR block; write it as a.b.c.d/prefix")
    try:
        return ipaddress.IPv4Network(text)
    except ipaddress.NetmaskValueError:
        raise ValueError(f"{text!r} has an invalid prefix length; use /0 to /32") from None
    except ValueError as error:
        if "host bits set" in str(error):
            network = ipaddress.IPv4Network(text, strict=False)
            raise ValueError(f"{text} has host bits set; use {network}") from None
        raise ValueError(f"{text!r} is not a valid IPv4 CIDR block") from None


Cidr = Annotated[ipaddress.IPv4Network, BeforeValidator(_parse_cidr)]

Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")]

# Validation context keys (config/loader.py passes them): the environment's account and
# Region as written, and its recorded AZ name -> zone ID mapping (config/zones.py).
ENVIRONMENT_CONTEXT = "environment"
ACCOUNT_CONTEXT = "account"
REGION_CONTEXT = "region"
ZONE_IDS_CONTEXT = "zone_ids"


def _zone(value: str, info: ValidationInfo) -> str:
    """An AZ written by name stays a name; one written by ID (use1-az4) becomes this account's
    name for that zone, so subnet slots, logical IDs and templates are the same either way."""
    if not is_zone_id(value):
        if is_zone_id(value.lower()):
            raise ValueError(f"zone IDs are lowercase; write {value.lower()}")
        return value
    context = info.context or {}
    account, region = context.get(ACCOUNT_CONTEXT), context.get(REGION_CONTEXT)
    if not (
        isinstance(account, str)
        and re.match(ACCOUNT_PATTERN, account)
        and isinstance(region, str)
        and re.match(REGION_PATTERN, region)
    ):
        return value  # the account or Region field reports the problem; IDs cannot be looked up
    known = zone_ids(region)
    if known is not None and value not in known:
        raise ValueError(
            f"{value} is not an AZ ID of {region}; use one of {', '.join(known)} (or an AZ name)"
        )
    recorded: dict[str, str] = context.get(ZONE_IDS_CONTEXT, {})
    names = {zone_id: name for name, zone_id in recorded.items()}
    if value not in names:
        env = context.get(ENVIRONMENT_CONTEXT) or "<env>"
        raise ValueError(
            f"{value}: cdk.context.json records no AZ name for it in account {account}; run "
            f"`hpctl zones --env {env} --write` with that account's credentials and commit "
            "the file"
        )
    return names[value]


# An Availability Zone by name (us-east-1a) or by ID (use1-az4); validated as its name.
Zone = Annotated[str, AfterValidator(_zone)]


_PRINCIPAL_ARN = re.compile(rf"^arn:{PARTITION}:iam::\d{{12}}:(role|user)/[\w+=,.@/-]{{1,512}}$")


def principal_arns(value: list[str]) -> list[str]:
    """IAM role or user ARNs, each listed once."""
    for arn in value:
        if not _PRINCIPAL_ARN.match(arn):
            raise ValueError(
                f"{arn!r} is not an IAM role or user ARN "
                "(arn:aws:iam::<12-digit account>:role/<name> or :user/<name>)"
            )
    unique(value, "principal")
    return value


def unique(values: Sequence[object], what: str) -> None:
    """Reject repeats; `what` names one item ("AZ", "endpoint")."""
    duplicates = sorted({str(v) for v in values if values.count(v) > 1})
    if duplicates:
        raise ValueError(f"listed more than once: {', '.join(duplicates)}; list each {what} once")


def log_retention(value: int) -> int:
    if value not in LOG_RETENTION_DAYS:
        raise ValueError(
            f"{value} is not a CloudWatch Logs retention period; use one of "
            f"{', '.join(map(str, LOG_RETENTION_DAYS))}"
        )
    return value
