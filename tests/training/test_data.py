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
    build_source,
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


# --- The exact order: checkpoints store only a position, so the order is part of the format.
# A change to the Feistel rounds, keys or domain split would silently make every resumed run
# read other samples than the run it continues; these figures come from the implementation
# checkpoints were written with.
PINNED_ORDERS = [
    ((10, 0, 0), [1, 9, 6, 4, 7, 0, 8, 3, 5, 2]),
    ((16, 7, 1), [12, 8, 4, 2, 13, 9, 6, 14, 3, 7, 5, 0, 1, 11, 10, 15]),
    ((17, 7, 1), [5, 3, 8, 16, 1, 7, 9, 2, 11, 12, 10, 15, 13, 4, 14, 6, 0]),
    ((3, 5, 0), [2, 1, 0]),
]


@pytest.mark.parametrize(("key", "order"), PINNED_ORDERS)
def test_sample_order_is_pinned_for_fixed_seeds(
    key: tuple[int, int, int], order: list[int]
) -> None:
    n, seed, epoch = key
    assert FeistelPermutation(n, seed, epoch)(np.arange(n)).tolist() == order


def test_sample_order_is_pinned_on_a_large_domain() -> None:
    perm = FeistelPermutation(1_000_003, seed=42, epoch=0)
    positions = np.array([0, 1, 2, 999_999, 1_000_002])
    assert perm(positions).tolist() == [829679, 360630, 821603, 754592, 834057]


def test_global_indices_cross_epochs_with_each_epochs_own_order() -> None:
    # Indices 8..15 of a 6-sample source: positions 2..5 of epoch 1, then 0..3 of epoch 2.
    ids = global_sample_ids(np.arange(8, 16), num_samples=6, seed=3)
    assert ids.tolist() == [3, 2, 4, 1, 1, 3, 0, 4]
    assert ids[:4].tolist() == FeistelPermutation(6, 3, 1)(np.arange(2, 6)).tolist()
    assert ids[4:].tolist() == FeistelPermutation(6, 3, 2)(np.arange(0, 4)).tolist()


def test_permutation_refuses_positions_outside_its_domain() -> None:
    perm = FeistelPermutation(10, seed=0, epoch=0)
    assert perm(np.array([9])).tolist() == [2]
    with pytest.raises(IndexError, match=r"^position outside the permutation domain$"):
        perm(np.array([10]))
    assert perm(np.array([], dtype=np.int64)).tolist() == []


@pytest.mark.parametrize("n", [0, -1])
def test_permutation_refuses_an_empty_domain(n: int) -> None:
    with pytest.raises(ValueError, match=r"^permutation domain must be non-empty$"):
        FeistelPermutation(n, seed=0, epoch=0)


def test_a_single_sample_domain_maps_to_itself() -> None:
    assert FeistelPermutation(1, seed=9, epoch=3)(np.array([0])).tolist() == [0]


def test_synthetic_samples_are_pinned_and_one_token_longer_than_seq_len() -> None:
    source = SyntheticTokenSource(num_samples=4, seq_len=5, vocab_size=100, seed=9)
    assert source.sample(2).tolist() == [9, 14, 19, 24, 29, 34]
    assert source.sample(2).dtype == np.int64
    for idx in (-1, 4):
        with pytest.raises(IndexError, match=f"^{idx}$"):
            source.sample(idx)
    # Starts and strides (1 to 7) of several samples: the sequences the tests learn from.
    several = SyntheticTokenSource(num_samples=8, seq_len=3, vocab_size=1000, seed=4)
    assert [several.sample(i).tolist() for i in range(8)] == [
        [726, 733, 740, 747],
        [437, 444, 451, 458],
        [287, 292, 297, 302],
        [218, 223, 228, 233],
        [378, 380, 382, 384],
        [121, 123, 125, 127],
        [366, 369, 372, 375],
        [849, 856, 863, 870],
    ]


def test_batches_are_seq_len_tokens_with_labels_shifted_by_one() -> None:
    source = SyntheticTokenSource(num_samples=32, seq_len=6, vocab_size=97, seed=2)
    loader = ResumableLoader(source, global_batch_size=8, dp_rank=1, dp_size=2, seed=5)
    ids = global_sample_ids(loader.local_indices(), 32, 5)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (4, 6)
    assert x.dtype == torch.int64
    rows = np.stack([source.sample(int(i)) for i in ids])
    assert x.tolist() == rows[:, :-1].tolist()
    assert y.tolist() == rows[:, 1:].tolist()
    assert loader.consumed_samples == 8


def test_local_indices_are_this_ranks_slice_of_the_global_batch() -> None:
    source = SyntheticTokenSource(num_samples=100, seq_len=4, vocab_size=50, seed=1)
    loaders = _loaders(4, source, batch=8)
    assert [ld.local_indices().tolist() for ld in loaders] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
    ]
    for ld in loaders:
        ld.next_batch()
    assert loaders[3].local_indices().tolist() == [14, 15]
    assert loaders[0].device == torch.device("cpu")


def test_the_data_parallel_size_must_divide_the_global_batch() -> None:
    source = SyntheticTokenSource(num_samples=10, seq_len=4, vocab_size=50, seed=1)
    with pytest.raises(
        ValueError, match=r"^global batch size must be divisible by the data-parallel size$"
    ):
        ResumableLoader(source, 6, 0, 4, seed=1)
    loader = ResumableLoader(source, 8, 0, 4, seed=1)
    assert type(loader.local_batch_size) is int and loader.local_batch_size == 2


def test_epoch_counts_whole_passes_over_the_source() -> None:
    source = SyntheticTokenSource(num_samples=10, seq_len=4, vocab_size=50, seed=1)
    loader = ResumableLoader(source, 4, 0, 1, seed=1)
    epochs = []
    for _ in range(5):
        epochs.append(loader.epoch)
        loader.next_batch()
    assert epochs == [0, 0, 0, 1, 1]  # 0, 4, 8, 12, 16 samples consumed
    assert loader.epoch == 2


def test_state_dict_is_the_global_position_and_its_identity() -> None:
    source = SyntheticTokenSource(num_samples=10, seq_len=4, vocab_size=50, seed=1)
    loader = ResumableLoader(source, 4, 1, 2, seed=7)
    loader.next_batch()
    assert loader.state_dict() == {
        "consumed_samples": 4,
        "seed": 7,
        "num_samples": 10,
        "global_batch_size": 4,
    }
    other = ResumableLoader(source, 4, 0, 1, seed=7)
    other.load_state_dict({**loader.state_dict(), "consumed_samples": "12"})
    assert other.consumed_samples == 12


def test_load_rejects_another_seed() -> None:
    src = SyntheticTokenSource(num_samples=10, seq_len=4, vocab_size=50, seed=1)
    state = ResumableLoader(src, 2, 0, 1, seed=1).state_dict()
    with pytest.raises(ValueError) as caught:
        ResumableLoader(src, 2, 0, 1, seed=2).load_state_dict(state)
    assert str(caught.value) == (
        "checkpointed data position belongs to a different dataset or seed "
        "(samples 10 vs 10, seed 1 vs 2)"
    )


def test_memmap_samples_at_every_shard_edge(tmp_path: Path) -> None:
    seq = 4
    first = np.arange(0, 2 * seq + 1)  # exactly 2 samples
    second = np.arange(100, 100 + seq + 1)  # exactly 1 sample
    third = np.arange(200, 200 + 3 * seq + 1)  # exactly 3 samples
    for name, tokens in (("a.bin", first), ("b.bin", second), ("c.bin", third)):
        write_token_shard(str(tmp_path / name), tokens)
    src = MemmapTokenSource(str(tmp_path), seq, "uint16")
    assert src.num_samples == 6
    expected = [first[0:5], first[4:9], second[0:5], third[0:5], third[4:9], third[8:13]]
    for idx, tokens in enumerate(expected):
        sample = src.sample(idx)
        assert sample.tolist() == tokens.tolist(), idx
        assert sample.dtype == np.int64
    for idx in (-1, 6):
        with pytest.raises(IndexError, match=f"^{idx}$"):
            src.sample(idx)
    assert src.files == [str(tmp_path / n) for n in ("a.bin", "b.bin", "c.bin")]
    # Shards are mapped read-only: jobs read the data repository, never write it.
    assert all(not m.flags.writeable for m in src._maps)


def test_memmap_shards_too_short_for_a_sample_hold_none(tmp_path: Path) -> None:
    write_token_shard(str(tmp_path / "a.bin"), np.arange(4))  # seq_len tokens: no label
    write_token_shard(str(tmp_path / "b.bin"), np.arange(0))  # empty
    write_token_shard(str(tmp_path / "c.bin"), np.arange(10, 18))  # 2 x seq_len: one sample
    src = MemmapTokenSource(str(tmp_path), 4, "uint16")
    assert src.num_samples == 1
    assert src.files == [str(tmp_path / n) for n in ("a.bin", "b.bin", "c.bin")]
    assert src.sample(0).tolist() == [10, 11, 12, 13, 14]


def test_memmap_all_shards_too_short(tmp_path: Path) -> None:
    write_token_shard(str(tmp_path / "a.bin"), np.arange(4))
    with pytest.raises(ValueError, match="shorter than one sample of 5 tokens"):
        MemmapTokenSource(str(tmp_path), 4, "uint16")


def test_memmap_reads_a_glob_of_shards(tmp_path: Path) -> None:
    write_token_shard(str(tmp_path / "a.bin"), np.arange(5))
    write_token_shard(str(tmp_path / "b.bin"), np.arange(10, 15))
    src = MemmapTokenSource(str(tmp_path / "b*.bin"), 4, "uint16")
    assert src.num_samples == 1
    assert src.sample(0).tolist() == [10, 11, 12, 13, 14]
    with pytest.raises(FileNotFoundError, match="no token shards"):
        MemmapTokenSource(str(tmp_path / "z*.bin"), 4, "uint16")


def test_shards_are_little_endian_on_disk(tmp_path: Path) -> None:
    write_token_shard(str(tmp_path / "a.bin"), np.array([1, 258]), "uint16")
    assert (tmp_path / "a.bin").read_bytes() == b"\x01\x00\x02\x01"


def test_build_source_picks_the_kind(tmp_path: Path) -> None:
    write_token_shard(str(tmp_path / "a.bin"), np.arange(9))
    common = {"path": str(tmp_path), "dtype": "uint16", "seq_len": 4, "vocab_size": 50, "seed": 3}
    memmap = build_source("memmap", synthetic_samples=7, **common)
    assert isinstance(memmap, MemmapTokenSource) and memmap.num_samples == 2
    synthetic = build_source("synthetic", synthetic_samples=7, **common)
    assert isinstance(synthetic, SyntheticTokenSource)
    assert (synthetic.num_samples, synthetic.seq_len, synthetic.vocab_size, synthetic.seed) == (
        7,
        4,
        50,
        3,
    )


def test_a_cuda_loader_pins_the_batch_and_copies_it_without_blocking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No GPU needed: the two calls are recorded in place of the real pinning and copy.
    calls: list[tuple[str, object, object]] = []

    def pin_memory(self: torch.Tensor) -> torch.Tensor:
        calls.append(("pin_memory", None, None))
        return self

    def to(self: torch.Tensor, device: object = None, **kwargs: object) -> torch.Tensor:
        calls.append(("to", device, kwargs.get("non_blocking")))
        return self

    source = SyntheticTokenSource(num_samples=8, seq_len=4, vocab_size=50, seed=1)
    loader = ResumableLoader(source, 2, 0, 1, seed=1, device=torch.device("cuda", 3))
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    x, y = loader.next_batch()
    assert calls == [("pin_memory", None, None), ("to", torch.device("cuda", 3), True)]
    assert x.shape == y.shape == (2, 4)
