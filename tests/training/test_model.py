from __future__ import annotations

import torch

from training.config import ModelConfig
from training.model import Transformer, apply_rope, count_params, rope_tables


def _model(seed: int = 0, kv: int | None = 2) -> Transformer:
    cfg = ModelConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=kv, vocab_size=50)
    with torch.device("meta"):
        m = Transformer(cfg, max_seq_len=16)
    m.to_empty(device="cpu")
    m.init_weights(seed)
    return m


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
