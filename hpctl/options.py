"""What every `hpctl` command module shares: the option vocabulary (one spelling and one
meaning for every option of every command, `VOCABULARY`), loading the environment an `--env`
names, durations, the clock, and printing tables and timestamps.

The vocabulary, in short:

- `--env NAME` names the environment (config/NAME.yaml) in every command that reads one;
  `--config FILE` reads an environment file from elsewhere where a command plans or checks a
  file (`validate`, `capacity`). An environment's config decides the account and Region, so
  commands take `--env` rather than `--region`; only a cluster addressed by name instead of
  by environment (`hpctl cluster ... --name`) takes `--region`, and then only the
  credentials, not their account, can be checked.
- Durations carry their unit (`90m`, `6h`, `7d`, `2w`; `parse_duration`): never a bare
  number, never a unit in the option's name (`--since 7d`, not `--since-days 7`).
- A short flag has one meaning in every command (`SHORT_FLAGS`).
- Every command that prints a table prints it whole (`print_table`: the key column is never
  cut) and takes `--json` for the same data as JSON.
- An old spelling keeps working for one release, hidden from the help, with one deprecation
  line on stderr (`DEPRECATED_OPTIONS`, `hpctl.errors.deprecated`).

tests/cli/test_vocabulary.py walks every registered command and fails on an option outside
this vocabulary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from config.errors import ConfigError
from config.loader import CONFIG_DIR, LoadedEnvironment, load_environment
from config.schema import EnvironmentConfig
from hpctl.errors import ExitCode, InputError, deprecated, fail, report

T = TypeVar("T")

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


class Kind(StrEnum):
    """What an option's value is, as far as the vocabulary rules care."""

    FLAG = "flag"  # on or off, no value
    VALUE = "value"  # a name, number, file or choice, checked by the command
    DURATION = "duration"  # a number and a unit (parse_duration); never an integer option


@dataclass(frozen=True)
class Term:
    """One option of the vocabulary: what its value is and what it means in every command."""

    kind: Kind
    meaning: str


FLAG, VALUE, DURATION = Kind.FLAG, Kind.VALUE, Kind.DURATION

# Every long option any `hpctl` command takes, with its one meaning.
VOCABULARY: dict[str, Term] = {
    # What a command works on.
    "--env": Term(VALUE, "the environment: config/NAME.yaml"),
    "--config": Term(VALUE, "an environment file, instead of --env (validate, capacity)"),
    "--region": Term(VALUE, "the AWS Region of a cluster given by --name instead of --env"),
    "--name": Term(VALUE, "the name of what the command addresses or creates"),
    "--team": Term(VALUE, "a task-governance team of the environment"),
    "--instance-group": Term(VALUE, "a HyperPod instance group (exact name)"),
    "--instance-type": Term(VALUE, "an instance type, e.g. ml.p5.48xlarge"),
    "--ultraserver-type": Term(VALUE, "an UltraServer type, instead of --instance-type"),
    "--node-id": Term(VALUE, "an EC2 instance id (i-...); repeatable"),
    "--offering-id": Term(VALUE, "a training plan offering, from `hpctl plans search`"),
    "--count": Term(VALUE, "how many instances (or UltraServers)"),
    "--cost": Term(FLAG, "each team's GPU-hours and estimated cost (teams)"),
    "--check": Term(VALUE, "a HyperPod deep health check; repeatable (cluster health-check)"),
    "--operation-id": Term(VALUE, "a cluster operation, from `hpctl cluster operations`"),
    "--type": Term(VALUE, "only what is of this type (cluster operations)"),
    "--status": Term(VALUE, "only what is in this status (cluster operations)"),
    # Time.
    "--since": Term(DURATION, "how far back to read, e.g. 6h or 7d"),
    "--duration": Term(DURATION, "how long something lasts, e.g. 14d"),
    "--start": Term(VALUE, "a start date, YYYY-MM-DD (UTC)"),
    # Output and confirmation.
    "--json": Term(FLAG, "print JSON instead of tables and text"),
    "--output": Term(VALUE, "the file to write (- for stdout)"),
    "--yes": Term(FLAG, "confirm a disruptive or charged action (nothing ever prompts)"),
    "--write": Term(FLAG, "record what the command found (zones)"),
    "--force": Term(FLAG, "with --write, also overwrite what differs"),
    "--allow": Term(VALUE, "accept the deletion or replacement of this resource (guard)"),
    # Capacity planning.
    "--orchestrator": Term(VALUE, "eks or slurm (capacity)"),
    "--interface": Term(VALUE, "efa or efa-only network interfaces (capacity)"),
    "--headroom": Term(VALUE, "spare nodes for replacements and rolling updates (capacity)"),
    "--target": Term(VALUE, "what a training plan feeds (plans search)"),
    "--local-port": Term(VALUE, "a local port forwarded to the cluster endpoint (kubeconfig)"),
    "--context-file": Term(VALUE, "the CDK context file zones are recorded in (tests)"),
    # Jobs.
    "--nodes": Term(VALUE, "nodes a job trains on"),
    "--spares": Term(VALUE, "spare nodes of a job"),
    "--image": Term(VALUE, "a training image, pinned by tag or digest"),
    "--priority": Term(VALUE, "a priority class of the environment"),
    "--preset": Term(VALUE, "a trainer preset"),
    "--steps": Term(VALUE, "training steps"),
    "--min-tokens-per-s": Term(VALUE, "the throughput below which a job is flagged slow"),
    "--topology": Term(VALUE, "a job's placement"),
    "--elastic": Term(VALUE, "an elastic job's MIN:MAX nodes"),
    "--parallelism": Term(VALUE, "fsdp or hsdp"),
    "--tp": Term(VALUE, "the tensor-parallel degree"),
    "--module": Term(VALUE, "a Python module run on every rank instead of the trainer"),
    "--file": Term(VALUE, "a manifest file to submit (- for stdin)"),
    "--wait": Term(FLAG, "wait until the job is admitted"),
    "--kubeconfig": Term(VALUE, "the kubeconfig file to use"),
    "--rank": Term(VALUE, "a job's node rank"),
    "--all-ranks": Term(FLAG, "every rank's log"),
    "--follow": Term(FLAG, "keep printing until the container ends"),
    "--archive": Term(FLAG, "read the archived log from CloudWatch Logs"),
}

# The short flags, each the same long option in every command.
SHORT_FLAGS: dict[str, str] = {"-o": "--output", "-f": "--follow"}

# Old spellings kept (hidden) for one release, with the spelling that replaces them.
DEPRECATED_OPTIONS: dict[str, str] = {
    "--duration-days": "--duration",  # plans search: a number of days
    "--group": "--instance-group",  # cluster nodes
    "-f": "--file",  # job submit: -f is --follow everywhere now
}

# Old command names kept (hidden) for one release, with the name that replaces them.
DEPRECATED_COMMANDS: dict[str, str] = {
    # `hpctl nodes` read as the cluster's live nodes, which are `hpctl cluster nodes`.
    "nodes": "node-model",
}


# Durations on the command line carry their unit: `90m`, `6h`, `7d`, `2w`.
_DURATION = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_UNIT_WORDS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class DurationError(InputError):
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


def duration_option(
    ctx: typer.Context, option: str, text: str, *, bare_unit: str | None = None
) -> timedelta:
    """`parse_duration` for a command's option, printing the deprecation line of a bare
    number read in its old `bare_unit`."""
    value = parse_duration(option, text, bare_unit=bare_unit)
    warning = bare_number_deprecation(option, text, bare_unit) if bare_unit else None
    if warning:
        report(ctx, warning)
    return value


def renamed_option(ctx: typer.Context, old: str, old_value: T | None, value: T | None) -> T | None:
    """The value of an option given by its new name or by its `old` one (`DEPRECATED_OPTIONS`),
    with the deprecation line for the old one; both at once is an InputError."""
    if old_value is None:
        return value
    new = DEPRECATED_OPTIONS[old]
    if value is not None:
        raise InputError(f"{old}: the old spelling of {new}; give {new} only")
    deprecated(ctx, old, new)
    return old_value


def duration_text(value: timedelta) -> str:
    """`value` in its largest whole unit of days, hours and minutes, as messages and titles
    say it: `7 days`, `36 hours`, `1 minute`, `0 minutes`."""
    seconds = int(value.total_seconds())
    unit = next((u for u in ("d", "h") if not seconds % _UNIT_SECONDS[u]), "m")
    count = seconds // _UNIT_SECONDS[unit]
    word = _UNIT_WORDS[unit]
    return f"{count} {word if count != 1 else word[:-1]}"


def display_path(path: Path) -> Path:
    """`path` relative to the working directory when it lies below it, as people type it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def environment_file(name: str) -> Path:
    """config/<name>.yaml (as `display_path` shows it) for `--env NAME`; an unknown name is
    an InputError listing the known ones."""
    known = sorted(p.stem for p in config_dir.glob("*.yaml"))
    if name not in known:
        raise InputError(f"--env: unknown environment {name!r}; use one of {', '.join(known)}")
    return display_path(config_dir / f"{name}.yaml")


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


def text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Plain-text columns two spaces apart, no trailing blanks: every cell whole, whatever the
    terminal's width (the tables of reports that are text rather than rich tables)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def utc_now() -> datetime:
    """The clock commands read (each module keeps a replaceable reference to it)."""
    return datetime.now(UTC)


def utc_iso(value: datetime | None) -> str | None:
    """An AWS timestamp as ISO 8601 in UTC, the form `--json` prints; None stays None."""
    return value.astimezone(UTC).isoformat() if value else None


def minute_of(text: str | None) -> str:
    """A `utc_iso` timestamp to the minute, as tables show it; "-" for none."""
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M") if text else "-"
