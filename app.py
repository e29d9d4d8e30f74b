#!/usr/bin/env python3
"""CDK entry point: `cdk synth -c env=<dev|staging|prod>` (default dev), or the delivery
pipeline with `-c pipeline=true` (config/delivery/pipeline.yaml and every environment it
deploys).

The environment name is read here, once; its config file is validated and its network
planned before any construct exists, so an invalid config produces one line per problem,
a non-zero exit, and no templates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stacks.toolchain import use_bundled_node


def main() -> int:
    use_bundled_node()
    import aws_cdk as cdk

    from config.delivery import load_pipeline
    from config.errors import ConfigError
    from config.loader import load_environment, load_file
    from stacks.pipeline_stack import build_pipeline_app
    from stacks.platform import build_app

    app = cdk.App()
    if app.node.try_get_context("pipeline"):
        try:
            build_pipeline_app(load_pipeline(), app=app)
        except ConfigError as error:
            print(str(error), file=sys.stderr)
            return 1
        app.synth()
        return 0
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

    build_app(loaded, app=app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
