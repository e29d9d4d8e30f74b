#!/usr/bin/env python3
"""CDK entry point: `cdk synth -c env=<dev|staging|prod>` (default dev).

The environment name is read here, once; its config file is validated and its network
planned before any construct exists, so an invalid config produces one line per problem,
a non-zero exit, and no templates.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _use_bundled_node() -> None:
    # jsii spawns `node`; prefer the pinned Node in the virtualenv over an end-of-life system one.
    bundled = Path(sys.executable).parent / "node"
    if bundled.exists():
        os.environ.setdefault("JSII_NODE", str(bundled))


def main() -> int:
    _use_bundled_node()
    from config.loader import ConfigError, load_environment, load_file

    import aws_cdk as cdk

    app = cdk.App()
    # `-c config=path/to/file.yaml` synthesizes a file outside config/ (e.g. a PR preview);
    # `-c env=<name>` selects config/<name>.yaml.
    config_file = app.node.try_get_context("config")
    env_name = app.node.try_get_context("env") or "dev"
    try:
        loaded = (
            load_file(Path(str(config_file))) if config_file else load_environment(str(env_name))
        )
    except ConfigError as error:
        print(str(error), file=sys.stderr)
        return 1

    from stacks.platform import build_platform, register_policy_checks

    register_policy_checks(app)
    build_platform(app, loaded)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
