"""The data pipeline's contracts as properties: the permutation is a bijection of [0, n) for
every n, and the data position resumes without repeating or skipping a sample wherever the
run is interrupted (tests/conftest.py sets the example budget)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from training.data import FeistelPermutation, ResumableLoader, SyntheticTokenSource

# The Feistel network permutes [0, 4**h); domains just above and below a power of four are
# where cycle walking does the most work and where an off-by-one in the split shows.
NEAR_POWERS_OF_FOUR = sorted({4**h + d for h in range(1, 9) for d in (-1, 0, 1)})


@given(
    n=st.one_of(st.integers(1, 3000), st.sampled_from(NEAR_POWERS_OF_FOUR)),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 1000),
)
def test_the_permutation_is_a_bijection_of_the_domain(n: int, seed: int, epoch: int) -> None:
    image = FeistelPermutation(n, seed, epoch)(np.arange(n))
    assert image.dtype == np.int64
    assert np.array_equal(np.sort(image), np.arange(n))


@st.composite
def runs(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    world = draw(st.sampled_from([1, 2, 4]))
    batch = world * draw(st.integers(1, 4))
    samples = draw(st.integers(1, 40))
    steps = draw(st.integers(1, 12))
    split = draw(st.integers(0, steps))
    return world, batch, samples, steps, split


def _read(loader: ResumableLoader, steps: int) -> list[tuple[list[int], list[list[int]]]]:
    """What `loader` reads over `steps` steps: per step, the global indices and token rows."""
    out = []
    for _ in range(steps):
        indices = loader.local_indices().tolist()
        x, y = loader.next_batch()
        out.append((indices, np.concatenate([x[:, :1], y], axis=1).tolist()))
    return out


@given(run=runs(), seed=st.integers(0, 1000))
def test_the_position_resumes_without_repeating_or_skipping(
    run: tuple[int, int, int, int, int], seed: int
) -> None:
    world, batch, samples, steps, split = run
    source = SyntheticTokenSource(num_samples=samples, seq_len=3, vocab_size=1000, seed=1)
    straight = [ResumableLoader(source, batch, r, world, seed=seed) for r in range(world)]
    expected = [_read(ld, steps) for ld in straight]

    first = [ResumableLoader(source, batch, r, world, seed=seed) for r in range(world)]
    before = [_read(ld, split) for ld in first]
    state = first[0].state_dict()
    assert state["consumed_samples"] == split * batch
    # Resume on every rank from the one stored position (rank 0's, as the checkpoint keeps).
    resumed = [ResumableLoader(source, batch, r, world, seed=seed) for r in range(world)]
    for ld in resumed:
        ld.load_state_dict(state)
    after = [_read(ld, steps - split) for ld in resumed]
    for rank in range(world):
        assert before[rank] + after[rank] == expected[rank]
    # Globally: step by step, rank after rank, the run reads every global index once.
    indices = [i for step in range(steps) for rank in range(world) for i in expected[rank][step][0]]
    assert indices == list(range(steps * batch))
