"""Synth time per environment, measured side by side in one run.

Prints one JSON line with two figures per environment and each one's ratio to dev:
- `synth_s`: median of --repeat in-process synths after a warm-up (the app itself: config
  validation, capacity plan, constructs, cdk-nag), jsii start-up excluded;
- `cli_synth_s`: median wall time of `npx cdk synth -c env=<name>` (what a user or CI waits
  for: CLI start, a fresh Python and jsii, synth, cdk-nag, assembly written).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from stacks.toolchain import use_bundled_node  # noqa: E402 - needs the repository on sys.path

use_bundled_node()


def synth_once(env_name: str) -> float:
    from config.loader import load_environment
    from stacks.platform import build_app

    with tempfile.TemporaryDirectory() as outdir:
        start = time.perf_counter()
        app, _ = build_app(load_environment(env_name), outdir=outdir)
        app.synth()
        return time.perf_counter() - start


def cli_synth_once(env_name: str) -> float:
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "CDK_DISABLE_VERSION_CHECK": "1",
        "NPM_CONFIG_LOGLEVEL": "error",
    }
    with tempfile.TemporaryDirectory() as outdir:
        start = time.perf_counter()
        subprocess.run(
            [
                str(bin_dir / "npx"),
                "cdk",
                "synth",
                "-c",
                f"env={env_name}",
                "--quiet",
                "-o",
                outdir,
            ],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    envs = ("dev", "staging", "prod")
    start = time.perf_counter()
    import aws_cdk  # noqa: F401  (jsii start-up, reported separately)

    startup = time.perf_counter() - start
    synth_once("dev")  # warm-up
    samples: dict[str, list[float]] = {env: [] for env in envs}
    for _ in range(args.repeat):
        for env in envs:  # interleaved, so drift hits every environment alike
            samples[env].append(synth_once(env))
    medians = {env: statistics.median(s) for env, s in samples.items()}
    cli_samples: dict[str, list[float]] = {env: [] for env in envs}
    for _ in range(args.repeat):
        for env in envs:
            cli_samples[env].append(cli_synth_once(env))
    cli = {env: statistics.median(s) for env, s in cli_samples.items()}
    print(
        json.dumps(
            {
                "benchmark": "synth_time",
                "jsii_startup_s": round(startup, 2),
                "repeat": args.repeat,
                "synth_s": {env: round(v, 2) for env, v in medians.items()},
                "ratio_to_dev": {env: round(v / medians["dev"], 2) for env, v in medians.items()},
                "cli_synth_s": {env: round(v, 2) for env, v in cli.items()},
                "cli_ratio_to_dev": {env: round(v / cli["dev"], 2) for env, v in cli.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
