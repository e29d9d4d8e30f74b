"""What a job runs on every rank besides the project's trainer: a team's own Python module
(`--module MODULE -- ARGS...`) or a team's own program (`-- PROGRAM ARGS...`)."""

from __future__ import annotations

import posixpath
import re

from pydantic import BaseModel, ConfigDict, field_validator

# A Python module path: dotted identifiers (what `python -m` takes).
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Launchers the platform already runs every job under (hyperpodrun) or that would start a
# second agent inside it: an entry point names the per-rank program instead.
LAUNCHERS = frozenset({"hyperpodrun", "torchrun"})
_INTERPRETERS = frozenset({"python", "python3", "bash", "sh", "env"})


class ModuleEntryPoint(BaseModel):
    """A team's own Python module, run on every rank as `python -m MODULE ARGS...`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str
    args: tuple[str, ...] = ()

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        if not _MODULE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a Python module path; use dotted names as `python -m` takes "
                "them (e.g. torchtitan.train)"
            )
        return value

    @property
    def name_tag(self) -> str:
        """What a default job name calls the code."""
        return self.module


class CommandEntryPoint(BaseModel):
    """A team's own program and its arguments, run on every rank as given (no `python`
    prepended)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...]

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or not value[0].strip():
            raise ValueError("empty command; give the program and its arguments after --")
        program = posixpath.basename(value[0])
        if program in LAUNCHERS:
            raise ValueError(
                f"{program} is the launcher the platform already runs on every node; give the "
                "program each rank runs (e.g. -- python train.py ...) or --module"
            )
        return value

    @property
    def name_tag(self) -> str:
        """What a default job name calls the code: the first word that is neither an option
        nor an interpreter (`python train.py` -> train)."""
        words = [w for w in self.command if not w.startswith("-")]
        named = [w for w in words if posixpath.basename(w) not in _INTERPRETERS] or words
        return posixpath.splitext(posixpath.basename(named[0]))[0] if named else "job"


# What a job runs besides the project's trainer (JobSpec.entry_point None).
EntryPoint = ModuleEntryPoint | CommandEntryPoint
