from __future__ import annotations

import pytest

from training.config import PRESETS, ConfigError, apply_override, build_config
from training.model import count_params


def test_presets_exist_and_validate() -> None:
    assert set(PRESETS) >= {"tiny", "1b", "8b"}
    for name in PRESETS:
        cfg = build_config(name)
        assert cfg.preset == name


def test_preset_sizes() -> None:
    tiny = count_params(build_config("tiny").model)
    assert 100_000 < tiny < 1_000_000  # "a few hundred K" keeps CPU tests fast
    assert 1.2e9 < count_params(build_config("1b").model) < 1.6e9
    assert 7.5e9 < count_params(build_config("8b").model) < 8.5e9
    # GPU presets use grouped-query attention, the tiny one too.
    assert build_config("8b").model.n_kv_heads == 8
    assert build_config("tiny").model.n_kv_heads == 2


def test_overrides_are_typed() -> None:
    cfg = build_config(
        "tiny",
        [
            "training.steps=7",
            "optim.lr=0.5",
            "parallel.activation_checkpoint=true",
            "model.n_kv_heads=none",
            "checkpoint.fast_dir=/x/y",
            "parallel.compile=0",
        ],
    )
    assert cfg.training.steps == 7 and isinstance(cfg.training.steps, int)
    assert cfg.optim.lr == 0.5
    assert cfg.parallel.activation_checkpoint is True
    assert cfg.parallel.compile is False
    assert cfg.model.n_kv_heads is None
    assert cfg.checkpoint.fast_dir == "/x/y"


def test_overrides_do_not_leak_between_builds() -> None:
    build_config("tiny", ["training.steps=3"])
    assert build_config("tiny").training.steps == 40


@pytest.mark.parametrize(
    "override, message",
    [
        ("training.stepz=3", "unknown config key"),
        ("nope.steps=3", "unknown config section"),
        ("preset.x=1", "unknown config section"),
        ("training.steps=abc", "bad value"),
        ("parallel.compile=maybe", "bad value"),
        ("training.steps", "section.field=value"),
        ("steps=3", "section.field"),
        ("checkpoint.async_mode=magic", "async_mode"),
        ("model.n_heads=3", "divisible"),
    ],
)
def test_bad_overrides_raise(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config("tiny", [override])


def test_unknown_preset() -> None:
    with pytest.raises(ConfigError, match="unknown preset"):
        build_config("70b")


def test_world_checks() -> None:
    cfg = build_config("tiny")
    cfg.check_world(2)
    with pytest.raises(ConfigError, match="divisible"):
        cfg.check_world(3)
    apply_override(cfg, "parallel.dp_replicate=2")
    cfg.check_world(2)
    apply_override(cfg, "parallel.dp_shard=2")
    with pytest.raises(ConfigError, match="does not match"):
        cfg.check_world(2)
