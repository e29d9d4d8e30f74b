"""The one error type for configuration problems and the one way to word them.

Every problem is one line, `<where>: <what is wrong>; <the fix>`. Environment files name
`where` as a dotted field path (`hyperpod.instance_groups[2].count`); `hpctl job render`
names the option (`--nodes`). Both go through `problem_lines`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

Location = tuple[int | str, ...]
# The text a scalar was written as in the YAML file, by location (None: unknown, e.g. the
# data did not come from a file). YAML turns some unquoted text into numbers, booleans or
# dates; the original text lets a message say what to quote.
ScalarText = Callable[[Location], str | None]


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
    scalar_text: ScalarText | None = None,
) -> list[str]:
    """One line per problem in `error`: `<where>: <message>`.

    `where` names a location; `pattern_hints` says what to write for a field (by its last
    name) whose pattern did not match; `missing` is the message for a required field, with
    `{where}` replaced by the location; `scalar_text` gives a value's text as written in the
    file, for the message when YAML read text as another type.
    """
    lines = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        original = (item.get("ctx") or {}).get("error")
        if isinstance(original, FieldError):
            lines.append(f"{_join(where(loc), original.path)}: {original.message}")
            continue
        place = where(loc) or "(top level)"
        text = scalar_text(loc) if scalar_text is not None else None
        lines.append(f"{place}: {_message(item, loc, place, pattern_hints or {}, missing, text)}")
    return lines


def _message(
    item: Mapping[str, Any],
    loc: Location,
    place: str,
    pattern_hints: Mapping[str, str],
    missing: str,
    text: str | None,
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
    if kind == "string_type":
        return not_text(item["input"], text)
    if kind == "string_pattern_mismatch":
        field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
        hint = pattern_hints.get(field, "see the schema for the allowed format")
        return f"{item['input']!r} has the wrong format; {hint}"
    return str(item["msg"]).removeprefix("Value error, ")


def not_text(value: object, text: str | None = None) -> str:
    """Why `value` is not the text a field expects, and what to write: YAML reads some
    unquoted text as another type (1.30 as the number 1.3, 7:03:00 as 25380, yes as true).
    `text` is the value as written in the file, when known."""
    if isinstance(value, (list, tuple, set)):
        return "expected text, not a list; write a single value"
    if isinstance(value, dict):
        return "expected text, not a mapping; write a single value"
    if value is None:
        return "has no value (YAML reads an empty value, ~ or null as null); write one"
    if isinstance(value, bool):
        shown = text if text is not None else str(value).lower()
        return f'{shown} is a boolean in YAML ({str(value).lower()}); quote it: "{shown}"'
    if isinstance(value, datetime.date):
        shown = text if text is not None else value.isoformat()
        kind = "a timestamp" if isinstance(value, datetime.datetime) else "a date"
        return f'{shown} is {kind} in YAML; quote it: "{shown}"'
    if isinstance(value, (int, float)):
        return _number_not_text(value, text)
    return f"expected text, not {type(value).__name__}; write the value in quotes"


def _number_not_text(value: float, text: str | None) -> str:
    if text is None:
        if isinstance(value, float):
            # The text is gone: say what the number lost, if anything.
            return (
                f"{value!r} is a number in YAML, which drops trailing zeros (1.30 reads as "
                f'1.3); quote the value as you mean it, e.g. "{value!r}"'
            )
        return f'{value} is a number in YAML; quote it: "{value}"'
    if isinstance(value, int) and ":" in text:
        return f'{text} is a number in YAML 1.1 (base 60: {value}); quote it: "{text}"'
    zeros = len(text) - len(text.rstrip("0"))
    if isinstance(value, float) and "." in text and zeros and repr(value) != text:
        lost = "its trailing zero" if zeros == 1 else "its trailing zeros"
        return f'{value!r} is a number in YAML ({text} lost {lost}); quote it: "{text}"'
    if text != str(value):
        return f'{text} is a number in YAML ({value!r}); quote it: "{text}"'
    return f'{text} is a number in YAML; quote it: "{text}"'
