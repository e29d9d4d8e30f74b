"""The training image's lock: every line pinned with SHA-256s, every top-level pin of
requirements-container.txt locked at its version, nothing the base image provides, every
compiled package with a wheel for each architecture the image is built for, and the
generator's closure and marker rules (on small reports like pip's)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tools.container_lock import (
    ARCHITECTURES,
    LOCK,
    PROVIDED,
    REQUIREMENTS,
    is_platform_file,
    lock_text,
    locked,
    manylinux_platforms,
    roots,
    wheel_architectures,
)

_ENTRY = re.compile(
    r"^(?P<name>[a-z0-9-]+)==(?P<version>\S+)"
    r"(?P<hashes>( \\\n    --hash=sha256:[0-9a-f]{64})+)"
    r"(?P<files>(\n    # \S+)+)$"
)


def lock_files(text: str) -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Name -> (version, [(file name, sha256)]) of a lock; raises on any entry that is not
    `name==version` with SHA-256 hashes and, under it, one file name per hash."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    entries = [e for e in re.split(r"\n(?=[a-z0-9])", body.strip()) if e]
    found = {}
    for entry in entries:
        match = _ENTRY.fullmatch(entry)
        if match is None:
            raise ValueError(f"not pinned with hashes and their files: {entry!r}")
        hashes = re.findall(r"sha256:([0-9a-f]{64})", match["hashes"])
        files = re.findall(r"# (\S+)", match["files"])
        if len(hashes) != len(files):
            raise ValueError(f"{match['name']}: {len(hashes)} hashes for {len(files)} files")
        found[match["name"]] = (match["version"], list(zip(files, hashes, strict=True)))
    return found


def lock_entries(text: str) -> dict[str, str]:
    """Name -> version of a lock."""
    return {name: version for name, (version, _) in lock_files(text).items()}


def single_architecture_packages(text: str) -> list[str]:
    """Packages of a lock with a platform wheel but not one for every architecture."""
    missing = []
    for name, (_, files) in lock_files(text).items():
        platform_files = [f for f, _ in files if is_platform_file(f)]
        covered = set().union(*(wheel_architectures(f) for f in platform_files))
        if platform_files and covered != set(ARCHITECTURES):
            missing.append(name)
    return missing


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


def _item(name: str, version: str, *requires: str, filename: str = "") -> dict:
    filename = filename or f"{name}-{version}-py3-none-any.whl"
    return {
        "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        "download_info": {
            "url": f"https://files.example/{filename}",
            "archive_info": {"hashes": {"sha256": f"{len(filename):064x}"}},
        },
    }


def _wheel(name: str, version: str, architecture: str) -> dict:
    return _item(
        name, version, filename=f"{name}-{version}-cp312-cp312-manylinux_2_17_{architecture}.whl"
    )


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
        _wheel("uvloop", "0.23.0", "x86_64"),
        _item("colorama", "0.4.6"),
        _item("grace", "1.0", "armonly; platform_machine == 'aarch64'"),
        _item("armonly", "1.0"),
    ]
}
PLATFORM_REPORTS = {a: {"install": [_wheel("uvloop", "0.23.0", a)]} for a in ARCHITECTURES}


def test_closure_leaves_out_what_only_the_base_images_torch_needs():
    found = locked(
        REPORT, [Requirement("torch==2.11.0"), Requirement("agent==1.0")], PLATFORM_REPORTS
    )
    assert sorted(found) == ["agent", "h11", "typing-extensions", "uvicorn", "uvloop"]


def test_markers_are_read_for_the_images_platform_and_extras():
    found = locked(REPORT, [Requirement("uvicorn==0.38.0")], PLATFORM_REPORTS)
    assert "uvloop" not in found  # no extra asked for
    # Windows only
    assert "colorama" not in locked(REPORT, [Requirement("agent==1.0")], PLATFORM_REPORTS)


def test_a_dependency_of_one_architecture_only_is_refused():
    with pytest.raises(SystemExit, match="armonly needed on one architecture only"):
        locked(REPORT, [Requirement("grace==1.0")], PLATFORM_REPORTS)


def test_platform_wheels_are_locked_for_every_architecture_and_pure_files_once():
    found = locked(REPORT, [Requirement("agent==1.0")], PLATFORM_REPORTS)
    assert [wheel_architectures(f.filename) for f in found["uvloop"].files] == [
        {"x86_64"},
        {"aarch64"},
    ]
    assert [f.filename for f in found["h11"].files] == ["h11-0.16.0-py3-none-any.whl"]


def test_a_compiled_package_without_an_arm_wheel_is_refused():
    x86_only = {**PLATFORM_REPORTS, "aarch64": {"install": []}}
    with pytest.raises(SystemExit, match=r"uvloop==0.23.0 has no wheel for aarch64"):
        locked(REPORT, [Requirement("agent==1.0")], x86_only)


def test_lock_text_is_what_the_checker_reads(tmp_path: Path):
    text = lock_text(locked(REPORT, [Requirement("agent==1.0")], PLATFORM_REPORTS))
    assert lock_entries(text)["agent"] == "1.0"
    assert len(lock_files(text)["uvloop"][1]) == 2


def test_every_compiled_package_has_a_hash_for_both_architectures():
    files = lock_files(LOCK.read_text())
    compiled = [n for n, (_, fs) in files.items() if any(is_platform_file(f) for f, _ in fs)]
    # numpy, pydantic-core, uvloop, ... : the lock must carry compiled packages at all.
    assert {"numpy", "pydantic-core", "psutil", "xxhash"} <= set(compiled)
    assert single_architecture_packages(LOCK.read_text()) == []


def test_planted_lock_without_the_arm_wheel_is_caught():
    text = LOCK.read_text()
    _, files = lock_files(text)["numpy"]
    (arm_file, arm_hash), *_ = [(f, h) for f, h in files if "aarch64" in f]
    planted = text.replace(f" \\\n    --hash=sha256:{arm_hash}", "").replace(
        f"\n    # {arm_file}", ""
    )
    assert single_architecture_packages(planted) == ["numpy"]


def test_platform_tags_run_from_the_images_glibc_down_to_the_oldest_manylinux():
    assert manylinux_platforms("aarch64")[0] == "manylinux_2_39_aarch64"
    assert manylinux_platforms("aarch64")[-1] == "manylinux2014_aarch64"
    assert "manylinux1_x86_64" in manylinux_platforms("x86_64")
