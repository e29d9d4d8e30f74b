from __future__ import annotations

import weakref

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.checkpoint import checkpoint

from training import model as model_module
from training.config import ModelConfig
from training.model import (
    IGNORE_INDEX,
    Transformer,
    apply_rope,
    chunked_cross_entropy,
    count_params,
    flops_per_token,
    rope_tables,
)
from training.parallel import apply_activation_checkpointing


def _model(seed: int = 0, kv: int | None = 2) -> Transformer:
    cfg = ModelConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=kv, vocab_size=50)
    with torch.device("meta"):
        m = Transformer(cfg, max_seq_len=16)
    m.to_empty(device="cpu")
    m.init_weights(seed)
    return m


def test_flops_per_token_leaves_out_the_embedding_lookup() -> None:
    # The 1b preset's shape (Llama-3.2-1B, untied): the count torchtitan uses for MFU.
    cfg = ModelConfig(
        dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128256, ffn_hidden=8192
    )
    params, embedding = 1_498_482_688, 128_256 * 2048
    assert count_params(cfg) == params
    attention = 12 * 16 * 2048 * 4096
    assert flops_per_token(cfg, 4096) == 6 * (params - embedding) + attention == 9_025_499_136
    with_embedding = flops_per_token(cfg, 4096, count_embedding=True)
    assert with_embedding == 6 * params + attention == 10_601_508_864


def test_forward_shapes_and_param_count() -> None:
    for kv in (None, 2, 1):
        m = _model(kv=kv)
        logits = m(torch.randint(0, 50, (3, 10)))
        assert logits.shape == (3, 10, 50)
        assert count_params(m.cfg) == sum(p.numel() for p in m.parameters())


def test_init_depends_only_on_seed() -> None:
    a, b, c = _model(1), _model(1), _model(2)
    for (na, pa), (_, pb), (_, pc) in zip(
        a.named_parameters(), b.named_parameters(), c.named_parameters(), strict=True
    ):
        assert torch.equal(pa, pb), na
        if not na.endswith("norm.weight"):
            assert not torch.equal(pa, pc), na


def test_causal() -> None:
    m = _model()
    x = torch.randint(0, 50, (1, 12))
    y = x.clone()
    y[0, 8:] = (y[0, 8:] + 1) % 50
    assert torch.allclose(m(x)[0, :8], m(y)[0, :8], atol=1e-6)
    assert not torch.allclose(m(x)[0, 8:], m(y)[0, 8:])


def test_rope_preserves_norm_and_is_relative() -> None:
    cos, sin = rope_tables(8, 16, 10000.0, torch.device("cpu"))
    q = torch.randn(1, 16, 1, 8)
    rq = apply_rope(q, cos, sin)
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    same = q[:, :1].expand(1, 16, 1, 8)
    rs = apply_rope(same, cos, sin)
    # <R(i)q, R(j)q> depends only on i - j.
    d1 = (rs[0, 3, 0] * rs[0, 5, 0]).sum()
    d2 = (rs[0, 10, 0] * rs[0, 12, 0]).sum()
    assert torch.allclose(d1, d2, atol=1e-5)


def test_activation_checkpoint_same_gradients() -> None:
    m = _model()
    x = torch.randint(0, 50, (2, 12))
    m(x).sum().backward()
    g1 = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    for block in m.blocks():
        block.activation_checkpoint = True
    m(x).sum().backward()
    for a, p in zip(g1, m.parameters(), strict=True):
        assert torch.allclose(a, p.grad, atol=1e-6)


# ---- chunked cross-entropy ---------------------------------------------------------------------


def _loss_inputs(
    n: int = 300, dim: int = 16, vocab: int = 97, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, dim, generator=gen, dtype=dtype).requires_grad_()
    weight = (torch.randn(vocab, dim, generator=gen, dtype=dtype) * 0.3).requires_grad_()
    labels = torch.randint(0, vocab, (n,), generator=gen)
    labels[::7] = IGNORE_INDEX  # ignored positions, as F.cross_entropy's default
    return hidden, weight, labels


@pytest.mark.parametrize("chunk", [1, 7, 64, 299, 300, 4096])
def test_chunked_loss_and_gradients_equal_the_plain_loss(chunk: int) -> None:
    hidden, weight, labels = _loss_inputs()
    plain = F.cross_entropy((hidden @ weight.t()).float(), labels)
    plain.backward()
    want = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    chunked = chunked_cross_entropy(hidden, weight, labels, chunk)
    (chunked * 3).backward()  # the incoming gradient scales both
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(hidden.grad, 3 * want[0], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(weight.grad, 3 * want[1], rtol=1e-4, atol=1e-7)


def test_chunked_loss_is_exact_in_float64() -> None:
    hidden, weight, labels = _loss_inputs(n=40, dim=4, vocab=11, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda h, w: chunked_cross_entropy(h, w, labels, 13), (hidden, weight)
    )


def test_chunked_loss_in_bf16_matches_the_plain_bf16_loss() -> None:
    # The GPU case: bf16 matmuls, fp32 softmax. Same arithmetic order as the plain loss.
    hidden, weight, labels = _loss_inputs(dtype=torch.bfloat16)
    plain = F.cross_entropy((hidden @ weight.t()).float(), labels)
    plain.backward()
    want = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    chunked = chunked_cross_entropy(hidden, weight, labels, 64)
    chunked.backward()
    assert chunked.dtype == torch.float32 and hidden.grad.dtype == torch.bfloat16
    torch.testing.assert_close(chunked, plain, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(hidden.grad, want[0], rtol=2e-2, atol=1e-4)
    torch.testing.assert_close(weight.grad, want[1], rtol=2e-2, atol=1e-4)


class _LiveBytes(TorchDispatchMode):
    """Bytes of CPU tensor storage created inside the mode and still alive: the peak, and the
    largest single storage. Every op output is seen (views share their base's storage)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.live = self.peak = self.largest = 0

    def _release(self, key: int) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            self.live -= self.size.pop(key)
            del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or not t.untyped_storage().data_ptr():
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            self.largest = max(self.largest, storage.nbytes())
            if key not in self.refs:
                self.refs[key], self.size[key] = 0, storage.nbytes()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            self.refs[key] += 1
            weakref.finalize(t, self._release, key)
        return out


def _loss_memory(loss_fn, n: int, dim: int, vocab: int) -> _LiveBytes:  # type: ignore[no-untyped-def]
    hidden, weight, labels = _loss_inputs(n=n, dim=dim, vocab=vocab)
    with _LiveBytes() as mem:
        loss = loss_fn(hidden, weight, labels)
        loss.backward()
        del loss
    return mem


def test_chunked_loss_peak_memory_is_one_chunk_of_logits() -> None:
    dim, vocab, chunk = 32, 4000, 128
    fp32 = 4

    def plain(h, w, y):  # type: ignore[no-untyped-def]
        return F.cross_entropy((h @ w.t()).float(), y)

    def chunked(h, w, y):  # type: ignore[no-untyped-def]
        return chunked_cross_entropy(h, w, y, chunk)

    for n in (512, 2048):  # four times the tokens: the peak must not follow
        logits_bytes = n * vocab * fp32
        base = plain_mem = _loss_memory(plain, n, dim, vocab)
        # The check can fail: the plain loss holds full-size logits (and copies) at once.
        assert base.largest >= logits_bytes and plain_mem.peak >= 2 * logits_bytes
        mem = _loss_memory(chunked, n, dim, vocab)
        # Nothing the size of the full logits ever exists: one chunk's fp32 logits at most ...
        assert mem.largest <= chunk * vocab * fp32
        # ... and the peak is a chunk's logits (and its gradient) plus the gradients of the
        # inputs: it grows with the tokens only by the (tokens x dim) gradient of `hidden`.
        bound = 2 * chunk * vocab * fp32 + 3 * vocab * dim * fp32 + 2 * n * dim * fp32
        assert mem.peak <= bound, (n, mem.peak, bound)


def test_chunked_loss_under_no_grad_computes_no_gradients() -> None:
    dim, vocab, chunk, n = 32, 4000, 128, 1024
    hidden, weight, labels = _loss_inputs(n=n, dim=dim, vocab=vocab)
    with _LiveBytes() as training:
        kept = chunked_cross_entropy(hidden, weight, labels, chunk)
    with torch.no_grad(), _LiveBytes() as evaluating:
        loss = chunked_cross_entropy(hidden, weight, labels, chunk)
    torch.testing.assert_close(loss, kept.detach())
    # Training computes the (vocab x dim) fp32 weight gradient and the (tokens x dim) hidden
    # gradient in forward; evaluation allocates neither.
    gradients = vocab * dim * 4 + n * dim * 4
    assert training.peak - evaluating.peak >= gradients, (training.peak, evaluating.peak)


def test_model_loss_with_chunks_equals_the_plain_loss() -> None:
    m = _model()
    x = torch.randint(0, 50, (3, 12))
    y = torch.randint(0, 50, (3, 12))
    plain = m(x, y)
    torch.testing.assert_close(plain, F.cross_entropy(m(x).flatten(0, 1), y.flatten()))
    plain.backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m.loss_chunk_tokens = 5  # 36 tokens: chunks of 5, the last one short
    chunked = m(x, y)
    chunked.backward()
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-6)
    for (name, p), g in zip(m.named_parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6, msg=name)


# ---- activation checkpointing per layer --------------------------------------------------------


@pytest.mark.parametrize(
    "spec, layers",
    [("none", []), ("all", [0, 1, 2, 3]), ("every:2", [0, 2]), ("first:3", [0, 1, 2])],
)
def test_selected_layers_recompute_and_results_equal_no_checkpointing(
    spec: str, layers: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = ModelConfig(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=50)
    with torch.device("meta"):
        m = Transformer(cfg, max_seq_len=16)
    m.to_empty(device="cpu")
    m.init_weights(0)
    x, y = torch.randint(0, 50, (2, 12)), torch.randint(0, 50, (2, 12))
    reference = m(x, y)
    reference.backward()
    want = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()

    assert apply_activation_checkpointing(m, spec) == layers
    assert [i for i, b in enumerate(m.blocks()) if b.activation_checkpoint] == layers
    # Which blocks really ran under torch.utils.checkpoint (their forward is recomputed).
    ran: list[int] = []
    index = {id(b): i for i, b in enumerate(m.blocks())}

    def counting_checkpoint(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        ran.append(index[id(fn.__self__)])
        return checkpoint(fn, *args, **kwargs)

    monkeypatch.setattr(model_module, "checkpoint", counting_checkpoint)
    loss = m(x, y)
    loss.backward()
    assert ran == layers
    torch.testing.assert_close(loss, reference, rtol=0, atol=0)
    for (name, p), g in zip(m.named_parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-7, msg=name)
    # Parameter names are unchanged: checkpoints and the params digest do not see it.
    assert all(
        ".checkpoint" not in name and "_orig" not in name for name, _ in m.named_parameters()
    )
