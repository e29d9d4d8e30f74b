"""The training image's lock: every line pinned with a SHA-256, every top-level pin of
requirements-container.txt locked at its version, nothing the base image provides, and the
generator's closure and marker rules (on a small report like pip's)."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement

from tools.container_lock import LOCK, PROVIDED, REQUIREMENTS, lock_text, locked, roots

_ENTRY = re.compile(r"^(?P<name>[a-z0-9-]+)==(?P<version>\S+) \\\n    --hash=sha256:[0-9a-f]{64}$")


def lock_entries(text: str) -> dict[str, str]:
    """Name -> version of a lock; raises on any entry that is not `name==version` with one
    SHA-256 hash."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    entries = [e for e in re.split(r"\n(?=[a-z0-9])", body.strip()) if e]
    found = {}
    for entry in entries:
        match = _ENTRY.fullmatch(entry)
        if match is None:
            raise ValueError(f"not pinned with a hash: {entry!r}")
        found[match["name"]] = match["version"]
    return found


def test_every_lock_entry_is_pinned_with_a_hash():
    entries = lock_entries(LOCK.read_text())
    assert len(entries) > 20  # transitive dependencies included


def test_planted_unhashed_entry_is_rejected():
    text = LOCK.read_text() + "requests==2.32.4\n"
    try:
        lock_entries(text)
    except ValueError as error:
        assert "requests==2.32.4" in str(error)
    else:
        raise AssertionError("an entry without a hash passed")


def test_top_level_pins_are_locked_at_their_versions_and_torch_comes_from_the_base():
    entries = lock_entries(LOCK.read_text())
    for requirement in roots(REQUIREMENTS):
        name = requirement.name.lower()
        if name in PROVIDED:
            assert name not in entries
            continue
        (version,) = [s.version for s in requirement.specifier]
        assert entries[name] == version, name
    assert not [n for n in entries if n.startswith("nvidia-") or n in ("triton", "sympy")]


def _item(name: str, version: str, *requires: str) -> dict:
    return {
        "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        "download_info": {"archive_info": {"hashes": {"sha256": f"{len(name):064x}"}}},
    }


REPORT = {
    "install": [
        _item("torch", "2.11.0", "sympy>=1", "typing-extensions>=4"),
        _item("sympy", "1.14.0"),
        _item("typing_extensions", "4.16.0"),
        _item(
            "agent", "1.0", "torch<2.12", "uvicorn[standard]", "colorama; sys_platform == 'win32'"
        ),
        _item("uvicorn", "0.38.0", "h11", "uvloop; extra == 'standard'", "typing-extensions"),
        _item("h11", "0.16.0"),
        _item("uvloop", "0.23.0"),
        _item("colorama", "0.4.6"),
    ]
}


def test_closure_leaves_out_what_only_the_base_images_torch_needs():
    found = locked(REPORT, [Requirement("torch==2.11.0"), Requirement("agent==1.0")])
    assert sorted(found) == ["agent", "h11", "typing-extensions", "uvicorn", "uvloop"]


def test_markers_are_read_for_the_images_platform_and_extras():
    found = locked(REPORT, [Requirement("uvicorn==0.38.0")])
    assert "uvloop" not in found  # no extra asked for
    assert "colorama" not in locked(REPORT, [Requirement("agent==1.0")])  # Windows only


def test_lock_text_is_what_the_checker_reads(tmp_path: Path):
    text = lock_text(locked(REPORT, [Requirement("agent==1.0")]))
    assert lock_entries(text)["agent"] == "1.0"
