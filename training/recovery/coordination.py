"""Agreement through the job's key-value store: generations, rendezvous and the step vote.

Every key lives under a namespace per launch attempt, so a restarted group never reads the
keys of the group before it. A generation is one incarnation of the process groups: the
first world is generation 0, and each in-process recovery forms the next one. The store is
the only thing every rank can still reach when a peer has died in the middle of a
collective, which is why these agreements go through it and not through the process group.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, Store, TCPStore

GENERATION_KEY = "generation"
COMMIT, ABORT = "commit", "abort"


class RecoveryFallbackError(Exception):
    """In-process recovery cannot go on: the job falls back to a checkpoint tier (a restart
    of every rank). The message is the one line the operator reads."""


@dataclass(frozen=True)
class Member:
    """One rank's entry in a generation's rendezvous. `intact`: it holds model and optimizer
    state at step `step` (a survivor, or a replacement that has received it)."""

    rank: int
    pid: int
    intact: bool
    step: int

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, raw: bytes | str) -> Member:
        data = json.loads(raw)
        return cls(int(data["rank"]), int(data["pid"]), bool(data["intact"]), int(data["step"]))


@dataclass(frozen=True)
class Decision:
    """The agreed outcome of one step: `commit` (every rank applies its update) or not
    (every rank discards it), whether any rank asked to stop, and the ranks' losses."""

    commit: bool
    stop: bool
    losses: tuple[float, ...]

    @property
    def mean_loss(self) -> float:
        return sum(self.losses) / len(self.losses) if self.losses else float("nan")


def connect_store(address: str, timeout_s: float) -> TCPStore:
    """A client of the store the launcher hosts at `address` (host:port): it outlives every
    rank, so survivors and a replacement meet there after any rank has died."""
    host, _, port = address.rpartition(":")
    return TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=timeout_s))


class Coordinator:
    """This rank's view of the agreements of one launch attempt (`namespace`)."""

    def __init__(
        self,
        store: Store,
        namespace: str,
        rank: int,
        world_size: int,
        *,
        vote_timeout_s: float,
        rendezvous_timeout_s: float,
    ) -> None:
        self.store = PrefixStore(namespace, store)
        self.rank, self.world_size = rank, world_size
        self.vote_timeout_s = vote_timeout_s
        self.rendezvous_timeout_s = rendezvous_timeout_s

    # ---- generations -------------------------------------------------------------------------

    def current_generation(self) -> int:
        self.store.compare_set(GENERATION_KEY, "", "0")
        return int(self.store.get(GENERATION_KEY))

    def next_generation(self, failed: int) -> int:
        """Moves on from generation `failed`: every rank that saw it fail asks for the same
        successor, and the first to ask creates it."""
        self.store.compare_set(GENERATION_KEY, str(failed), str(failed + 1))
        return int(self.store.get(GENERATION_KEY))

    def generation_for_replacement(self) -> int:
        """The generation a replacement joins: the newest one that has not formed yet; when the
        newest has formed, its world still counts the dead rank, so the next one."""
        newest = self.current_generation()
        if self.store.check([self._formed_key(newest)]):
            return self.next_generation(newest)
        return newest

    @staticmethod
    def _formed_key(generation: int) -> str:
        return f"g{generation}/formed"

    def process_group_store(self, generation: int) -> Store:
        """Where generation `generation`'s process groups exchange their addresses."""
        return PrefixStore(f"g{generation}/pg", self.store)

    # ---- rendezvous ------------------------------------------------------------------------

    def join(self, generation: int, me: Member) -> list[Member]:
        """Announces `me` in `generation` and waits until every rank has: the members, in rank
        order. RecoveryFallbackError when a rank does not arrive within the rendezvous timeout."""
        prefix = f"g{generation}/member/"
        self.store.set(prefix + str(me.rank), me.encode())
        keys = [prefix + str(r) for r in range(self.world_size)]
        deadline = time.monotonic() + self.rendezvous_timeout_s
        while not self.store.check(keys):
            if time.monotonic() > deadline:
                missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
                raise RecoveryFallbackError(
                    f"in-process recovery: rank(s) {missing} did not join generation "
                    f"{generation} within {self.rendezvous_timeout_s:g}s "
                    "(fault.recovery_rendezvous_s); falling back to a checkpoint tier"
                )
            time.sleep(0.02)
        self.store.set(self._formed_key(generation), "1")
        return [Member.decode(raw) for raw in self.store.multi_get(keys)]

    # ---- the step vote ---------------------------------------------------------------------

    def decide(self, generation: int, step: int, *, ok: bool, stop: bool, loss: float) -> Decision:
        """Whether step `step` commits: only if every rank of the generation reports its
        gradients complete. The first rank to know the outcome writes it once (a failed rank
        at once, the last healthy voter when all are in, any rank at the vote timeout) and
        every rank adopts that one value, so no two survivors can disagree on the step even
        when a peer dies in the middle of the vote."""
        prefix = f"g{generation}/s{step}/"
        decision_key = prefix + "decision"
        if ok:
            self.store.set(prefix + f"loss/{self.rank}", repr(loss))
            if stop:
                self.store.add(prefix + "stop", 1)
            if self.store.add(prefix + "ok", 1) == self.world_size:
                self.store.compare_set(decision_key, "", COMMIT)
        else:
            self.store.compare_set(decision_key, "", ABORT)
        try:
            self.store.wait([decision_key], timedelta(seconds=self.vote_timeout_s))
        except dist.DistStoreError:
            # A rank that never voted (hung, or died after its last collective).
            self.store.compare_set(decision_key, "", ABORT)
        outcome = self.store.get(decision_key).decode()
        if outcome != COMMIT:
            return Decision(commit=False, stop=False, losses=())
        losses = self.store.multi_get([prefix + f"loss/{r}" for r in range(self.world_size)])
        stop_votes = self.store.add(prefix + "stop", 0)
        self._forget(generation, step - 2)
        return Decision(commit=True, stop=stop_votes > 0, losses=tuple(float(v) for v in losses))

    def _forget(self, generation: int, step: int) -> None:
        """Drops this rank's keys of an old step, so the store does not grow with the run."""
        if step < 1:
            return
        prefix = f"g{generation}/s{step}/"
        self.store.delete_key(prefix + f"loss/{self.rank}")
        if self.rank == 0:
            for key in ("ok", "stop", "decision"):
                self.store.delete_key(prefix + key)


def this_member(rank: int, *, intact: bool, step: int) -> Member:
    return Member(rank=rank, pid=os.getpid(), intact=intact, step=step if intact else -1)
