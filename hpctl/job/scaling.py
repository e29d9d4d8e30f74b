"""How a job spreads its trainer over nodes: the parallel settings it renders (HSDP by default
across nodes, tensor parallelism inside a node) and, for an elastic job, the node counts it
can run at and the one global batch every one of them splits.

Pure functions over the trainer's own configuration (`training.config.JobConfig`): a size is
runnable exactly when the trainer's `mesh_shape` and `check_world` accept its world, so the
renderer never offers the operator a size the trainer would refuse.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Final, Literal

from training.config import JobConfig
from training.config_parsing import ConfigError
from training.presets import build_config

Parallelism = Literal["fsdp", "hsdp"]
PARALLELISMS: Final[tuple[Parallelism, ...]] = ("fsdp", "hsdp")

# The trainer's parallel keys (training.config.ParallelConfig) the renderer sets.
DP_REPLICATE_KEY: Final = "parallel.dp_replicate"
DP_SHARD_KEY: Final = "parallel.dp_shard"
TP_KEY: Final = "parallel.tp"
REST_OF_WORLD: Final = -1  # a data-parallel size the trainer resolves to the rest of the world

# How far from the preset's batch an elastic job's common batch may be looked for, in
# multiples of the smallest batch every size splits; past it the range is refused.
_BATCH_SEARCH_STEPS: Final = 64


def open_mesh(config: JobConfig) -> bool:
    """The preset leaves the device mesh to the launch (plain FSDP over the whole world): the
    renderer may choose it. A preset that fixes its own sharding keeps it."""
    p = config.parallel
    return (p.dp_replicate, p.dp_shard, p.tp) == (1, REST_OF_WORLD, 1)


def resolved_parallelism(
    config: JobConfig, chosen: Parallelism | None, tp: int, multi_node: bool
) -> Parallelism | None:
    """The parallelism a job renders: the one chosen; else HSDP for a job that spans (or may
    grow to span) nodes, FSDP with tensor parallelism on one node; None where the preset's
    own settings stand (one node without tensor parallelism, or a preset with a fixed mesh)."""
    if chosen is not None:
        return chosen
    if not open_mesh(config):
        return None
    if multi_node:
        return "hsdp"
    return "fsdp" if tp > 1 else None


def parallel_overrides(mode: Parallelism | None, gpus_per_node: int, tp: int) -> dict[str, int]:
    """The trainer's `--set` values for `mode`. HSDP shards within a node (its GPUs over the
    tensor-parallel degree) and replicates across nodes, the replica count left to the
    world, so a job resized by the operator keeps a valid mesh."""
    if mode == "hsdp":
        shard = gpus_per_node // tp
        return {DP_REPLICATE_KEY: REST_OF_WORLD, DP_SHARD_KEY: shard, TP_KEY: tp}
    if mode == "fsdp":
        return {DP_REPLICATE_KEY: 1, DP_SHARD_KEY: REST_OF_WORLD, TP_KEY: tp}
    return {TP_KEY: tp} if tp > 1 else {}


@functools.cache
def _configured(preset: str, overrides: tuple[tuple[str, int], ...]) -> JobConfig:
    return build_config(preset, [f"{key}={value}" for key, value in overrides])


def configured(preset: str, overrides: dict[str, int]) -> JobConfig:
    """The trainer's configuration for `preset` with the parallel `overrides` (shared: do not
    mutate). ConfigError where the trainer refuses them (a tp that splits no whole heads)."""
    return _configured(preset, tuple(sorted(overrides.items())))


def mesh_fits(config: JobConfig, world: int) -> bool:
    try:
        config.mesh_shape(world)
    except ConfigError:
        return False
    return True


def _with_batch(config: JobConfig, batch: int) -> JobConfig:
    return dataclasses.replace(
        config, training=dataclasses.replace(config.training, global_batch_size=batch)
    )


def runs(config: JobConfig, world: int) -> bool:
    """The trainer runs a world of `world` ranks with `config`'s batch (`check_world`)."""
    try:
        config.check_world(world)
    except ConfigError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class ElasticPlan:
    """The node counts an elastic job runs at, and the one global batch all of them split."""

    sizes: tuple[int, ...]
    batch: int

    @property
    def step(self) -> int | None:
        """The increment when the sizes are every step-th count from the first to the last
        (the operator's replicaIncrementStep), else None (replicaDiscreteValues)."""
        if len(self.sizes) < 2:
            return None
        step = self.sizes[1] - self.sizes[0]
        expected = tuple(range(self.sizes[0], self.sizes[-1] + 1, step))
        return step if self.sizes == expected else None


class ElasticRangeError(ValueError):
    """An elastic range the trainer cannot run; the message names the fix."""


def common_batch(config: JobConfig, worlds: tuple[int, ...]) -> int | None:
    """The batch nearest the preset's that every world in `worlds` splits (a tie goes up,
    as `JobConfig.batch_for_world` breaks it), or None within the search bound."""
    preset = config.training.global_batch_size
    if all(runs(config, w) for w in worlds):
        return preset
    unit = math.lcm(*(config.data_parallel_size(w) for w in worlds))
    nearest = max(1, round(preset / unit))
    for distance in range(_BATCH_SEARCH_STEPS):
        for k in (nearest + distance, nearest - distance) if distance else (nearest,):
            batch = k * unit
            if k >= 1 and all(runs(_with_batch(config, batch), w) for w in worlds):
                return batch
    return None


def elastic_plan(
    config: JobConfig, gpus_per_node: int, low: int, high: int, preset: str | None = None
) -> ElasticPlan:
    """The sizes in [low, high] the trainer runs and their common batch. Both ends must run:
    the operator starts at `low` and may grow to `high`. The batch is the preset's when both
    ends split it, else the nearest that both do; the sizes between are those that split it
    and fit the mesh. `preset` names the preset in messages (default: the config's own)."""
    preset = preset or config.preset
    unfit = [n for n in (low, high) if not mesh_fits(config, n * gpus_per_node)]
    if unfit:
        fitting = [n for n in range(low, high + 1) if mesh_fits(config, n * gpus_per_node)]
        fix = (
            f"use a range within the sizes it fits ({_sizes_text(fitting)})"
            if fitting
            else "use a preset whose sharding leaves the replica count open"
        )
        raise ElasticRangeError(
            f"{unfit[0]} node(s) x {gpus_per_node} GPUs do not fit preset {preset!r}'s device "
            f"mesh; {fix}"
        )
    ends = (low * gpus_per_node, high * gpus_per_node)
    batch = common_batch(config, ends)
    if batch is None:
        raise ElasticRangeError(
            f"no global batch near preset {preset!r}'s "
            f"{config.training.global_batch_size} splits over both {low} and {high} nodes of "
            f"{gpus_per_node} GPUs; narrow the range (e.g. {low}:{2 * low})"
        )
    fixed = _with_batch(config, batch)
    sizes = tuple(n for n in range(low, high + 1) if runs(fixed, n * gpus_per_node))
    return ElasticPlan(sizes=sizes, batch=batch)


def _sizes_text(sizes: list[int]) -> str:
    shown = ", ".join(map(str, sizes[:8]))
    return shown + (", ..." if len(sizes) > 8 else "")
