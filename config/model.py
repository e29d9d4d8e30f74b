"""The base of every config model, below the schema so that `config.kubernetes` (whose types
the schema uses) can build on it too."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base for every config model: unknown keys are errors (typos must not pass)."""

    # strict: no silent coercion ("16" or true for a count, 24000.0 for a size).
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True, strict=True)
