"""Shared fixtures: each environment's app is synthesized once per test session."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ENVIRONMENTS = ("dev", "staging", "prod")

# jsii spawns `node`: use the pinned Node next to the interpreter, as app.py does.
_bundled_node = Path(sys.executable).parent / "node"
if _bundled_node.exists():
    os.environ.setdefault("JSII_NODE", str(_bundled_node))


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


def cdk_json_context() -> dict:
    """The feature flags and context `cdk synth` passes to app.py, so tests synthesize the
    same templates the CLI does."""
    return json.loads((REPO / "cdk.json").read_text())["context"]


def synthesize(env_name: str, outdir: Path, *, config_dir: Path | None = None) -> SynthResult:
    """Build and synthesize one environment exactly as app.py does (nag plugin included)."""
    import aws_cdk as cdk

    from config.loader import CONFIG_DIR, load_environment
    from stacks.platform import build_platform, register_policy_checks

    loaded = load_environment(env_name, config_dir or CONFIG_DIR)
    app = cdk.App(outdir=str(outdir), context={**cdk_json_context(), "env": env_name})
    register_policy_checks(app)
    platform = build_platform(app, loaded)
    app.synth()
    stacks = {
        name: getattr(platform, name) for name in ("network", "storage", "eks", "hyperpod", "cluster_addons")
    }
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
