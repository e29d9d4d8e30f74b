"""What every `hpctl` command module shares: the options spelled the same in every command
(`--env`, `--json`, `--region`), loading the environment an `--env` names, the clock, and
printing tables and timestamps.

An environment's config decides the account and Region a command works in, so commands take
`--env NAME` (config/NAME.yaml) rather than `--region`; only a cluster addressed by name
instead of by environment (`hpctl cluster status|nodes|reboot|replace --name`) takes
`--region`, and then only the credentials, not their account, can be checked.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from config.errors import ConfigError
from config.loader import CONFIG_DIR, LoadedEnvironment, load_environment
from config.schema import EnvironmentConfig
from hpctl.errors import ExitCode, fail

# Where --env NAME is looked up (config/NAME.yaml); tests point it elsewhere.
config_dir: Path = CONFIG_DIR

EnvOption = Annotated[
    str | None, typer.Option("--env", help="Environment (config/<env>.yaml), e.g. dev or prod.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
JsonObjectOption = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
JsonListOption = Annotated[bool, typer.Option("--json", help="Print a JSON list.")]
RegionOption = Annotated[
    str | None, typer.Option("--region", help="AWS Region (default: the configured one)")
]


# Durations on the command line carry their unit: `90m`, `6h`, `7d`, `2w`.
_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_UNIT_WORDS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class DurationError(ValueError):
    """A duration option that cannot be read; the message is the one line to print."""


def parse_duration(option: str, text: str, *, bare_unit: str | None = None) -> timedelta:
    """`text` (`30m`, `6h`, `7d`, `2w`) as a timedelta.

    A bare number is the spelling of the previous release: with `bare_unit` it is still read
    in that unit (the caller prints the deprecation line from `bare_number_deprecation`);
    without one it is refused. Raises DurationError with the line naming `option`."""
    match = _DURATION.match(text)
    if match:
        return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    if bare_unit is not None and text.strip().isdigit():
        return timedelta(seconds=int(text) * _UNIT_SECONDS[bare_unit])
    raise DurationError(
        f"{option}: {text!r} is not a duration; write a number and a unit, e.g. 30m, 6h, 7d or 2w"
    )


def bare_number_deprecation(option: str, text: str, bare_unit: str) -> str | None:
    """The one-line warning for a bare number read in its old unit, else None."""
    if not text.strip().isdigit():
        return None
    return (
        f"{option} {text.strip()}: a number without a unit is deprecated and read as "
        f"{_UNIT_WORDS[bare_unit]}; write {text.strip()}{bare_unit}"
    )


def loaded_environment_option(ctx: typer.Context, name: str) -> LoadedEnvironment:
    """config/<name>.yaml, validated and planned; an unknown name or an invalid file ends
    the command with one `--env: ...` line and exit 2."""
    try:
        return load_environment(name, config_dir=config_dir)
    except ConfigError as error:
        # Problems in a file name the file; an unknown name has no file to name.
        lines = error.located_lines() if error.source.endswith(".yaml") else error.lines
        fail(ctx, "--env: " + "; ".join(lines), code=ExitCode.USAGE)


def load_environment_option(ctx: typer.Context, name: str) -> EnvironmentConfig:
    """The config of `loaded_environment_option`."""
    return loaded_environment_option(ctx, name).config


def required_env(ctx: typer.Context, name: str | None) -> str:
    """The `--env` name of a command that cannot run without one."""
    if name is None:
        fail(ctx, "--env: missing; pass --env", code=ExitCode.USAGE)
    return name


def required_environment(ctx: typer.Context, name: str | None) -> EnvironmentConfig:
    """`load_environment_option` for a command that cannot run without `--env`."""
    return load_environment_option(ctx, required_env(ctx, name))


def print_table(console: Console, table: Table) -> None:
    """Print `table` at its natural width even when the terminal (or the 80 columns assumed
    for a pipe) is narrower: squeezed columns would truncate the offering and instance ids
    people paste into the next command. A narrow terminal wraps the lines instead."""
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural > console.width:
        # A fixed table width overrides the console's; crop=False keeps the long lines whole.
        table.width = natural
    console.print(table, crop=False)


def utc_now() -> datetime:
    """The clock commands read (each module keeps a replaceable reference to it)."""
    return datetime.now(UTC)


def utc_iso(value: datetime | None) -> str | None:
    """An AWS timestamp as ISO 8601 in UTC, the form `--json` prints; None stays None."""
    return value.astimezone(UTC).isoformat() if value else None


def minute_of(text: str | None) -> str:
    """A `utc_iso` timestamp to the minute, as tables show it; "-" for none."""
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M") if text else "-"
