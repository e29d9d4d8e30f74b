"""The app as `cdk synth` runs it: the CDK CLI from package-lock.json, offline, no credentials.

Each test starts the CLI (Node, then app.py): seconds each, so the module is `slow`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config.names import STACK_UNITS, PlatformNames
from tests.support import REPO, environment_data

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def cdk_synth(*args: str, outdir: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(home),
        # No credentials anywhere: synth must not need them.
        "AWS_CONFIG_FILE": str(home / "missing-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "missing-credentials"),
        "CDK_DISABLE_VERSION_CHECK": "1",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "NPM_CONFIG_LOGLEVEL": "error",
        "NPM_CONFIG_UPDATE_NOTIFIER": "false",
        # The library code jsii unpacked for this process (no credentials in it): without
        # it, the fresh HOME makes the first synth unpack aws-cdk-lib again (seconds).
        "JSII_RUNTIME_PACKAGE_CACHE_ROOT": os.environ.get(
            "JSII_RUNTIME_PACKAGE_CACHE_ROOT",
            str(Path.home() / ".cache" / "aws" / "jsii" / "package-cache"),
        ),
    }
    return subprocess.run(
        [str(BIN / "npx"), "cdk", "synth", *args, "--quiet", "--output", str(outdir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


def _write_broken(tmp_path: Path, mutate) -> Path:
    data = environment_data("prod")
    mutate(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_invalid_config_stops_synth_with_one_line_and_no_templates(tmp_path, home):
    # A network plan that does not fit: found after the schema passed, still before any
    # construct exists. Which rules reject what is the config tests' business; app.py has
    # one path for every config error, taken here.
    field = "network.cluster_cidr"
    config = _write_broken(tmp_path, lambda d: d["network"].update(cluster_cidr="10.1.0.0/22"))
    outdir = tmp_path / "out"
    result = cdk_synth("-c", f"config={config}", outdir=outdir, home=home)
    assert result.returncode != 0
    ours = [line for line in result.stderr.splitlines() if line.startswith(str(config))]
    assert len(ours) == 1, result.stderr
    assert ours[0].startswith(f"{config}: {field}: ")
    assert "Traceback" not in result.stderr + result.stdout
    assert not list(outdir.glob("*.template.json"))


def test_unknown_environment_is_one_line(tmp_path, home):
    result = cdk_synth("-c", "env=qa", outdir=tmp_path / "out", home=home)
    assert result.returncode != 0
    assert "-c env: unknown environment 'qa'; use one of dev, prod, staging" in result.stderr
    assert "Traceback" not in result.stderr


def test_prod_synthesizes_offline_on_a_supported_node(tmp_path, home):
    outdir = tmp_path / "out"
    result = cdk_synth("-c", "env=prod", outdir=outdir, home=home)
    assert result.returncode == 0, result.stderr[-3000:]
    names = sorted(p.name for p in outdir.glob("*.template.json"))
    stack = PlatformNames("prod").stack
    assert names == sorted(f"{stack(unit)}.template.json" for unit in STACK_UNITS.values())
    assert "end-of-life" not in result.stderr + result.stdout
    assert os.path.exists(outdir / "manifest.json")
