"""The 8b memory plan in benchmarks/README.md is the arithmetic benchmarks/memory_plan.py does
on the preset as shipped, and the preset's checkpointing choice fits in it."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from training.model import count_params
from training.presets import build_config

REPO = Path(__file__).resolve().parents[2]
README = REPO / "benchmarks" / "README.md"


@pytest.fixture(scope="module")
def plan() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "memory_plan", REPO / "benchmarks" / "memory_plan.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["memory_plan"] = module
    spec.loader.exec_module(module)
    return module


def _readme_blocks() -> list[tuple[str, int, list[str], list[str], str]]:
    """(preset, gpus, choices, --set overrides, table) of every plan the README holds."""
    return [
        (m[1], int(m[2]), m[3].split(","), m[4].split(), m[5])
        for m in re.finditer(
            r"<!-- memory-plan (\S+) (\d+) (\S+)((?: \S+=\S+)*) -->\n(.*?)\n<!-- /memory-plan -->",
            README.read_text(),
            flags=re.DOTALL,
        )
    ]


def _readme_block() -> str:
    """The plan for the 8b preset as shipped on 8 GPUs."""
    (block,) = [b for p, g, _, sets, b in _readme_blocks() if (p, g, sets) == ("8b", 8, [])]
    return block


def test_readme_tables_are_what_the_presets_give(plan: ModuleType) -> None:
    blocks = _readme_blocks()
    # The 8-GPU plan, and the one-GPU check of 8b's parts (fewer layers).
    assert [(p, g, sets) for p, g, _, sets, _ in blocks] == [
        ("8b", 8, []),
        ("8b", 1, ["model.n_layers=4"]),
    ]
    for preset, gpus, choices, sets, block in blocks:
        command = f"python benchmarks/memory_plan.py --preset {preset} --gpus {gpus}"
        command += "".join(f" --set {s}" for s in sets) + f" --choices {','.join(choices)}"
        assert block == plan.table(build_config(preset, sets), gpus, choices), (
            f"benchmarks/README.md is stale: paste the output of {command}"
        )


def test_parameter_count_and_sharded_bytes(plan: ModuleType) -> None:
    cfg = build_config("8b")
    params = count_params(cfg.model)
    assert params == 8_030_261_248  # Llama-3-8B
    block = _readme_block()
    assert f"P = {params:,} parameters" in block
    rows = dict(plan.rows(cfg, 8, 0))
    sharded = sum(b for item, b in rows.items() if "sharded" in item)
    assert sharded == 16 * params / 8  # fp32 params + grads + two AdamW moments, over 8 GPUs
    assert f"| fp32 parameters, sharded: 4P / gpus | {4 * params / 8 / 1e9:.2f} |" in block
    assert f"| AdamW moments, 2 x fp32, sharded: 8P / gpus | {8 * params / 8 / 1e9:.2f} |" in block
    # The root group: token embeddings + output projection + final norm.
    m = cfg.model
    assert plan.shape_of(cfg, 8).root_params == 2 * m.vocab_size * m.dim + m.dim


def test_the_presets_choice_fits_and_the_next_one_does_not(plan: ModuleType) -> None:
    cfg = build_config("8b")
    choice = cfg.parallel.activation_checkpoint
    shipped, without = plan.totals(cfg, 8, [choice, "none"])
    # At least 20 GB of the 85 left for context, NCCL, compile and fragmentation.
    assert shipped / 1e9 <= plan.H100_GB - 20
    assert without / 1e9 > plan.H100_GB - 10
    # The chunked loss is part of the plan.
    assert cfg.training.loss_chunk_tokens > 0 and "chunked loss" in _readme_block()


def test_a_pass_holds_the_trainers_micro_batch(plan: ModuleType) -> None:
    # No micro-batch set: one pass of the rank's whole share, as the trainer splits it.
    cfg = build_config("1b", ["training.micro_batch_size=0"])
    sequences, passes = cfg.micro_batches(8)
    assert passes == 1
    assert plan.shape_of(cfg, 8).tokens == sequences * cfg.training.seq_len
