"""The loss as the trainer runs it: inside the FSDP2-wrapped model's forward (chunked or
plain), over one pass or several accumulated passes per step (world of one, gloo)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.training import appstate
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


def test_deterministic_runs_leave_attention_the_math_kernel_only() -> None:
    # In a child process: the switches are process-wide.
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import torch\n"
        "from training.parallel import configure_determinism\n"
        "configure_determinism(True)\n"
        "b = torch.backends.cuda\n"
        "print(b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.cudnn_sdp_enabled(),"
        " b.math_sdp_enabled(), torch.are_deterministic_algorithms_enabled())\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["False", "False", "False", "True", "True"]
