"""Resume selection: the order of the candidates, and one rank's verdict on one of them.

No process group here: the manager gathers every rank's listing and verdict (manager.resume).
"""

from __future__ import annotations

import sys
from typing import Any

from training.checkpoint.config import CheckpointConfig
from training.checkpoint.format import CheckpointRef, read_manifest, validate_checkpoint
from training.checkpoint.planning import files_read_by
from training.run_identity import Change, RunIdentity, compare, describe


class IncompatibleCheckpointError(RuntimeError):
    """Checkpoints this job must not continue from, or must not train over: bad input."""


def warn(msg: str) -> None:
    sys.stderr.write(f"hptrain: {msg}\n")
    sys.stderr.flush()


def first_line(e: BaseException) -> str:
    """DCP errors embed every rank's traceback; the log needs the cause only."""
    text = str(e).strip().splitlines()
    cause = next((ln for ln in reversed(text) if ln and not ln.startswith(" ")), type(e).__name__)
    return f"{type(e).__name__}: {cause}"


def candidate_order(
    per_rank_listed: list[list[tuple[int, str]]], cfg: CheckpointConfig
) -> list[tuple[int, str]]:
    """Resume candidates: every (step, tier) any rank lists, newest step first and, for the
    same step, in the order of the tiers (the fastest to read first). Each is then used only
    if every rank validates it."""
    union = {(int(step), str(tier)) for listed in per_rank_listed for step, tier in listed}
    return sorted(union, key=lambda c: cfg.resume_key(*c))


def check_candidate(
    ref: CheckpointRef,
    wanted: dict[str, Any],
    *,
    rank: int,
    identity: RunIdentity | None,
    backend: str | None,
    verify_checksums: bool,
) -> tuple[bool, str, list[Change]]:
    """This rank's verdict on one candidate: identity first (cheap), then integrity of the
    files its load plan reads (`wanted`: the state to load; `backend`: the one the tier of
    `ref` has enabled, None for files)."""
    try:
        manifest = read_manifest(ref.path)
    except (OSError, ValueError) as e:
        return False, f"manifest unreadable: {e}", []
    changes: list[Change] = []
    if identity is not None and "run" in manifest:
        try:
            saved = RunIdentity.from_json(manifest["run"])
        except (KeyError, TypeError, ValueError) as e:
            return False, f"run identity unreadable: {e!r}", []
        changes = compare(saved, identity)
        refused = [c for c in changes if not c.allowed]
        if refused:
            return False, describe(refused), changes
    written_through = manifest.get("backend")
    if written_through is not None:
        if backend != written_through:
            return False, f"written through the {written_through} backend, which is not enabled", []
        ok, why = validate_checkpoint(ref.path, rank, verify_checksums)
        return ok, why, changes
    try:
        reads = files_read_by(ref.path, wanted)
        plan_error = None
    except Exception as e:  # noqa: BLE001 - the integrity check or the reason below
        reads, plan_error = set(), first_line(e)
    ok, why = validate_checkpoint(ref.path, rank, verify_checksums, reads)
    if ok and plan_error is not None:
        return False, f"does not fit this job: {plan_error}", changes
    return ok, why, changes
