"""Patterns for the trainer's fixed ``HPTRAIN`` log lines, derived from training.metrics.

Tests parse the lines with these instead of retyping the formats. The formats themselves are
pinned by test_metrics.test_log_line_formats, which compares whole lines byte for byte, so a
changed format still fails the tests.
"""

from __future__ import annotations

import re
import string

from training.metrics import CKPT_COMMITTED_FMT, CKPT_FMT, START_FMT, STEP_FMT, WATCHDOG_FMT


def _field_regex(spec: str) -> str:
    fixed = re.fullmatch(r"\.(\d+)f", spec)
    if fixed:
        return rf"-?\d+\.\d{{{fixed.group(1)}}}"
    if spec:
        raise ValueError(f"no pattern for format spec {spec!r}")
    return r"\S+"


def line_pattern(fmt: str, **fields: str) -> re.Pattern[str]:
    """A pattern matching whole lines (re.M) that ``fmt.format(...)`` produces, with every
    field captured as a named group. ``fields`` narrows a field to a regex, e.g.
    ``line_pattern(CKPT_FMT, step="17", tier="durable")``."""
    parts = ["^"]
    for literal, name, spec, conversion in string.Formatter().parse(fmt):
        parts.append(re.escape(literal))
        if name is None:
            continue
        if conversion or not name.isidentifier():
            raise ValueError(f"unsupported field {name!r} in {fmt!r}")
        regex = fields.pop(name, None) or _field_regex(spec or "")
        parts.append(f"(?P<{name}>{regex})")
    if fields:
        raise ValueError(f"{sorted(fields)} are not fields of {fmt!r}")
    parts.append("$")
    return re.compile("".join(parts), re.M)


START = line_pattern(START_FMT)
STEP = line_pattern(STEP_FMT)
# Every checkpoint line; a committed one's commit_s= and bytes= are read by COMMITTED.
CHECKPOINT = re.compile(
    line_pattern(CKPT_FMT).pattern.removesuffix("$") + r"(?: commit_s=\S+ bytes=\d+)?$", re.M
)
COMMITTED = line_pattern(CKPT_COMMITTED_FMT, bytes=r"\d+")


def checkpoint_statuses(text: str, *, step: str, tier: str) -> list[str]:
    """The statuses of the checkpoint lines of `step` and `tier`, in order (a committed line
    carries its commit_s= and bytes= too)."""
    return [c["status"] for c in find(CHECKPOINT, text) if (c["step"], c["tier"]) == (step, tier)]


WATCHDOG = line_pattern(WATCHDOG_FMT)


def find(pattern: re.Pattern[str], text: str) -> list[dict[str, str]]:
    """The fields of every line of `text` that `pattern` matches, in order."""
    return [m.groupdict() for m in pattern.finditer(text)]
