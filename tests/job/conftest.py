"""Shared builders for the job generator tests: JobSpecs built field by field (`spec_factory`)
and from an environment's config (`env_spec`), environment files written to a scratch
config directory that `hpctl job render --env` reads (`config_dir`), and trainer presets
with a third checkpoint tier (`three_tier_preset`) or a fixed sharding (`eight_rank_preset`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.node_model import group_model
from config.schema import EnvironmentConfig
from hpctl.job import api
from hpctl.job.environment import spec_for_environment
from hpctl.job.platform import PLATFORM_FIELDS
from hpctl.job.spec import JobSpec, preset_config
from tests.support import environment, variant_of
from training.checkpoint.config import AUTO_STORAGE, TierConfig
from training.config import JobConfig
from training.presets import PRESETS

REQUIRED: dict[str, Any] = {
    "name": "llama-8b",
    "team": "research",
    "priority": "training",
    # By digest, as prod requires (require_image_digest); the tag stays for people.
    "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0@sha256:4f1c2f9e6b0d3a8c7e5b2a9d1f0e8c6b4a2d9f7e5c3b1a0f8e6d4c2b0a9f7e5d",
    "instance_type": "ml.p5.48xlarge",
    "instance_group": "gpu-p5",
    # What a node of prod's gpu-p5 group leaves a job, as `hpctl job render` derives it.
    "allocation": group_model(environment("prod").config, "gpu-p5").job,
}
IMAGE = REQUIRED["image"]
# The clock every default job name in these tests is stamped with.
FIXED_NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


GB200 = "ml.p6e-gb200.36xlarge"


@functools.cache
def gb200_environment() -> EnvironmentConfig:
    """prod with a group of one UltraServer (18 GB200 instances), gpu-gb200, that team
    foundation may fill."""

    def mutate(data: dict[str, Any]) -> None:
        group = dict(data["hyperpod"]["instance_groups"][0])
        group.update(
            name="gpu-gb200", instance_type=GB200, count=18, min_count=18, headroom_nodes=0
        )
        group["training_plan"] = {
            "arn": "arn:aws:sagemaker:us-east-1:333333333333:training-plan/gb200",
            "availability_zone": "use1-az4",
        }
        data["hyperpod"]["instance_groups"].append(group)
        foundation = data["governance"]["teams"][0]
        foundation["quotas"].append({"instance_group": "gpu-gb200", "count": 18})

    return variant_of("prod", mutate).config


def spec_fields(**fields: Any) -> dict[str, Any]:
    """JobSpec's input for `fields` given flat: the platform's facts (JobPlatform's fields)
    gathered under `platform`, every other field as it is."""
    platform = {key: fields.pop(key) for key in PLATFORM_FIELDS & fields.keys()}
    return {"platform": platform, **fields}


def make_spec(**overrides: Any) -> JobSpec:
    """A JobSpec of REQUIRED with `overrides`, platform facts and choices alike given flat."""
    return JobSpec(**spec_fields(**{**REQUIRED, **overrides}))


def env_spec(config: EnvironmentConfig | str, **options: Any) -> JobSpec:
    """spec_for_environment with the shipped config `config` (a name) or a config object;
    `options` on top of prod's foundation team, 2 nodes of gpu-p5 and IMAGE."""
    if isinstance(config, str):
        config = environment(config).config
    chosen: dict[str, Any] = {
        "team": "foundation",
        "instance_group": "gpu-p5",
        "nodes": 2,
        "image": IMAGE,
        "clock": lambda: FIXED_NOW,
        **options,
    }
    return spec_for_environment(config, **chosen)


@pytest.fixture
def spec_factory():
    return make_spec


@pytest.fixture
def required_fields() -> dict[str, Any]:
    return dict(REQUIRED)


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> datetime:
    """`hpctl job render` stamps default names with FIXED_NOW."""
    monkeypatch.setattr(api, "clock", lambda: FIXED_NOW)
    return FIXED_NOW


@pytest.fixture
def config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str, Any], None]:
    """`hpctl job render --env NAME` reads tmp_path/NAME.yaml; returns a writer
    `write(name, data)` (data: a dict dumped as YAML, or the file's text)."""
    monkeypatch.setattr("hpctl.options.config_dir", tmp_path)

    def write(name: str, data: Any) -> None:
        text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
        (tmp_path / f"{name}.yaml").write_text(text, encoding="utf-8")

    return write


THREE_TIER_PRESET = "tiny-three-tiers"


@pytest.fixture
def three_tier_preset(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A trainer preset, tiny's, with a shared "nearline" tier (every 10 steps, storage
    "auto") between its fast (every 5) and durable (every 20) tiers: a tier the job renderer
    was never told about. Returns the preset's name."""

    def build() -> JobConfig:
        config = PRESETS["tiny"]()
        fast, durable = config.checkpoint.tiers
        nearline = TierConfig("nearline", interval=10, storage=AUTO_STORAGE)
        config.checkpoint.tiers = (fast, nearline, durable)
        return config

    monkeypatch.setitem(PRESETS, THREE_TIER_PRESET, build)
    yield THREE_TIER_PRESET
    preset_config.cache_clear()


EIGHT_RANK_PRESET = "tiny-eight-ranks"


@pytest.fixture
def eight_rank_preset(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A trainer preset, tiny's, whose parameters are sharded over exactly 8 ranks
    (parallel.dp_shard=8, one replica): a world of any other size cannot run it, whatever the
    batch. Returns the preset's name."""

    def build() -> JobConfig:
        config = PRESETS["tiny"]()
        config.parallel.dp_shard = 8
        return config

    monkeypatch.setitem(PRESETS, EIGHT_RANK_PRESET, build)
    yield EIGHT_RANK_PRESET
    preset_config.cache_clear()
