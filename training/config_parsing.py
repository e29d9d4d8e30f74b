"""The config's error type and the parsing of ``--set`` values into declared field types:
what every config module (training.config, training.checkpoint.config) builds on."""

from __future__ import annotations

import types
import typing
from typing import Any


class ConfigError(ValueError):
    """Raised for unknown presets, unknown keys or values that do not parse."""


def parse_value(raw: str, annotation: Any, key: str) -> Any:
    """Parses `raw` into the declared type of a dataclass field."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if raw.strip().lower() in ("none", "null", ""):
            return None
        return parse_value(raw, args[0], key)
    try:
        if annotation is bool:
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if annotation is int:
            return int(raw)
        if annotation is float:
            return float(raw)
        if annotation is str:
            return raw
    except ValueError:
        raise ConfigError(
            f"bad value for {key}: {raw!r} (expected {annotation.__name__})"
        ) from None
    raise ConfigError(f"{key} cannot be overridden from the command line")
