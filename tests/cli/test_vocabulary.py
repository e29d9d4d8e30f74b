"""Every registered `hpctl` command (`hpctl.cli.COMMAND_MODULES`, walked through click) speaks
the one option vocabulary of `hpctl.options`: each long option is in `VOCABULARY` with the
kind it says (a flag is a flag, a duration is text with a unit, never an integer), the
environment is `--env`, no option carries a time unit in its name or metavar, a short flag
means the same long option everywhere (`SHORT_FLAGS`), old spellings are hidden and listed
(`DEPRECATED_OPTIONS`, `DEPRECATED_COMMANDS`), every command that reads an environment takes `--env`, and every
command that prints a table takes `--json`."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
import typer
from typer.main import get_command

from hpctl import cli
from hpctl.options import (
    DEPRECATED_COMMANDS,
    DEPRECATED_OPTIONS,
    SHORT_FLAGS,
    VOCABULARY,
    Kind,
)

# Commands that print no table, so no --json: why each prints what it prints.
PRINTS_NO_TABLE = {
    "validate": "one line per file, or the problems on stderr",
    "kubeconfig": "writes a file and prints how to use it",
    "plans buy": "the bought plan's ARN and its config block",
    "cluster reboot": "one line per node",
    "cluster replace": "one line per node",
    "job render": "a manifest in YAML, itself machine-readable",
}

# Commands that read no environment, so no --env.
READS_NO_ENVIRONMENT = {"instance-types": "the planner's instance table, the same everywhere"}

# A time unit in an option's name or metavar: the unit belongs in the value (`--since 7d`).
UNIT_IN_NAME = re.compile(r"-(days?|hours?|minutes?|mins?|seconds?|secs?)$")
UNIT_METAVARS = {"DAYS", "HOURS", "MINUTES", "SECONDS"}


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), command


COMMANDS = dict(_commands(get_command(cli.app)))


def _options(command: Any) -> list[Any]:
    return [p for p in command.params if p.param_type_name == "option" and p.name != "help"]


def _annotation(option: Any) -> Any:
    return option.type_descriptor.annotation


def _is_integer(option: Any) -> bool:
    annotation = _annotation(option)
    return annotation in (int, float) or getattr(annotation, "__args__", ()) in ((int,), (float,))


def vocabulary_problems(name: str, command: Any) -> list[str]:
    """Every way `command`'s options leave the vocabulary, one line each."""
    problems: list[str] = []
    for option in _options(command):
        spellings = [*option.opts, *option.secondary_opts]
        if all(s in DEPRECATED_OPTIONS for s in spellings):
            if not option.hidden:
                problems.append(f"{name}: {'/'.join(spellings)} is an old spelling; hide it")
            continue
        long = [s for s in spellings if s.startswith("--")]
        for short in (s for s in spellings if not s.startswith("--")):
            if SHORT_FLAGS.get(short) not in long:
                problems.append(
                    f"{name}: {short} means {'/'.join(long)} here but "
                    f"{SHORT_FLAGS.get(short, 'nothing')} in the vocabulary (SHORT_FLAGS)"
                )
        for spelling in long:
            problems += _long_option_problems(name, spelling, option)
    return problems


def _long_option_problems(name: str, spelling: str, option: Any) -> list[str]:
    problems: list[str] = []
    if any(part.startswith("env") for part in spelling[2:].split("-")) and spelling != "--env":
        problems.append(f"{name}: {spelling} names an environment; spell it --env")
    if UNIT_IN_NAME.search(spelling) or (option.metavar or "") in UNIT_METAVARS:
        problems.append(
            f"{name}: {spelling} puts a time unit in its name or metavar; take a duration "
            "with its unit (parse_duration)"
        )
    term = VOCABULARY.get(spelling)
    if term is None:
        return [*problems, f"{name}: {spelling} is not in hpctl.options.VOCABULARY"]
    if (term.kind is Kind.FLAG) != bool(option.is_flag):
        problems.append(
            f"{name}: {spelling} is {'a flag' if option.is_flag else 'a value'} "
            f"here, {term.kind.value} in the vocabulary"
        )
    if term.kind is Kind.DURATION and _is_integer(option):
        problems.append(f"{name}: {spelling} is a number; durations are text with a unit")
    return problems


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_is_in_the_vocabulary(name: str) -> None:
    assert vocabulary_problems(name, COMMANDS[name]) == []


def _spellings(name: str) -> set[str]:
    return {s for option in _options(COMMANDS[name]) for s in option.opts}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_that_prints_a_table_takes_json(name: str) -> None:
    assert ("--json" in _spellings(name)) != (name in PRINTS_NO_TABLE), name


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_that_reads_an_environment_takes_env(name: str) -> None:
    assert ("--env" in _spellings(name)) != (name in READS_NO_ENVIRONMENT), name


def test_old_command_names_are_hidden_and_take_the_options_of_their_replacement() -> None:
    hidden = {name for name, command in COMMANDS.items() if command.hidden}
    assert hidden == set(DEPRECATED_COMMANDS)
    for old, new in DEPRECATED_COMMANDS.items():
        options = [sorted(o.opts) for o in _options(COMMANDS[old])]
        assert options == [sorted(o.opts) for o in _options(COMMANDS[new])]


def test_every_command_is_walked() -> None:
    # The walk reaches into the groups (a group's commands are not its own options).
    assert {"validate", "node-model", "cluster events", "plans search", "job logs"} <= set(COMMANDS)
    assert set(PRINTS_NO_TABLE) | set(READS_NO_ENVIRONMENT) <= set(COMMANDS)


# Commands that each leave the vocabulary once, as a new command might.
def _environment(environment: Annotated[str | None, typer.Option("--environment")] = None) -> None:
    """An environment option under another name."""


def _days(since_days: Annotated[int, typer.Option("--since-days")] = 7) -> None:
    """A unit in the option's name."""


def _integer_since(since: Annotated[int, typer.Option("--since")] = 7) -> None:
    """A duration that is an integer."""


def _hours(window: Annotated[str, typer.Option("--since", metavar="HOURS")] = "6") -> None:
    """A unit in the metavar."""


def _json_value(as_json: Annotated[str, typer.Option("--json")] = "") -> None:
    """A flag of the vocabulary taking a value."""


def _bogus(bogus: Annotated[str, typer.Option("--bogus")] = "") -> None:
    """An option the vocabulary does not know."""


def _visible_old(days: Annotated[int | None, typer.Option("--duration-days")] = None) -> None:
    """An old spelling left in the help."""


def _file_short(file: Annotated[str | None, typer.Option("--file", "-f")] = None) -> None:
    """-f as --file, where the vocabulary says --follow."""


@pytest.mark.parametrize(
    ("function", "problem"),
    [
        (_environment, "probe: --environment names an environment; spell it --env"),
        (_days, "probe: --since-days puts a time unit in its name or metavar"),
        (_integer_since, "probe: --since is a number; durations are text with a unit"),
        (_hours, "probe: --since puts a time unit in its name or metavar"),
        (_json_value, "probe: --json is a value here, flag in the vocabulary"),
        (_bogus, "probe: --bogus is not in hpctl.options.VOCABULARY"),
        (_visible_old, "probe: --duration-days is an old spelling; hide it"),
        (_file_short, "probe: -f means --file here but --follow in the vocabulary (SHORT_FLAGS)"),
    ],
    ids=lambda value: getattr(value, "__name__", "")[1:],
)
def test_the_walk_catches_an_option_outside_the_vocabulary(
    function: Callable[..., None], problem: str
) -> None:
    app = typer.Typer(add_completion=False)
    app.command("probe")(function)
    problems = vocabulary_problems("probe", get_command(app))
    assert any(line.startswith(problem) for line in problems), problems
