from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from training.data import (
    FeistelPermutation,
    MemmapTokenSource,
    ResumableLoader,
    SyntheticTokenSource,
    global_sample_ids,
    write_token_shard,
)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 1000, 4097])
def test_permutation_is_a_bijection(n: int) -> None:
    perm = FeistelPermutation(n, seed=3, epoch=0)(np.arange(n))
    assert sorted(perm.tolist()) == list(range(n))


def test_permutation_depends_on_seed_and_epoch_only() -> None:
    n = 500
    a = FeistelPermutation(n, 1, 0)(np.arange(n))
    assert np.array_equal(a, FeistelPermutation(n, 1, 0)(np.arange(n)))
    assert not np.array_equal(a, FeistelPermutation(n, 1, 1)(np.arange(n)))
    assert not np.array_equal(a, FeistelPermutation(n, 2, 0)(np.arange(n)))
    assert not np.array_equal(a, np.arange(n))  # actually shuffled
    # Evaluating positions one by one gives the same order as in bulk.
    assert [int(FeistelPermutation(n, 1, 0)(np.array([i]))[0]) for i in range(20)] == a[
        :20
    ].tolist()


def _loaders(world: int, source: SyntheticTokenSource, batch: int = 8) -> list[ResumableLoader]:
    return [ResumableLoader(source, batch, r, world, seed=11) for r in range(world)]


def test_each_epoch_covers_every_sample_once_across_ranks() -> None:
    source = SyntheticTokenSource(num_samples=64, seq_len=8, vocab_size=100, seed=5)
    loaders = _loaders(2, source)
    for epoch in range(2):
        seen = []
        for _ in range(8):  # 8 steps x 8 samples = one epoch of 64
            for ld in loaders:
                seen.extend(global_sample_ids(ld.local_indices(), 64, 11).tolist())
                ld.next_batch()
        assert sorted(seen) == list(range(64)), f"epoch {epoch}"
    assert loaders[0].epoch == 2


def test_resume_mid_epoch_is_exact() -> None:
    # 100 samples with batch 8: the resume point (step 7 = sample 56) is mid-epoch and the
    # continuation crosses into the next epoch at sample 100.
    source = SyntheticTokenSource(num_samples=100, seq_len=16, vocab_size=257, seed=9)
    baseline = [ResumableLoader(source, 8, r, 2, seed=4) for r in range(2)]
    expected = [[ld.next_batch() for _ in range(20)] for ld in baseline]

    first = [ResumableLoader(source, 8, r, 2, seed=4) for r in range(2)]
    for ld in first:
        for _ in range(7):
            ld.next_batch()
    states = [ld.state_dict() for ld in first]
    assert states[0] == states[1]  # the position is global, not per rank
    assert states[0]["consumed_samples"] == 56

    resumed = [ResumableLoader(source, 8, r, 2, seed=4) for r in range(2)]
    for ld, st in zip(resumed, states, strict=True):
        ld.load_state_dict(st)
    for rank, ld in enumerate(resumed):
        for step in range(7, 20):
            x, y = ld.next_batch()
            ex, ey = expected[rank][step]
            assert torch.equal(x, ex) and torch.equal(y, ey), (rank, step)
    # Inputs and labels are the same window shifted by one token.
    x, y = expected[0][0]
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_rank_slices_are_disjoint() -> None:
    source = SyntheticTokenSource(num_samples=1000, seq_len=4, vocab_size=50, seed=1)
    a, b = _loaders(2, source)
    assert set(a.local_indices()).isdisjoint(b.local_indices())
    assert len(a.local_indices()) == 4


def test_load_rejects_other_dataset() -> None:
    src = SyntheticTokenSource(num_samples=10, seq_len=4, vocab_size=50, seed=1)
    other = SyntheticTokenSource(num_samples=11, seq_len=4, vocab_size=50, seed=1)
    state = ResumableLoader(src, 2, 0, 1, seed=1).state_dict()
    with pytest.raises(ValueError, match="different dataset"):
        ResumableLoader(other, 2, 0, 1, seed=1).load_state_dict(state)


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_memmap_shards(tmp_path: Path, dtype: str) -> None:
    seq = 8
    hi = 60000 if dtype == "uint16" else 1_000_000
    rng = np.random.default_rng(0)
    shard_a = rng.integers(0, hi, size=8 * 5 + 3)  # 5 samples, 2 spare tokens
    shard_b = rng.integers(0, hi, size=8 * 2 + 1)  # exactly 2 samples
    write_token_shard(str(tmp_path / "a.bin"), shard_a, dtype)
    write_token_shard(str(tmp_path / "b.bin"), shard_b, dtype)
    write_token_shard(str(tmp_path / "tiny.bin"), shard_b[:3], dtype)  # too short: ignored
    src = MemmapTokenSource(str(tmp_path), seq, dtype)
    assert src.num_samples == 5 + 2
    assert np.array_equal(src.sample(0), shard_a[0:9])
    assert np.array_equal(src.sample(4), shard_a[32:41])
    assert np.array_equal(src.sample(5), shard_b[0:9])  # crosses into the second shard
    assert np.array_equal(src.sample(6), shard_b[8:17])
    with pytest.raises(IndexError):
        src.sample(7)
    ld = ResumableLoader(src, 7, 0, 1, seed=2)
    x, _ = ld.next_batch()
    assert sorted(map(tuple, x.tolist())) == sorted(
        tuple(src.sample(i)[:-1].tolist()) for i in range(7)
    )


def test_memmap_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        MemmapTokenSource(str(tmp_path / "nothing"), 8, "uint16")
