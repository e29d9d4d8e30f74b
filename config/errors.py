"""The one error type for configuration problems and the one way to word them.

Every problem is one line, `<where>: <what is wrong>; <the fix>`. Environment files name
`where` as a dotted field path (`hyperpod.instance_groups[2].count`); `hpctl job render`
names the option (`--nodes`). Both go through `problem_lines`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

Location = tuple[int | str, ...]


class FieldError(ValueError):
    """A rule checked on a model that belongs to one of its fields.

    `path` is relative to the model that raises it ("nat_gateways", "instance_groups[2].taints");
    the formatter appends it to the model's location so the message names the exact field.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class ConfigError(Exception):
    """Invalid configuration: `lines` holds one self-contained message per problem."""

    def __init__(self, source: str, lines: Sequence[str]) -> None:
        self.source = source
        self.lines = list(lines)
        super().__init__("\n".join(self.located_lines()))

    def located_lines(self) -> list[str]:
        """Each problem prefixed with the file (or option) it was found in."""
        return [f"{self.source}: {line}" for line in self.lines]


def dotted_path(loc: Location) -> str:
    """`("hyperpod", "instance_groups", 2, "count")` -> `hyperpod.instance_groups[2].count`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _join(base: str, relative: str) -> str:
    if not base:
        return relative
    return f"{base}{relative}" if relative.startswith("[") else f"{base}.{relative}"


def problem_lines(
    error: ValidationError,
    *,
    where: Callable[[Location], str] = dotted_path,
    pattern_hints: Mapping[str, str] | None = None,
    missing: str = "required field is missing; add it",
) -> list[str]:
    """One line per problem in `error`: `<where>: <message>`.

    `where` names a location; `pattern_hints` says what to write for a field (by its last
    name) whose pattern did not match; `missing` is the message for a required field, with
    `{where}` replaced by the location.
    """
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        original = (item.get("ctx") or {}).get("error")
        if isinstance(original, FieldError):
            lines.append(f"{_join(where(loc), original.path)}: {original.message}")
            continue
        place = where(loc) or "(top level)"
        lines.append(f"{place}: {_message(item, loc, place, pattern_hints or {}, missing)}")
    return lines


def _message(
    item: Mapping[str, Any],
    loc: Location,
    place: str,
    pattern_hints: Mapping[str, str],
    missing: str,
) -> str:
    kind = item["type"]
    ctx: Mapping[str, Any] = item.get("ctx") or {}
    if kind == "missing":
        return missing.format(where=place)
    if kind == "extra_forbidden":
        return "unknown field; remove it or fix its spelling"
    if kind == "int_parsing":
        return f"{item['input']!r} is not a whole number; pass one"
    if kind == "greater_than_equal":
        return f"{item['input']} is too small; use {ctx['ge']} or more"
    if kind == "less_than_equal":
        return f"{item['input']} is too large; use {ctx['le']} or less"
    if kind == "string_type" and loc and loc[-1] == "account":
        return 'write the 12-digit account ID in quotes, e.g. "123456789012"'
    if kind == "string_pattern_mismatch":
        field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
        hint = pattern_hints.get(field, "see the schema for the allowed format")
        return f"{item['input']!r} has the wrong format; {hint}"
    return str(item["msg"]).removeprefix("Value error, ")
