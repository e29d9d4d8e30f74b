"""JobSpec validation: every rule rejects what it should, names its field, fits on one line."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hpctl.job.plan import JobPlan, default_tier_dir
from hpctl.job.platform import PLATFORM_FIELDS
from hpctl.job.spec import JobSpec
from tests.job.conftest import spec_fields
from training.checkpoint.config import DURABLE, FAST, TierConfig

DIGEST = "sha256:" + "ab" * 32

# (field, bad value, text the message must contain)
INVALID: list[tuple[str, Any, str]] = [
    ("name", "Llama", "job name"),
    ("name", "8b-run", "starting with a letter"),
    ("name", "run-", "job name"),
    ("name", "r" * 64, "1-63"),
    ("team", "Research", "team"),
    ("team", "r" * 41, "1-40"),
    ("team", "hyperpod-ns-research", "'research'"),
    ("priority", "training-priority", "'training'"),
    ("priority", "Training", "priority class"),
    ("priority", "p" * 55, "1-54"),
    ("image", "hptrain", "not pinned"),
    ("image", "hptrain:latest", "not pinned"),
    ("image", "registry.example.com:5000/team/hptrain", "not pinned"),
    ("image", "HPTrain:1.0", "not a valid image reference"),
    ("image", "hptrain@sha256:abc", "not a valid image reference"),
    ("instance_type", "ml.p9.huge", "known types"),
    ("instance_type", "p5.48xlarge", "known types"),
    ("instance_type", "ml.m5.xlarge", "no accelerators"),
    ("instance_type", "ml.c5n.18xlarge", "no accelerators"),
    ("instance_group", "-gpu", "instance group"),
    ("instance_group", "gpu_p5", "instance group"),
    ("instance_group", "g" * 64, "instance group"),
    ("nodes", 0, "greater than or equal to 1"),
    ("spares", -1, "greater than or equal to 0"),
    ("steps", 0, "greater than or equal to 1"),
    ("preset", "8B", "unknown preset"),
    ("preset", "", "unknown preset"),
    ("preset", "70b", "use one of tiny, 1b, 8b"),
    ("fsx_claim", "FSx", "PersistentVolumeClaim"),
    ("fsx_claim", "fsx_claim", "PersistentVolumeClaim"),
    ("service_account", "Training", "service account"),
    ("service_account", "", "service account"),
    ("checkpoint_dirs", {"fast": "/tmp/ckpt"}, "fast: '/tmp/ckpt' is not on a mounted volume"),
    ("checkpoint_dirs", {"fast": "checkpoints"}, "mounted volume"),
    ("checkpoint_dirs", {"fast": "/dev/shm"}, "mounted volume"),
    ("checkpoint_dirs", {"fast": "/fsx/../etc"}, "mounted volume"),
    ("checkpoint_dirs", {"fast": "/dev/shmem/ckpt"}, "mounted volume"),
    ("checkpoint_dirs", {"durable": "/dev/shm/ckpt"}, "durable: '/dev/shm/ckpt' does not survive"),
    ("checkpoint_dirs", {"durable": "/fsxdata/ckpt"}, "node replacement"),
    ("checkpoint_dirs", {"durable": "s3://bucket/ckpt"}, "node replacement"),
    ("checkpoint_dirs", {"nvme": "/fsx/x"}, "unknown checkpoint tier 'nvme'; preset '8b' has fast"),
    ("run_dir", "/tmp/run", "shared by every node"),
    ("run_dir", "/dev/shm/run", "shared by every node"),
    # Jobs write only inside their own team's directory (the only one its group owns).
    ("run_dir", "/fsx/runs/x", "outside team research's directory"),
    ("run_dir", "/fsx/teams/sandbox/runs/x", "use a path under /fsx/teams/research/"),
    ("run_dir", "/fsx/teams/research", "outside team research's directory"),
    (
        "checkpoint_dirs",
        {"durable": "/fsx/checkpoints/x"},
        "durable: '/fsx/checkpoints/x' is outside",
    ),
    (
        "checkpoint_dirs",
        {"fast": "/fsx/teams/sandbox/x"},
        "fast: '/fsx/teams/sandbox/x' is outside",
    ),
    ("checkpoint_intervals", {"fast": -1}, "greater than or equal to 0"),
    ("checkpoint_intervals", {"fast": "often"}, "whole number of steps or 'auto'"),
    ("checkpoint_intervals", {"durable": 0}, "durable: 0 would disable the most durable tier"),
    ("checkpoint_intervals", {"durable": 10}, "more frequent than the fast tier (every 50 steps)"),
    ("checkpoint_intervals", {"Fast": 5}, "unknown checkpoint tier 'Fast'; preset '8b' has fast"),
    ("start_deadline_s", 10, "greater than or equal to 30"),
    ("hang_timeout_s", 30, "greater than or equal to 60"),
    ("hang_timeout_s", 900, "watchdog (900 s)"),
    ("min_tokens_per_s", 0, "greater than or equal to 1"),
    ("slow_data_points", 0, "greater than or equal to 1"),
    ("max_retries", -1, "greater than or equal to 0"),
    ("restarts_before_full_restart", -1, "greater than or equal to 0"),
    ("restart_eval_period_s", 10, "greater than or equal to 60"),
    ("max_full_restarts", -1, "greater than or equal to 0"),
    ("clean_pod_policy", "Running", "'All', 'OnlyComplete' or 'None'"),
    ("shutdown_timeout_s", 0, "greater than or equal to 1"),
    ("shutdown_timeout_s", 120, "SIGTERM save grace (120 s)"),
    ("shutdown_timeout_s", 3601, "less than or equal to 3600"),
    ("taints", [{"key": "bad key", "effect": "NoSchedule"}], "taint key"),
    ("taints", [{"key": "dedicated", "value": "a b", "effect": "NoSchedule"}], "taint value"),
    ("taints", [{"key": "dedicated", "effect": "NoWay"}], "NoSchedule"),
]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    INVALID,
    ids=[f"{field}={value!r}"[:60] for field, value, _ in INVALID],
)
def test_invalid_value_is_rejected_with_one_line_naming_the_field(
    spec_factory, field: str, value: Any, expected: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        spec_factory(**{field: value})
    errors = caught.value.errors(include_url=False)
    assert len(errors) == 1, errors
    # The platform's facts are checked where they are held, under `platform`.
    where = ("platform", field) if field in PLATFORM_FIELDS else (field,)
    assert errors[0]["loc"][: len(where)] == where
    assert expected in errors[0]["msg"]
    assert "\n" not in errors[0]["msg"]


@pytest.mark.parametrize(
    "missing", ["name", "team", "priority", "image", "instance_type", "instance_group"]
)
def test_required_fields(required_fields, missing: str) -> None:
    del required_fields[missing]
    with pytest.raises(ValidationError) as caught:
        JobSpec(**spec_fields(**required_fields))
    where = ("platform", missing) if missing in PLATFORM_FIELDS else (missing,)
    assert [(e["loc"], e["type"]) for e in caught.value.errors()] == [(where, "missing")]


def test_unknown_fields_are_forbidden(required_fields) -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec(**spec_fields(**required_fields, gpus=8))
    assert [(e["loc"], e["type"]) for e in caught.value.errors()] == [
        (("gpus",), "extra_forbidden")
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image", "hptrain:1.4.0"),
        ("image", f"hptrain@{DIGEST}"),
        ("image", f"hptrain:latest@{DIGEST}"),
        ("image", "registry.example.com:5000/team/hptrain:2025.06.1"),
        ("instance_type", "ml.g5.12xlarge"),
        ("instance_type", "ml.trn1.32xlarge"),
        ("instance_group", "GPU-p5--a"),
        ("service_account", "team-a.training"),
        ("checkpoint_dirs", {"fast": "/fsx/teams/research/fast/llama"}),
        ("checkpoint_dirs", {"durable": "/fsx/teams/research/ckpt/llama"}),
        ("run_dir", "/fsx/teams/research/runs/x"),
        ("checkpoint_intervals", {"durable": 50}),
        ("checkpoint_intervals", {"fast": 0}),
        ("nodes", 64),
        ("preset", "tiny"),
        ("team", "r" * 40),
        ("name", "l" * 63),
    ],
)
def test_valid_values_are_accepted(spec_factory, field: str, value: Any) -> None:
    spec = spec_factory(**{field: value})
    assert getattr(spec.platform if field in PLATFORM_FIELDS else spec, field) == value


def test_defaults(spec_factory) -> None:
    spec = spec_factory()
    assert (spec.nodes, spec.spares, spec.preset, spec.platform.fsx_claim) == (
        1,
        0,
        "8b",
        "fsx-team",
    )
    assert JobPlan(spec).tier_dir("fast") == "/dev/shm/hptrain-ckpt"
    assert JobPlan(spec).tier_dir("durable") == "/fsx/teams/research/checkpoints/llama-8b"
    assert JobPlan(spec).out_dir == "/fsx/teams/research/runs/llama-8b"
    assert spec.min_tokens_per_s is None
    assert spec.platform.tiered_storage is False
    assert (JobPlan(spec).tier_storage("fast"), JobPlan(spec).managed_storage) == ("local", False)
    assert spec.platform.taints == ()
    assert spec.platform.service_account == "training"
    assert (spec.hang_timeout_s, spec.shutdown_timeout_s) == (1200, 180)


def _intervals(spec: JobSpec) -> tuple[int, ...]:
    return tuple(
        JobPlan(spec).tier_interval(tier.name)
        for tier in JobPlan(spec).trainer_config.checkpoint.tiers
    )


def test_unset_steps_and_intervals_come_from_the_preset(spec_factory) -> None:
    big, tiny = spec_factory(), spec_factory(preset="tiny", hang_timeout_s=120)
    assert (JobPlan(big).total_steps, *_intervals(big)) == (100_000, 50, 500)
    assert (JobPlan(tiny).total_steps, *_intervals(tiny)) == (40, 5, 20)
    explicit = spec_factory(steps=7, checkpoint_intervals={"fast": 0, "durable": 3})
    assert (JobPlan(explicit).total_steps, *_intervals(explicit)) == (7, 0, 3)


def test_interval_order_uses_the_preset_when_one_side_is_unset(spec_factory) -> None:
    # 8b saves the fast tier every 50 steps, so a durable tier every 20 is out of order ...
    with pytest.raises(ValidationError, match="checkpoint_intervals"):
        spec_factory(checkpoint_intervals={"durable": 20})
    # ... unless the fast tier is disabled.
    spec = spec_factory(checkpoint_intervals={"durable": 20, "fast": 0})
    assert JobPlan(spec).tier_interval("durable") == 20


@pytest.mark.parametrize(
    ("intervals", "expected"),
    [
        # The preset's own: fast 5, nearline 10, durable 20.
        ({}, None),
        ({"nearline": 3}, "nearline: 3 is more frequent than the fast tier (every 5 steps)"),
        ({"nearline": 30}, "durable: 20 is more frequent than the nearline tier (every 30 steps)"),
        # A disabled tier drops out of the order: each tier is compared with the last enabled.
        ({"nearline": 3, "fast": 0}, None),
        ({"nearline": 0, "durable": 4}, "durable: 4 is more frequent than the fast tier"),
        ({"nearline": 0, "durable": 5}, None),
        ({"fast": 0, "nearline": 0, "durable": 1}, None),
    ],
)
def test_each_enabled_tier_saves_no_more_often_than_the_one_before(
    spec_factory, three_tier_preset: str, intervals: dict[str, int], expected: str | None
) -> None:
    fields = {"preset": three_tier_preset, "hang_timeout_s": 120}
    if expected is None:
        spec = spec_factory(**fields, checkpoint_intervals=intervals)
        assert spec.checkpoint_intervals == intervals
        return
    with pytest.raises(ValidationError) as caught:
        spec_factory(**fields, checkpoint_intervals=intervals)
    (error,) = caught.value.errors(include_url=False)
    assert error["loc"] == ("checkpoint_intervals",)
    assert expected in error["msg"]


@pytest.mark.parametrize("field", ["checkpoint_dirs", "checkpoint_intervals"])
def test_unknown_tier_names_are_one_error_naming_the_presets_tiers(
    spec_factory, three_tier_preset: str, field: str
) -> None:
    value = "/fsx/x" if field == "checkpoint_dirs" else 10
    with pytest.raises(ValidationError) as caught:
        spec_factory(
            preset=three_tier_preset, hang_timeout_s=120, **{field: {"nvme": value, "s3": value}}
        )
    (error,) = caught.value.errors(include_url=False)
    assert error["loc"] == (field,)
    assert error["msg"] == (
        "Value error, unknown checkpoint tier 'nvme', 's3'; preset "
        f"'{three_tier_preset}' has fast, nearline, durable"
    )


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        # A per-node tier: the preset's own directory in pod memory, else one per tier.
        (TierConfig(FAST, dir="/dev/shm/hptrain-ckpt", per_node=True), "/dev/shm/hptrain-ckpt"),
        (TierConfig(FAST, dir="/fsx/x", per_node=True), "/dev/shm/hptrain-ckpt-fast"),
        (TierConfig(FAST, per_node=True), "/dev/shm/hptrain-ckpt-fast"),
        # The durable tier in the team's checkpoints: a resubmitted job finds its checkpoints.
        (TierConfig(DURABLE), "/fsx/teams/t/checkpoints/run-1"),
        # Any other tier: beside them, never inside another tier's root.
        (TierConfig("nvme", per_node=True), "/dev/shm/hptrain-ckpt-nvme"),
        (TierConfig("nearline"), "/fsx/teams/t/checkpoints/run-1-nearline"),
        (TierConfig(FAST), "/fsx/teams/t/checkpoints/run-1-fast"),
        (TierConfig(DURABLE, per_node=True), "/dev/shm/hptrain-ckpt-durable"),
    ],
)
def test_default_tier_dirs(tier: TierConfig, expected: str) -> None:
    assert default_tier_dir(tier, "t", "run-1") == expected


def test_a_tier_named_in_checkpoint_dirs_uses_that_directory(spec_factory) -> None:
    spec = spec_factory(checkpoint_dirs={"durable": "/fsx/teams/research/ckpt/x"})
    assert (JobPlan(spec).tier_dir("fast"), JobPlan(spec).tier_dir("durable")) == (
        "/dev/shm/hptrain-ckpt",
        "/fsx/teams/research/ckpt/x",
    )


@pytest.mark.parametrize(("tiered_storage", "storage"), [(False, "local"), (True, "managed")])
def test_auto_storage_follows_the_clusters_tiered_storage(
    spec_factory, tiered_storage: bool, storage: str
) -> None:
    spec = spec_factory(tiered_storage=tiered_storage)
    assert (JobPlan(spec).tier_storage("fast"), JobPlan(spec).tier_storage("durable")) == (
        storage,
        "local",
    )
    assert JobPlan(spec).managed_storage is tiered_storage


@pytest.mark.parametrize(
    ("instance_type", "nodes", "world", "batch"),
    [
        # 8b's 512 splits over 4 x 4 GPUs as it is; 3 x 4 = 12 ranks run 43 sequences each
        # (516, nearer than 504); 3 x 8 = 24 ranks run 21 (504, nearer than 528).
        ("ml.g5.12xlarge", 4, 16, 512),
        ("ml.g5.12xlarge", 3, 12, 516),
        ("ml.p5.48xlarge", 3, 24, 504),
    ],
)
def test_the_batch_follows_the_world_of_the_instance_type(
    spec_factory, instance_type: str, nodes: int, world: int, batch: int
) -> None:
    spec = spec_factory(instance_type=instance_type, nodes=nodes)
    assert (JobPlan(spec).world_size, JobPlan(spec).global_batch_size) == (world, batch)


def test_a_world_the_presets_sharding_cannot_split_is_one_line(
    spec_factory, eight_rank_preset: str
) -> None:
    assert JobPlan(spec_factory(preset=eight_rank_preset, nodes=1)).world_size == 8
    with pytest.raises(ValidationError) as caught:
        spec_factory(preset=eight_rank_preset, nodes=2)
    (error,) = caught.value.errors()
    assert error["loc"] == ("nodes",)
    assert error["msg"] == (
        f"Value error, 2 node(s) x 8 ranks do not fit preset {eight_rank_preset!r} "
        "(parallel.dp_replicate=1 x dp_shard=8 does not match world size 16); pick a node "
        "count its parallel settings split"
    )


def test_numbers_given_as_text_are_converted(spec_factory) -> None:
    # The CLI passes option values through unchanged; the model converts them.
    spec = spec_factory(nodes="4", spares="1", steps="20")
    assert (spec.nodes, spec.spares, spec.steps) == (4, 1, 20)


def test_spec_is_immutable(spec_factory) -> None:
    spec = spec_factory()
    with pytest.raises(ValidationError):
        spec.nodes = 2  # type: ignore[misc]
