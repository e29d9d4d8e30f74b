"""On-disk format of one checkpoint tier: directory names, manifest, commit, validation.

Layout of one tier root::

    step_00000020.tmp-<nonce>/   being written (never loaded; removed when the write fails,
                                 and at the next start after a kill)
    step_00000020/               committed: DCP shards + .metadata + manifest.json + COMMITTED

The manifest lists every file (size, sha256, writer rank) and the identity of the run that
wrote it (training.run_identity). The rename of the directory is the atomic commit point on
a POSIX filesystem; the COMMITTED marker covers stores without atomic rename.

No process group here: every function works on one directory and can be tested alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training import fileio
from training.checkpoint.hashing import FileDigest
from training.checkpoint.safe_load import SafeFileSystemReader

MANIFEST = "manifest.json"
COMMITTED = "COMMITTED"
DCP_METADATA = ".metadata"
# 2 adds the run identity ("run"); version 1 manifests (no identity) still load.
MANIFEST_VERSION = 2
READABLE_VERSIONS = (1, 2)
_STEP_RE = re.compile(r"^step_(\d{8})$")
_TMP_RE = re.compile(r"^step_\d{8}\.tmp-[0-9A-Za-z]+$")
_TRASH_PREFIX = ".trash-"
SHARD_RE = re.compile(r"^__(\d+)_\d+\.distcp$")


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def tmp_dir_name(step: int, nonce: str) -> str:
    return f"{step_dir_name(step)}.tmp-{nonce}"


@dataclass(frozen=True)
class CheckpointRef:
    tier: str
    step: int
    path: Path

    @property
    def name(self) -> str:
        """How logs and errors name it: ``durable/step_00000020``."""
        return f"{self.tier}/{self.path.name}"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_entry(rank: int, data: bytes) -> dict[str, Any]:
    """The manifest entry of a file holding `data`, written by `rank`."""
    return {"rank": rank, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def list_committed(root: Path, tier: str) -> list[CheckpointRef]:
    """Committed checkpoints of a tier, newest first (by name and marker only, no validation)."""
    if not root.is_dir():
        return []
    refs = []
    for entry in root.iterdir():
        m = _STEP_RE.match(entry.name)
        if m and entry.is_dir() and (entry / COMMITTED).is_file():
            refs.append(CheckpointRef(tier, int(m.group(1)), entry))
    return sorted(refs, key=lambda r: r.step, reverse=True)


def files_written_by(
    ckpt_dir: Path, rank: int, digests: Mapping[str, FileDigest] | None = None
) -> dict[str, dict[str, Any]]:
    """Manifest entries for the files `rank` wrote: its DCP shards, plus .metadata for rank 0.

    `digests`: what the writer hashed while writing (hashing.py); a file it lacks, or whose
    size on disk differs, is read back and hashed here."""
    entries: dict[str, dict[str, Any]] = {}
    for p in sorted(ckpt_dir.iterdir()):
        m = SHARD_RE.match(p.name)
        owner = int(m.group(1)) if m else (0 if p.name == DCP_METADATA else None)
        if owner == rank:
            size = p.stat().st_size
            known = (digests or {}).get(p.name)
            sha = known.sha256 if known is not None and known.size == size else sha256_file(p)
            entries[p.name] = {"rank": rank, "size": size, "sha256": sha}
    return entries


def build_manifest(
    step: int,
    tier: str,
    world_size: int,
    entries: list[dict[str, dict[str, Any]]],
    run: dict[str, Any] | None = None,
    backend: str | None = None,
) -> dict[str, Any]:
    files: dict[str, dict[str, Any]] = {}
    for per_rank in entries:
        files.update(per_rank)
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "step": step,
        "tier": tier,
        "world_size": world_size,
        "created_unix": time.time(),
        "files": files,
    }
    if run is not None:
        manifest["run"] = run
    if backend is not None:
        manifest["backend"] = backend
    return manifest


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a checkpoint directory; raises OSError or ValueError."""
    manifest = json.loads((path / MANIFEST).read_text())
    if not isinstance(manifest, dict):
        raise ValueError("manifest is not a JSON object")
    return manifest


def commit_dir(tmp_dir: Path, final_dir: Path, manifest: dict[str, Any]) -> None:
    """Manifest, marker, then the rename that makes the checkpoint visible."""
    fileio.write_json_atomic(tmp_dir / MANIFEST, manifest, indent=1, sort_keys=True)
    fileio.write_bytes_durably(tmp_dir / COMMITTED, f"{manifest['step']}\n".encode())
    fileio.fsync_dir(tmp_dir)
    if final_dir.exists():
        # A checkpoint of the same step from an earlier attempt (e.g. a restart that redid
        # this step): replace it, retiring the old one first so no mix of both is visible.
        remove_checkpoint(final_dir)
    os.rename(tmp_dir, final_dir)
    fileio.fsync_dir(final_dir.parent)


def remove_checkpoint(path: Path) -> None:
    """Drops the marker first so a half-deleted directory is never taken for a checkpoint."""
    try:
        (path / COMMITTED).unlink(missing_ok=True)
        trash = path.with_name(f"{_TRASH_PREFIX}{path.name}-{secrets.token_hex(4)}")
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def prune(root: Path, tier: str, keep: int) -> list[int]:
    """Keep-last-k: removes all but the `keep` newest committed checkpoints; returns their steps."""
    removed: list[int] = []
    for ref in list_committed(root, tier)[keep:]:
        remove_checkpoint(ref.path)
        removed.append(ref.step)
    return removed


def clean_stale(root: Path) -> list[str]:
    """Removes uncommitted tmp and trash directories left by a killed attempt."""
    removed: list[str] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        if entry.is_dir() and (_TMP_RE.match(entry.name) or entry.name.startswith(_TRASH_PREFIX)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def validate_checkpoint(
    path: Path, rank: int, verify_checksums: bool = True, reads: set[str] | None = None
) -> tuple[bool, str]:
    """Checks a committed checkpoint from the point of view of one rank.

    Given `reads` (the files this rank's load plan reads, see
    planning.files_read_by) the rank verifies exactly those and the DCP metadata:
    that covers replicated state another rank wrote and, after a change of world size, the
    shards DCP reshards from. Without it the rank verifies the files it wrote itself (same
    world size). Other nodes' files are never needed, so node-local tiers validate too.
    """
    m = _STEP_RE.match(path.name)
    if not m:
        return False, "not a committed checkpoint directory name"
    if not (path / COMMITTED).is_file():
        return False, "COMMITTED marker missing"
    try:
        manifest = read_manifest(path)
    except (OSError, ValueError) as e:
        return False, f"manifest unreadable: {e}"
    if manifest.get("version") not in READABLE_VERSIONS or manifest.get("step") != int(m.group(1)):
        return False, "manifest does not match the directory"
    if manifest.get("backend") is not None:
        return True, f"ok ({manifest['backend']} backend; the library validates its own data)"
    files: dict[str, dict[str, Any]] = manifest.get("files", {})
    if DCP_METADATA not in files:
        return False, "manifest lists no DCP metadata"
    if reads is None:
        if rank >= int(manifest.get("world_size", 0)):
            return False, f"rank {rank} did not exist when this checkpoint was written"
        check = {n: e for n, e in files.items() if e.get("rank") == rank or n == DCP_METADATA}
        if not any(SHARD_RE.match(n) for n in check):
            return False, f"manifest lists no shard written by rank {rank}"
    else:
        check = {DCP_METADATA: files[DCP_METADATA]}
        for name in sorted(reads):
            if name not in files:
                return False, f"{name} (read by rank {rank}) is not in the manifest"
            check[name] = files[name]
    for name, entry in sorted(check.items()):
        p = path / name
        try:
            size = p.stat().st_size
        except FileNotFoundError:
            return False, f"{name} missing"
        if size != entry["size"]:
            return False, f"{name} size {size} != manifest {entry['size']}"
        if verify_checksums and sha256_file(p) != entry["sha256"]:
            return False, f"{name} checksum mismatch"
    try:
        SafeFileSystemReader(str(path)).read_metadata()
    except Exception as e:  # noqa: BLE001 - any unpickling failure means "not loadable"
        return False, f"DCP metadata does not load: {e}"
    return True, "ok" if verify_checksums else "ok (sizes only: checksums not verified)"
