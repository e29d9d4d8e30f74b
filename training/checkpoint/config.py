"""Checkpoint configuration: the tiers (TierConfig) and CheckpointConfig, the ``checkpoint``
section of a job's config, with the ``--set checkpoint.<tier>_<field>`` keys of each tier."""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

from training.config_parsing import ConfigError, parse_value

# Names of the two tiers every preset declares (CheckpointConfig.tiers).
FAST, DURABLE = "fast", "durable"
# TierConfig.storage kinds (checkpoint/tiers.py registers a class for each but "auto"): a
# directory, HyperPod managed tiered checkpointing, or managed when its library is importable
# and a directory otherwise.
LOCAL_STORAGE, MANAGED_STORAGE, AUTO_STORAGE = "local", "managed", "auto"


@dataclass(frozen=True)
class TierConfig:
    """One checkpoint tier. Each field but the name is overridden as
    ``--set checkpoint.<name>_<field>=value`` (tier_key), e.g. checkpoint.fast_interval=10."""

    # Directory name under <out>/ckpt, the tier in logs and manifests.
    name: str
    # Root directory; "" = <out>/ckpt/<name>.
    dir: str = ""
    # Steps between checkpoints of this tier; 0 disables it. ``--set
    # checkpoint.<tier>_interval=auto`` sets auto_interval and keeps this as the first one.
    interval: int = 0
    # Committed checkpoints kept (keep-last-k).
    keep: int = 1
    # Storage kind: "local" (a directory), "managed" (HyperPod managed tiered checkpointing,
    # with a marker directory here) or "auto" (managed when its library is importable).
    storage: str = LOCAL_STORAGE
    # Each node has its own copy in a real job (node memory or local NVMe): the launcher's
    # --nodes emulation gives each emulated node its own directory. Whether a tier is
    # node-local at run time is detected, not read from here.
    per_node: bool = False
    # Re-planned from each commit (checkpoint/interval.py): the interval that wastes least
    # for checkpoint.mtbf_hours, never shorter than a commit.
    auto_interval: bool = False

    def due(self, step: int) -> bool:
        return self.interval > 0 and step % self.interval == 0


# The tier fields an override may set (every field but the name; auto_interval is set as
# checkpoint.<tier>_interval=auto).
TIER_FIELDS = tuple(
    f.name for f in dataclasses.fields(TierConfig) if f.name not in ("name", "auto_interval")
)
AUTO_INTERVAL = "auto"
# The first interval of an auto tier whose configured one is 0: its first checkpoint measures.
AUTO_FIRST_INTERVAL = 10
# Override keys that name a tier field by its earlier name: jobs rendered by an older hpctl
# pass checkpoint.fast_backend to a newer image.
TIER_KEY_ALIASES = {"fast_backend": "fast_storage"}


def tier_key(tier: str, field_name: str) -> str:
    """The ``--set`` key of one field of one tier: checkpoint.<tier>_<field>."""
    return f"checkpoint.{tier}_{field_name}"


def _default_tiers() -> tuple[TierConfig, ...]:
    return (
        # Node-local memory or NVMe (e.g. /dev/shm/...); managed tiered checkpointing when
        # its library is importable.
        TierConfig(FAST, interval=5, keep=3, storage=AUTO_STORAGE, per_node=True),
        # Shared filesystem (FSx).
        TierConfig(DURABLE, interval=20, keep=2),
    )


@dataclass
class CheckpointConfig:
    # The tiers, fastest to read first, most durable last. That order decides: at equal step
    # the earlier tier is resumed from; when several are due at a step the latest one is
    # written (it covers the others); the last one takes the final checkpoint. Adding a tier
    # is one entry here (and a storage class in checkpoint/tiers.py only for new storage).
    tiers: tuple[TierConfig, ...] = field(default_factory=_default_tiers)
    # "thread" = staging copy, write and commit in the background; "sync" = blocking dcp.save.
    async_mode: str = "thread"
    # GPU only: take each checkpoint as a copy in GPU memory first (milliseconds, on the
    # compute stream), so the optimizer update never waits for the copy to host memory.
    # Costs GPU memory for a second copy of this rank's parameters and optimizer state.
    device_snapshot: bool = False
    # Tier written synchronously on SIGTERM. Durable by default: a drained node takes its
    # local memory/NVMe with it, so a fast-tier save would not survive the reschedule.
    sigterm_tier: str = DURABLE
    # Threads (and files) each rank writes a directory tier's checkpoint with, hashing as
    # they write; 0 = the node's CPUs shared by its ranks, at most 8 (checkpoint/hashing.py).
    write_threads: int = 0
    # Verify sha256 of every file this rank reads before trusting a checkpoint on resume
    # (off: sizes and DCP metadata only, and the resume says the shards went unverified).
    verify_checksums: bool = True
    export_final: bool = True
    # Managed storage (a tier with storage=managed): the library's namespace, the same on
    # every restart of one job and unique per job ("" = derived from the run directory), and
    # its S3 tier ("" = in-memory tier only). The library writes S3 only for the checkpoints
    # the training loop marks: the first managed checkpoint at or after every multiple of
    # managed_s3_interval steps (0 = the last tier's interval).
    managed_namespace: str = ""
    managed_s3_path: str = ""
    managed_s3_interval: int = 0
    # The job's mean time between failures, for tiers with interval=auto (checkpoint/
    # interval.py); 0 = from its nodes: AWS cites jobs of 1,024 nodes failing about every
    # 8 hours, so a job of N nodes every 8 x 1,024 / N hours.
    mtbf_hours: float = 0.0

    def tier(self, name: str) -> TierConfig:
        for t in self.tiers:
            if t.name == name:
                return t
        raise ConfigError(
            f"no checkpoint tier {name!r} (tiers: {', '.join(t.name for t in self.tiers)})"
        )

    @property
    def final_tier(self) -> str:
        """The tier of the final checkpoint: the last, most durable one."""
        return self.tiers[-1].name

    def tier_due(self, step: int) -> str | None:
        """The tier to write after `step`: of the tiers due, the latest in the list."""
        for t in reversed(self.tiers):
            if t.due(step):
                return t.name
        return None

    def resume_key(self, step: int, tier: str) -> tuple[int, int]:
        """Sort key of resume candidates: newest step first, then the order of the tiers."""
        return -step, [t.name for t in self.tiers].index(tier)

    def s3_interval(self) -> int:
        """Steps between managed checkpoints also written to S3."""
        return self.managed_s3_interval or self.tiers[-1].interval

    def set_tier_field(self, name_field: str, raw: str) -> bool:
        """Applies ``checkpoint.<tier>_<field>=raw``; False when no tier field has that key."""
        name_field = TIER_KEY_ALIASES.get(name_field, name_field)
        for i, t in enumerate(self.tiers):
            field_name = name_field.removeprefix(f"{t.name}_")
            if field_name != name_field and field_name in TIER_FIELDS:
                replaced = _with_field(t, field_name, raw)
                self.tiers = (*self.tiers[:i], replaced, *self.tiers[i + 1 :])
                return True
        return False

    def set_interval(self, name: str, interval: int) -> None:
        """Re-plans tier `name` while training (an auto tier: checkpoint/interval.py)."""
        self.tiers = tuple(
            dataclasses.replace(t, interval=interval) if t.name == name else t for t in self.tiers
        )

    def validate(self) -> None:
        if not self.tiers:
            raise ConfigError("checkpoint.tiers must declare at least one tier")
        names = [t.name for t in self.tiers]
        own = {f.name for f in dataclasses.fields(self)} | set(TIER_KEY_ALIASES)
        for t in self.tiers:
            if not _TIER_NAME.fullmatch(t.name) or names.count(t.name) > 1:
                raise ConfigError(
                    f"checkpoint tier names must be unique lowercase identifiers, got {t.name!r}"
                )
            clash = [f for f in TIER_FIELDS if f"{t.name}_{f}" in own]
            if clash:
                raise ConfigError(
                    f"checkpoint tier {t.name!r}: {tier_key(t.name, clash[0])} is another setting"
                )
            if t.interval < 0:
                raise ConfigError(
                    f"{tier_key(t.name, 'interval')} must be >= 0 (0 disables the tier), "
                    f"got {t.interval}"
                )
            if t.keep < 1:
                raise ConfigError(f"{tier_key(t.name, 'keep')} must be >= 1, got {t.keep}")
        if self.sigterm_tier not in names:
            raise ConfigError(
                f"checkpoint.sigterm_tier must be one of {', '.join(names)}, got "
                f"{self.sigterm_tier!r}"
            )
        if self.async_mode not in ("thread", "sync"):
            raise ConfigError("checkpoint.async_mode must be 'thread' or 'sync'")
        if self.managed_s3_path and not self.managed_s3_path.startswith("s3://"):
            raise ConfigError(
                f"checkpoint.managed_s3_path must be an s3:// URI, got {self.managed_s3_path!r}"
            )
        if self.managed_s3_interval < 0:
            raise ConfigError(
                "checkpoint.managed_s3_interval must be >= 0 (0 = the last tier's interval)"
            )
        if self.write_threads < 0:
            raise ConfigError(
                f"checkpoint.write_threads must be >= 0 (0 = from the CPUs), got "
                f"{self.write_threads}"
            )
        if not self.mtbf_hours >= 0:  # NaN too
            raise ConfigError(
                f"checkpoint.mtbf_hours must be >= 0 (0 = from the job's nodes), got "
                f"{self.mtbf_hours}"
            )


_TIER_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _with_field(t: TierConfig, field_name: str, raw: str) -> TierConfig:
    """`t` with one field set from its ``--set`` text; interval=auto sets auto_interval and
    keeps the interval (or AUTO_FIRST_INTERVAL) as the first one."""
    if field_name == "interval" and raw.strip().lower() == AUTO_INTERVAL:
        first = t.interval or AUTO_FIRST_INTERVAL
        return dataclasses.replace(t, interval=first, auto_interval=True)
    key = tier_key(t.name, field_name)
    if field_name == "interval":  # a number replaces auto
        try:
            return dataclasses.replace(t, interval=int(raw), auto_interval=False)
        except ValueError:
            raise ConfigError(f"{key} must be a number of steps or auto, got {raw!r}") from None
    value = parse_value(raw, typing.get_type_hints(TierConfig)[field_name], key)
    return dataclasses.replace(t, **{field_name: value})


def checkpoint_roots(c: CheckpointConfig, out: Path) -> dict[str, Path]:
    """Root directory of each tier, in tier order: the configured one, else <out>/ckpt/<name>."""
    return {t.name: Path(t.dir) if t.dir else out / "ckpt" / t.name for t in c.tiers}
