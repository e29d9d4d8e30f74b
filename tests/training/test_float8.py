"""training.float8: the configuration, the one-line refusal where no GPU can run FP8, and the
module swap (which linears become torchao's Float8Linear), on CPU: on the meta device at the
presets' shapes, and emulated (FP8 casts, high-precision matmuls) for a training step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention

from training import float8
from training.config import ModelConfig
from training.config_parsing import ConfigError
from training.model import Transformer
from training.parallel import apply_parallelism, build_mesh
from training.presets import build_config

pytest.importorskip("torchao.float8")

REPO = Path(__file__).resolve().parents[2]
CPU_REFUSAL = (
    "training.float8=true needs a GPU of compute capability 8.9 or later (H100, H200); "
    "this rank runs on cpu, not a CUDA GPU; set training.float8=false"
)


def test_off_by_default_and_on_with_an_override() -> None:
    for preset in ("tiny", "1b", "8b"):
        assert build_config(preset).training.float8 is False
    assert build_config("8b", ["training.float8=true"]).training.float8 is True


def test_tensor_parallelism_with_float8_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        build_config("8b", ["training.float8=true", "parallel.tp=8"])
    assert str(error.value) == (
        "training.float8=true needs parallel.tp=1 (got 8): the tensor-parallel plan has no "
        "FP8 layouts; set parallel.tp=1 or training.float8=false"
    )


def test_a_cpu_is_refused_in_one_line_naming_the_field() -> None:
    with pytest.raises(ConfigError) as error:
        float8.require_support(torch.device("cpu"))
    assert str(error.value) == CPU_REFUSAL


def test_a_gpu_older_than_ada_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _device: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _device: "NVIDIA A100-SXM4-80GB")
    assert float8.unsupported_reason(torch.device("cuda", 0)) == (
        "this rank's GPU, NVIDIA A100-SXM4-80GB, has compute capability 8.0"
    )
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _device: (9, 0))
    assert float8.unsupported_reason(torch.device("cuda", 0)) is None


def test_the_trainer_refuses_it_on_cpu_with_one_error_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    result = subprocess.run(
        [
            *(sys.executable, "-m", "training.train", "--preset", "tiny", "--out", str(tmp_path)),
            *("--set", "training.float8=true", "--set", "training.steps=2"),
        ],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == f"error: rank 0: {CPU_REFUSAL}"


def test_apply_parallelism_refuses_before_changing_the_model(world_of_one: None) -> None:
    cfg = build_config("tiny", ["training.float8=true"])
    with torch.device("meta"):
        model = Transformer(cfg.model, max_seq_len=cfg.training.seq_len)
    device = torch.device("cpu")
    with pytest.raises(ConfigError, match=r"training\.float8=true needs a GPU"):
        apply_parallelism(model, cfg, build_mesh(cfg, 1, device), device)
    assert not any(type(m).__name__ == "Float8Linear" for m in model.modules())


def _converted(preset: str) -> tuple[Transformer, list[str]]:
    """The preset's model (two layers) on the meta device, converted."""
    cfg = build_config(preset, ["model.n_layers=2"])
    with torch.device("meta"):
        model = Transformer(cfg.model, max_seq_len=cfg.training.seq_len)
    names_before = [name for name, _ in model.named_parameters()]
    chosen = float8.convert(model)
    assert [name for name, _ in model.named_parameters()] == names_before  # checkpoints agree
    swapped = [n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"]
    assert swapped == chosen
    return model, chosen


@pytest.mark.parametrize("preset", ["8b", "1b"])
def test_the_large_decoder_linears_are_converted_the_rest_are_not(preset: str) -> None:
    model, chosen = _converted(preset)
    per_layer = ["attention.wq", "attention.wo", "feed_forward.w1", "feed_forward.w2"]
    per_layer.append("feed_forward.w3")
    assert sorted(chosen) == sorted(f"layers.{i}.{name}" for i in range(2) for name in per_layer)
    # Key/value projections (4096 -> 1024 on 8b, 2048 -> 512 on 1b) are too small to gain;
    # the output projection feeds the loss.
    for name in ("layers.0.attention.wk", "layers.0.attention.wv", "output"):
        assert type(model.get_submodule(name)) is torch.nn.Linear, name


def test_dimensions_fp8_cannot_multiply_are_left_alone() -> None:
    odd = torch.nn.Linear(4104, 2050, bias=False, device="meta")  # 2050 % 16 != 0
    assert not float8.converts(odd, "layers.0.feed_forward.w1")
    wide = torch.nn.Linear(4096, 2048, bias=False, device="meta")
    assert float8.converts(wide, "layers.0.feed_forward.w1")
    assert not float8.converts(wide, "output")


def test_an_emulated_fp8_step_trains_close_to_full_precision() -> None:
    # Emulation: the FP8 casts and scales of a real run, the matmuls in fp32 (any device).
    cfg = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, ffn_hidden=2048)
    torch.manual_seed(0)
    reference = Transformer(cfg, max_seq_len=32)
    reference.init_weights(0)
    model = Transformer(cfg, max_seq_len=32)
    model.load_state_dict(reference.state_dict())
    chosen = float8.convert(model, emulate=True)
    assert chosen == [f"layers.{i}.feed_forward.{w}" for i in range(2) for w in ("w1", "w3")]
    tokens = torch.randint(0, cfg.vocab_size, (4, 32))
    losses = [m(tokens, tokens) for m in (reference, model)]
    for loss in losses:
        loss.backward()
    assert abs(losses[1].item() - losses[0].item()) < 0.01 * losses[0].item()
    # Gradients reach every converted weight and agree in direction with full precision.
    got_grads = {n: p.grad for n, p in model.named_parameters()}
    want_grads = {n: p.grad for n, p in reference.named_parameters()}
    for name in chosen:
        got, want = got_grads[f"{name}.weight"], want_grads[f"{name}.weight"]
        assert got is not None and want is not None
        assert F.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.99, name
