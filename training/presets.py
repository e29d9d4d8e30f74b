"""Named presets of the job config (``--preset``) and build_config, which applies a job's
``--set`` overrides to one."""

from __future__ import annotations

import copy
import typing

from training.checkpoint.config import AUTO_STORAGE, DURABLE, FAST, CheckpointConfig, TierConfig
from training.config import (
    DataConfig,
    FaultConfig,
    JobConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    TrainingConfig,
    apply_override,
)
from training.config_parsing import ConfigError


def _tiny() -> JobConfig:
    # ~230K parameters: fast enough for multi-process CPU tests. The default checkpoint tiers.
    return JobConfig(
        preset="tiny",
        model=ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=1024),
        training=TrainingConfig(steps=40, global_batch_size=8, seq_len=64),
        optim=OptimConfig(lr=3e-3, warmup_steps=5),
        fault=FaultConfig(watchdog_s=60.0, sigterm_grace_s=30.0),
    )


# Tokens per loss chunk on the GPU presets: fp32 logits of 4096 x 128256 are 2.1 GB per chunk
# (4.2 GB at the peak, with logsumexp's temporary), against 8.4 GB per 4 x 4096-token pass (and
# as much again for their copies) unchunked.
GPU_LOSS_CHUNK_TOKENS = 4096


def _llama_gpu(
    preset: str,
    model: ModelConfig,
    *,
    seq_len: int,
    batch: int,
    micro_batch: int,
    activation_checkpoint: str,
) -> JobConfig:
    return JobConfig(
        preset=preset,
        model=model,
        data=DataConfig(source="memmap", path="/fsx/data/tokens", dtype="uint32"),
        training=TrainingConfig(
            steps=100_000,
            global_batch_size=batch,
            seq_len=seq_len,
            micro_batch_size=micro_batch,
            loss_chunk_tokens=GPU_LOSS_CHUNK_TOKENS,
        ),
        optim=OptimConfig(lr=3e-4, warmup_steps=2000, weight_decay=0.1),
        parallel=ParallelConfig(activation_checkpoint=activation_checkpoint, compile=True),
        checkpoint=CheckpointConfig(
            tiers=(
                TierConfig(
                    FAST,
                    dir="/dev/shm/hptrain-ckpt",  # noqa: S108 - node-local memory tier by design
                    interval=50,
                    keep=2,
                    storage=AUTO_STORAGE,
                    per_node=True,
                ),
                # <out>/ckpt/durable: the run directory is on FSx in a job, and a shared root
                # would mix every run's checkpoints (rendered jobs name the team's directory).
                TierConfig(DURABLE, interval=500, keep=3),
            )
        ),
        fault=FaultConfig(watchdog_s=900.0, sigterm_grace_s=120.0),
    )


def _1b() -> JobConfig:
    # Llama-3.2-1B shape; untied input/output embeddings give ~1.5B parameters.
    m = ModelConfig(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_hidden=8192,
        rope_theta=500000.0,
    )
    # One H100 80GB, torch 2.11, plain loss: activation checkpointing off with 4 sequences per
    # pass was the fastest measured, MFU 0.516 with the embedding counted, 0.439 by the
    # standard count, at 68.7 GB (all layers checkpointed, 2 per pass: 0.380 / 0.324). The
    # chunked loss added here only lowers memory; this combination remains to be re-measured
    # on an H100 (benchmarks/README.md has the commands).
    return _llama_gpu("1b", m, seq_len=4096, batch=256, micro_batch=4, activation_checkpoint="none")


def _8b() -> JobConfig:
    # Llama-3-8B shape (~8.0B parameters).
    m = ModelConfig(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_hidden=14336,
        rope_theta=500000.0,
    )
    # Per-GPU memory plan for 8 x H100 80GB (benchmarks/README.md, an estimate that errs high):
    # every other layer checkpointed is 57 GB of 85, none 80 GB. Remains to be measured on
    # 8 H100s; parallel.activation_checkpoint=all (33 GB) is the fallback.
    return _llama_gpu(
        "8b", m, seq_len=8192, batch=512, micro_batch=1, activation_checkpoint="every:2"
    )


PRESETS: dict[str, typing.Callable[[], JobConfig]] = {"tiny": _tiny, "1b": _1b, "8b": _8b}


def preset_global_batch(preset: str) -> int:
    """The global batch `preset` declares, before a job sets its own (`batch_for_world`)."""
    return PRESETS[preset]().training.global_batch_size


def build_config(preset: str, overrides: list[str] | None = None) -> JobConfig:
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    cfg = copy.deepcopy(PRESETS[preset]())
    for assignment in overrides or []:
        apply_override(cfg, assignment)
    cfg.validate()
    return cfg
