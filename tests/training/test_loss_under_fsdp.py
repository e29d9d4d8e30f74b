"""The loss as the trainer runs it: inside the FSDP2-wrapped model's forward (chunked or
plain), over one pass or several accumulated passes per step (world of one, gloo)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from tests.training import appstate
from training.parallel import configure_determinism
from training.trainer import Trainer


def _grads(
    app: appstate.AppState, passes: int, chunk: int
) -> tuple[float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    inputs, labels = app.loader.next_batch()
    app.model.loss_chunk_tokens = chunk
    app.optimizer.zero_grad(set_to_none=True)
    loss = Trainer.forward_backward(
        SimpleNamespace(model=app.model, micro_passes=passes, mesh=app.mesh),  # type: ignore[arg-type]
        inputs,
        labels,
    )
    grads = {n: p.grad.full_tensor().clone() for n, p in app.model.named_parameters()}
    return float(loss), grads


@pytest.mark.parametrize("passes, chunk", [(1, 40), (4, 0), (2, 64), (8, 7)])
def test_chunked_loss_and_accumulated_passes_give_the_plain_gradients(
    world_of_one: None, passes: int, chunk: int
) -> None:
    # tiny with dim 32, vocab 128, batch 8 x 64 tokens.
    app = appstate.build()
    state = app.loader.state_dict()
    want_loss, want = _grads(app, passes=1, chunk=0)
    app.loader.load_state_dict(state)  # the same batch again
    loss, grads = _grads(app, passes=passes, chunk=chunk)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for name, g in want.items():
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-6, msg=name)


def test_bf16_blocks_get_bf16_activations_and_fp32_rope_tables(
    world_of_one: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The GPU preset's mixed precision, forced on CPU: parameters and activations in bf16,
    # the RoPE tables left in fp32 for the rotation (FSDP would otherwise cast block inputs).
    from training import model as model_module

    seen: list[tuple[torch.dtype, torch.dtype]] = []
    rope = model_module.apply_rope

    def recording_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        seen.append((x.dtype, cos.dtype))
        return rope(x, cos, sin)

    monkeypatch.setattr(model_module, "apply_rope", recording_rope)
    app = appstate.build(["parallel.mixed_precision=bf16", "parallel.compile=false"])
    inputs, labels = app.loader.next_batch()
    loss = app.model(inputs, labels)
    assert loss.dtype == torch.float32
    assert seen and set(seen) == {(torch.bfloat16, torch.float32)}


def _determinism_switches() -> list[bool]:
    cuda = torch.backends.cuda
    return [
        cuda.flash_sdp_enabled(),
        cuda.mem_efficient_sdp_enabled(),
        cuda.cudnn_sdp_enabled(),
        cuda.math_sdp_enabled(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
    ]


def _set_determinism_switches(switches: list[bool]) -> None:
    flash, mem_efficient, cudnn_sdp, math, deterministic, warn_only, benchmark = switches
    cuda = torch.backends.cuda
    cuda.enable_flash_sdp(flash)
    cuda.enable_mem_efficient_sdp(mem_efficient)
    cuda.enable_cudnn_sdp(cudnn_sdp)
    cuda.enable_math_sdp(math)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark = benchmark


def test_deterministic_runs_leave_attention_the_math_kernel_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The switches are process-wide: every one starts at its fast setting and is put back.
    saved = _determinism_switches()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        _set_determinism_switches([True, True, True, True, False, False, True])
        configure_determinism(True)
        assert _determinism_switches() == [False, False, False, True, True, True, False]
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        _set_determinism_switches(saved)
