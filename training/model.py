"""Llama-style decoder: RMSNorm, rotary embeddings, SwiGLU MLP, optional grouped-query attention.

Parameters are created on the meta device by the trainer and materialised after sharding;
``init_weights`` then fills them so that the values depend only on (seed, parameter name),
never on the world size or the sharding layout.
"""

from __future__ import annotations

import zlib
from typing import Any, cast

import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import checkpoint

from training.config import ModelConfig, ffn_hidden_dim

__all__ = ["Transformer", "chunked_cross_entropy", "count_params", "ffn_hidden_dim"]


def rope_tables(
    head_dim: int, seq_len: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    )
    t = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: (B, T, H, D); rotate interleaved pairs without complex dtypes (compile friendly).
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads or cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, cfg.dim, bias=False)

    def use_local_heads(self, tp: int) -> None:
        """Tensor parallelism: this rank computes n_heads / tp query heads and n_kv_heads / tp
        key/value heads (the column-wise wq/wk/wv return this rank's heads)."""
        self.n_heads //= tp
        self.n_kv_heads //= tp

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_kv_heads != self.n_heads
        )
        out: torch.Tensor = self.wo(y.transpose(1, 2).reshape(b, t, -1))
        return out


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        hidden = ffn_hidden_dim(cfg)
        self.w1 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)
        # Set by the parallel layer; recomputing inside the block keeps parameter names
        # unchanged (no wrapper module), so checkpoints and the params hash are unaffected.
        self.activation_checkpoint = False

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = x + self.attention(self.attention_norm(x), cos, sin)
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.activation_checkpoint and self.training:
            out: torch.Tensor = checkpoint(self._forward, x, cos, sin, use_reentrant=False)
            return out
        return self._forward(x, cos, sin)


class Transformer(nn.Module):
    # Buffers (registered in __init__), declared for the type checker.
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, cfg: ModelConfig, max_seq_len: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.max_seq_len = max_seq_len
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        head_dim = cfg.dim // cfg.n_heads
        cos, sin = rope_tables(head_dim, max_seq_len, cfg.rope_theta, torch.device("cpu"))
        # Non-persistent: derived from the config, recomputed in init_weights after to_empty.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # training.loss_chunk_tokens, set by the trainer: 0 = plain loss over the full logits.
        self.loss_chunk_tokens = 0

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab), or with `labels` the mean cross-entropy loss.

        The loss is computed here, inside the forward, so that under FSDP the output projection
        is still gathered when the chunked loss uses its weight directly.
        """
        t = tokens.shape[1]
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        h = self.norm(h)
        if labels is None:
            logits: torch.Tensor = self.output(h)
            return logits
        if self.loss_chunk_tokens > 0:
            return chunked_cross_entropy(
                h.flatten(0, 1), self.output.weight, labels.flatten(), self.loss_chunk_tokens
            )
        loss = F.cross_entropy(self.output(h).flatten(0, 1).float(), labels.flatten())
        if isinstance(loss, DTensor):
            # Tensor parallelism: the vocabulary-parallel loss is the same on every rank of
            # the group; the caller gets a plain tensor (differentiable, like the DTensor),
            # a copy rather than a view, as FSDP wants the root module's output.
            loss = loss.full_tensor().clone()
        return loss

    def blocks(self) -> list[Block]:
        """The decoder blocks, in order (``layers`` holds nothing else)."""
        return [cast(Block, layer) for layer in self.layers.values()]

    def _std_for(self, name: str) -> float | None:
        """Init std per parameter; None means constant one (norm weights)."""
        if name.endswith("norm.weight"):
            return None
        std = self.cfg.init_std
        if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
            # Residual projections scaled down with depth (GPT-2 / Llama practice).
            depth_scale: float = (2 * self.cfg.n_layers) ** 0.5
            return std / depth_scale
        if name == "output.weight":
            output_std: float = self.cfg.dim**-0.5
            return output_std
        return std

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Fills every (possibly sharded) parameter from a generator keyed by (seed, name).

        Each full tensor is generated on the parameter's device and only the local shard is
        kept, so the initial model is identical for any world size or mesh shape.
        """
        from torch.distributed.tensor import distribute_tensor

        for name, param in self.named_parameters():
            device = param.device
            std = self._std_for(name)
            if std is None:
                full = torch.ones(param.shape, device=device, dtype=param.dtype)
            else:
                gen = torch.Generator(device=device)
                gen.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
                full = torch.empty(param.shape, device=device, dtype=torch.float32)
                full.normal_(0.0, std, generator=gen)
                full = full.to(param.dtype)
            if isinstance(param, DTensor):
                # src_data_rank=None: every rank already holds the same full tensor, so
                # slicing locally avoids a scatter.
                local = distribute_tensor(
                    full, param.device_mesh, param.placements, src_data_rank=None
                )
                param.to_local().copy_(local.to_local())
            else:
                param.copy_(full)
        head_dim = self.cfg.dim // self.cfg.n_heads
        cos, sin = rope_tables(
            head_dim, self.max_seq_len, self.cfg.rope_theta, self.rope_cos.device
        )
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)


IGNORE_INDEX = -100  # as F.cross_entropy: labels equal to it add nothing to the loss


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T`` against ``labels``, one chunk of tokens at a
    time, with the gradients computed in the same pass.

    Per chunk: logits in the compute dtype (a bf16 matmul under FSDP's bf16 policy), then fp32
    for the log-sum-exp, the loss and the gradient of the logits, which is turned straight into
    the chunk's gradients of `hidden` and `weight` (two more matmuls: the same three the plain
    loss runs, none repeated). What is kept for backward is the gradient of `hidden` (tokens x
    dim) and of `weight` (vocab x dim, fp32), never logits: peak memory holds one chunk's
    fp32 logits and logsumexp's temporary of the same size, whatever the batch. Backward only scales them by the incoming gradient.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        chunk: int,
        grad_enabled: bool,
    ) -> torch.Tensor:
        n = hidden.shape[0]
        acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32 under bf16 compute
        valid = labels != IGNORE_INDEX
        # Mean over the counted tokens, as F.cross_entropy (nan when there are none); kept a
        # tensor, so nothing waits for the device.
        count = valid.sum().to(acc)
        # needs_input_grad ignores torch.no_grad(); the caller's grad mode is passed in
        # (inside forward it is always off), so evaluation computes no gradients.
        want_hidden = grad_enabled and ctx.needs_input_grad[0]
        want_weight = grad_enabled and ctx.needs_input_grad[1]
        needs_grad = want_hidden or want_weight
        grad_hidden = (
            torch.empty(hidden.shape, dtype=hidden.dtype, device=hidden.device)
            if want_hidden
            else None
        )
        grad_weight = (
            torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_weight else None
        )
        total = torch.zeros((), dtype=acc, device=hidden.device)
        for start in range(0, n, chunk):
            h = hidden[start : start + chunk]
            y = labels[start : start + chunk]
            ok = valid[start : start + chunk]
            # (c, vocab) in the compute dtype, then fp32: the chunk-sized tensors (with `g`).
            logits = (h @ weight.t()).to(acc)
            lse = torch.logsumexp(logits, dim=-1)
            target = logits.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1)
            total += torch.where(ok, lse - target, 0.0).sum()
            if not needs_grad:
                continue
            # d(mean loss)/d(logits) = (softmax - one_hot) / count, in place in the fp32 logits.
            grad = logits.sub_(lse.unsqueeze(1)).exp_()
            rows = torch.arange(grad.shape[0], device=grad.device)
            grad[rows, y.clamp(min=0)] -= 1.0
            grad.mul_((ok.to(acc) / count).unsqueeze(1))
            g = grad.to(hidden.dtype)
            del logits, grad
            if grad_hidden is not None:
                torch.mm(g, weight, out=grad_hidden[start : start + chunk])
            if grad_weight is not None:
                grad_weight += g.t() @ h
        ctx.save_for_backward(
            *(t if t is not None else torch.empty(0) for t in (grad_hidden, grad_weight))
        )
        ctx.weight_dtype = weight.dtype
        return total / count

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
        grad_hidden, grad_weight = ctx.saved_tensors
        dh = grad_hidden * grad_out.to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None
        dw = (grad_weight * grad_out).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        return dh, dw, None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int
) -> torch.Tensor:
    """``F.cross_entropy((hidden @ weight.T).float(), labels)`` (mean, ignore_index -100)
    without the full logits: `hidden` (tokens, dim), `weight` (vocab, dim), `labels` (tokens,).
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    out: torch.Tensor = _ChunkedCrossEntropy.apply(
        hidden, weight, labels, chunk_tokens, torch.is_grad_enabled()
    )  # type: ignore[no-untyped-call]  # torch leaves Function.apply unannotated
    return out


def count_params(cfg: ModelConfig) -> int:
    """Parameter count from the config alone (used for MFU without building the model)."""
    kv = cfg.n_kv_heads or cfg.n_heads
    hd = cfg.dim // cfg.n_heads
    attn = cfg.dim * cfg.n_heads * hd * 2 + cfg.dim * kv * hd * 2
    ffn = 3 * cfg.dim * ffn_hidden_dim(cfg)
    per_layer = attn + ffn + 2 * cfg.dim
    return cfg.vocab_size * cfg.dim * 2 + cfg.n_layers * per_layer + cfg.dim


def flops_per_token(cfg: ModelConfig, seq_len: int, *, count_embedding: bool = False) -> int:
    """Model FLOPs per trained token, forward and backward: 6 per parameter outside the input
    embedding (a lookup: no matmul) plus 12 * layers * dim * seq_len for attention, causal
    counted in full; torchtitan and the PaLM paper (appendix B) count MFU this way.
    `count_embedding` adds the embedding's 6 * vocab * dim back, as this project's benchmark
    counted before (figures recorded then compare with that)."""
    embedding = 0 if count_embedding else cfg.vocab_size * cfg.dim
    return 6 * (count_params(cfg) - embedding) + 12 * cfg.n_layers * cfg.dim * seq_len
