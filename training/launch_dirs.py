"""The directories of a launched run (training.launch): each emulated node's copy of the
per-node tiers (--nodes), the attempt numbering across launches, and the checkpoint listing
and corruption the fault options use."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from training.checkpoint.config import checkpoint_roots, tier_key
from training.config import JobConfig, output_dirs

if TYPE_CHECKING:
    from training.checkpoint.format import CheckpointRef


def _list_committed(root: Path, tier: str) -> list[CheckpointRef]:
    # Imported here: the launcher itself never needs torch, so argument errors are instant.
    from training.checkpoint.format import list_committed

    return list_committed(root, tier)


def checkpoint_listing(cfg: JobConfig, out: Path, nodes: int = 1) -> dict[str, list[str]]:
    """The entries of each tier's root (node 0's copy of a per-node tier), by tier."""
    roots = tier_roots(cfg, out, nodes)
    return {
        tier: sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        for tier, root in roots.items()
    }


def node_tier_dirs(cfg: JobConfig, out: Path, node: int) -> dict[str, Path]:
    """Directories of the per-node tiers (TierConfig.per_node) of emulated node `node`
    (--nodes): directories no other node sees, `<dir>-node<k>`."""
    roots = checkpoint_roots(cfg.checkpoint, out)
    return {
        t.name: roots[t.name].with_name(f"{roots[t.name].name}-node{node}")
        for t in cfg.checkpoint.tiers
        if t.per_node
    }


def tier_roots(cfg: JobConfig, out: Path, nodes: int = 1) -> dict[str, Path]:
    """Each tier's root as the launcher sees it: node 0's copy of a per-node tier."""
    roots = checkpoint_roots(cfg.checkpoint, out)
    if nodes > 1:
        roots.update(node_tier_dirs(cfg, out, 0))
    return roots


def node_output_dirs(cfg: JobConfig, out: Path, nodes: int) -> dict[str, Path]:
    """Every directory a rank of `nodes` emulated nodes writes to, by the option that names
    it (output_dirs, with a per-node tier once for each node)."""
    dirs = output_dirs(cfg, out)
    if nodes > 1:
        for tier in node_tier_dirs(cfg, out, 0):
            del dirs[tier_key(tier, "dir")]
        for node in range(nodes):
            for tier, path in node_tier_dirs(cfg, out, node).items():
                dirs[f"{tier_key(tier, 'dir')} (node {node})"] = path
    return dirs


_LOG_RE = re.compile(r"^attempt(\d+)_rank\d+\.log$")


def next_job_attempt(out: Path) -> int:
    """The job-wide number of the next attempt: one past every attempt that left a log or a
    run-ledger record in `out`."""
    seen = [-1]
    logs = out / "logs"
    if logs.is_dir():
        seen += [int(m.group(1)) for p in logs.iterdir() if (m := _LOG_RE.match(p.name))]
    ledger = out / "attempts"
    if ledger.is_dir():
        seen += [
            int(p.stem.split("_")[1])
            for p in ledger.glob("attempt_*.json")
            if p.stem.split("_")[1].isdigit()
        ]
    return max(seen) + 1


def corrupt_newest(cfg: JobConfig, out: Path, nodes: int = 1) -> str | None:
    """Flips bytes inside the largest shard of the checkpoint a resume would pick first.

    The file keeps its size, so only checksum validation can catch it: this is the silent
    corruption case (bad disk, partial overwrite), not a missing file.
    """
    refs = [
        ref
        for tier, root in tier_roots(cfg, out, nodes).items()
        for ref in _list_committed(root, tier)
    ]
    if not refs:
        return None
    newest = min(refs, key=lambda r: cfg.checkpoint.resume_key(r.step, r.tier))
    shards = sorted(newest.path.glob("*.distcp"), key=lambda p: p.stat().st_size, reverse=True)
    if not shards:
        return None
    target = shards[0]
    with open(target, "r+b") as f:
        size = target.stat().st_size
        f.seek(size // 2)
        chunk = f.read(64)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))
    return f"{newest.tier}/{newest.path.name}/{target.name}"
