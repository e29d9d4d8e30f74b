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
import threading
import time
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch.distributed as dist

# torch.distributed re-exports its stores from torch._C at run time; its stubs do not say so.
from torch.distributed import PrefixStore, Store, TCPStore  # type: ignore[attr-defined]

GENERATION_KEY = "generation"
# How many processes have started in place of a lost rank in this attempt (each adds 1 before
# it joins): a rise since a generation formed means one of its ranks has died.
LOSSES_KEY = "losses"
COMMIT, ABORT = "commit", "abort"


def decision_key(generation: int, step: int) -> str:
    """Where the agreed outcome of step `step` of `generation` is written, once."""
    return f"g{generation}/s{step}/decision"


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
        silence_s: float,
        rendezvous_timeout_s: float,
    ) -> None:
        self.store = PrefixStore(namespace, store)
        self.rank, self.world_size = rank, world_size
        self.silence_s = silence_s
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

    def announce_loss(self) -> None:
        """A replacement says, before it joins, that the rank it replaces has died: ranks
        still waiting on that rank in a step's vote stop waiting (Heartbeat)."""
        self.store.add(LOSSES_KEY, 1)

    def losses(self) -> int:
        return self.store.add(LOSSES_KEY, 0)

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
        at once, the last healthy voter when all are in, a waiting rank when a rank that has
        not voted stops beating) and every rank adopts that one value, so no two survivors can
        disagree on the step even when a peer dies in the middle of the vote. A slow step is
        waited for as long as its rank's heartbeat goes on (the watchdog bounds a hang)."""
        prefix = f"g{generation}/s{step}/"
        decided = decision_key(generation, step)
        if ok:
            self.store.set(prefix + f"loss/{self.rank}", repr(loss))
            if stop:
                self.store.add(prefix + "stop", 1)
            if self.store.add(prefix + "ok", 1) == self.world_size:
                self.store.compare_set(decided, "", COMMIT)
        else:
            self.store.compare_set(decided, "", ABORT)
        self._await_decision(prefix, decided)
        outcome = self.store.get(decided).decode()
        if outcome != COMMIT:
            return Decision(commit=False, stop=False, losses=())
        losses = self.store.multi_get([prefix + f"loss/{r}" for r in range(self.world_size)])
        stop_votes = self.store.add(prefix + "stop", 0)
        self._forget(generation, step - 2)
        return Decision(commit=True, stop=stop_votes > 0, losses=tuple(float(v) for v in losses))

    def _await_decision(self, prefix: str, decided: str) -> None:
        """Waits for the step's decision; writes ABORT when a rank that has not voted has been
        silent (no heartbeat, Heartbeat) for `silence_s`: its process is gone. (A loss that a
        replacement announces ends the wait sooner: Heartbeat.)"""
        last_beat: dict[int, tuple[int, float]] = {}
        # Each wait that times out logs a line (c10d): look at the heartbeats at half the
        # silence allowed, so a dead rank is known within 1.5 times it.
        poll = timedelta(seconds=self.silence_s / 2)
        while True:
            try:
                self.store.wait([decided], poll)
                return
            except dist.DistStoreError:
                pass
            now = time.monotonic()
            for r in range(self.world_size):
                if self.store.check([prefix + f"loss/{r}"]):
                    continue
                beats = self.store.add(Heartbeat.key(r), 0)
                seen = last_beat.setdefault(r, (beats, now))
                if beats != seen[0]:
                    last_beat[r] = (beats, now)
                elif now - seen[1] > self.silence_s:
                    self.store.compare_set(decided, "", ABORT)

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


class Heartbeat:
    """A counter in the store that a daemon thread of this rank increments every `period_s`,
    on a store connection of its own (a client blocks while it waits): voters waiting for a
    rank tell a slow step (the counter moves) from a dead process (it stops).

    The same thread watches for losses announced since this rank's generation formed
    (`watch`): a replacement starts as soon as the launcher sees a rank die, so its
    announcement ends the step's vote (ABORT) within `period_s`, where the silence of a rank
    that died just before it voted would be waited out."""

    def __init__(self, store: Store, namespace: str, rank: int, period_s: float) -> None:
        self.store = PrefixStore(namespace, store)
        self.rank, self.period_s = rank, period_s
        # (generation, step, losses when the generation formed) of the step this rank runs.
        self._watched: tuple[int, int, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hptrain-heartbeat", daemon=True)
        self.store.add(self.key(rank), 1)
        self._thread.start()

    @staticmethod
    def key(rank: int) -> str:
        return f"heartbeat/{rank}"

    def watch(self, generation: int, step: int, losses_at_formation: int) -> None:
        """This rank runs step `step` of `generation`, which formed when `losses_at_formation`
        losses had been announced."""
        self._watched = (generation, step, losses_at_formation)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.store.add(self.key(self.rank), 1)
                watched = self._watched
                if watched is not None and self.store.add(LOSSES_KEY, 0) > watched[2]:
                    # A rank of this generation died: the step cannot commit. The first
                    # outcome written is the one every rank adopts, so a step already decided
                    # keeps its decision.
                    self.store.compare_set(decision_key(*watched[:2]), "", ABORT)
            except dist.DistError:
                return  # the store is gone: the launcher has ended the job

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
