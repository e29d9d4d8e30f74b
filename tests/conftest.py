"""Shared fixtures: each environment's app is synthesized once per test session."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from stacks.toolchain import use_bundled_node

REPO = Path(__file__).resolve().parent.parent
ENVIRONMENTS = ("dev", "staging", "prod")

use_bundled_node()


@dataclass
class SynthResult:
    env_name: str
    outdir: Path
    stacks: dict  # stack short name ("network", ...) -> aws_cdk.Stack
    templates: dict  # stack short name -> template dict
    platform: object  # stacks.platform.PlatformStacks

    def template(self, short_name: str):
        from aws_cdk.assertions import Template

        return Template.from_json(self.templates[short_name])

    def template_path(self, short_name: str) -> Path:
        return self.outdir / f"{self.stacks[short_name].stack_name}.template.json"


def synthesize(env_name: str, outdir: Path, *, config_dir: Path | None = None) -> SynthResult:
    """Build and synthesize one environment exactly as app.py does (nag plugin included)."""
    from config.loader import CONFIG_DIR, load_environment
    from stacks.platform import build_app

    loaded = load_environment(env_name, config_dir or CONFIG_DIR)
    app, platform = build_app(loaded, outdir=str(outdir))
    app.synth()
    stacks = platform.by_name()
    templates = {
        name: json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
        for name, stack in stacks.items()
    }
    return SynthResult(env_name, outdir, stacks, templates, platform)


@pytest.fixture(scope="session")
def synth_all(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthResult]:
    return {
        env: synthesize(env, tmp_path_factory.mktemp(f"cdk-{env}")) for env in ENVIRONMENTS
    }


@pytest.fixture(scope="session")
def dev(synth_all: dict[str, SynthResult]) -> SynthResult:
    return synth_all["dev"]


@pytest.fixture(scope="session")
def staging(synth_all: dict[str, SynthResult]) -> SynthResult:
    return synth_all["staging"]


@pytest.fixture(scope="session")
def prod(synth_all: dict[str, SynthResult]) -> SynthResult:
    return synth_all["prod"]
