"""Run identity: what a checkpoint belongs to, and which changes a resume may make.

Every manifest carries the identity of the run that wrote it: the preset, the world size, the
resolved config (less the operational checkpoint, fault and metrics sections) and a digest of it. On resume the current job's identity is compared with the
checkpoint's, field by field, and each difference is either allowed (it takes effect from the
resumed step: a longer run, a new learning rate, another world size that DCP reshards to) or
refused (the checkpoint cannot mean the same run: another model, another data order, or a
value the checkpoint would silently replace). Refused differences reject the checkpoint.

Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from training.config import JobConfig

# Config keys (section.field, or a whole section) whose change is refused, and why. Anything
# not listed takes effect when the run resumes.
REFUSED: dict[str, str] = {
    "model": "a different model",
    "data.source": "a different data order",
    "data.dtype": "a different data order",
    "data.seed": "a different data order",
    "data.synthetic_samples": "a different data order",
    "training.seq_len": "a different sample shape",
    "training.seed": "the checkpoint's weights and RNG state replace it",
}
# Sections left out of the identity: they may differ between nodes and between launches.
OPERATIONAL = ("checkpoint", "fault", "metrics")
# Why an allowed change is fine, where that is worth saying.
NOTES: dict[str, str] = {
    "training.steps": "the schedule is recomputed for the new length",
    "optim": "applied from the resumed step",
    "world_size": "resharded by DCP; per-rank RNG streams are not restored",
}


@dataclass(frozen=True)
class RunIdentity:
    preset: str
    world_size: int
    config: dict[str, Any]

    @classmethod
    def of(cls, cfg: JobConfig, world_size: int) -> RunIdentity:
        config = cfg.to_dict()
        # How the run is operated, not what it trains (and per node: each node of a job may
        # have its own directory of every per-node tier).
        for section in ("preset", *OPERATIONAL):
            config.pop(section, None)
        return cls(cfg.preset, world_size, config)

    @property
    def config_digest(self) -> str:
        text = json.dumps(self.config, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "world_size": self.world_size,
            "config_digest": self.config_digest,
            "config": self.config,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunIdentity:
        return cls(str(data["preset"]), int(data["world_size"]), dict(data["config"]))


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any
    allowed: bool
    why: str

    def __str__(self) -> str:
        verdict = "allowed" if self.allowed else "not allowed"
        why = f": {self.why}" if self.why else ""
        return f"{self.key} {self.old!r} -> {self.new!r} ({verdict}{why})"


def _flatten(config: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for section, fields in config.items():
        if isinstance(fields, dict):
            for name, value in fields.items():
                flat[f"{section}.{name}"] = value
        else:
            flat[section] = fields
    return flat


def _rule(key: str, table: dict[str, str]) -> str | None:
    return table.get(key, table.get(key.split(".")[0]))


def compare(saved: RunIdentity, current: RunIdentity) -> list[Change]:
    """Differences from the checkpoint's run to this job, each allowed or refused."""
    changes: list[Change] = []
    if saved.preset != current.preset:
        # A name: what it resolves to is compared field by field below.
        changes.append(Change("preset", saved.preset, current.preset, True, ""))
    if saved.world_size != current.world_size:
        changes.append(
            Change("world_size", saved.world_size, current.world_size, True, NOTES["world_size"])
        )
    old, new = _flatten(saved.config), _flatten(current.config)
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        refused = _rule(key, REFUSED)
        if refused is not None:
            changes.append(Change(key, old.get(key), new.get(key), False, refused))
        else:
            changes.append(Change(key, old.get(key), new.get(key), True, _rule(key, NOTES) or ""))
    return changes


def describe(changes: list[Change]) -> str:
    return "; ".join(str(c) for c in changes)
