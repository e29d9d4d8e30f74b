"""Load an environment file, validate it, and plan its network: the one path that both
`cdk synth` (app.py) and `hpctl validate` take, so they can never disagree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from config.capacity import (
    CapacityError,
    GroupPlan,
    NetworkLayout,
    default_headroom,
    plan_group,
    plan_network,
)
from config.errors import ConfigError, problem_lines
from config.schema import EnvironmentConfig

CONFIG_DIR = Path(__file__).resolve().parent


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (plain YAML keeps the last,
    silently dropping the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}; keep one", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class LoadedEnvironment:
    config: EnvironmentConfig
    layout: NetworkLayout
    source: Path


# What to write instead, for fields whose rule is a pattern.
_PATTERN_HINTS = {
    "account": "use the 12-digit AWS account ID, quoted",
    "environment": "use 2-32 lowercase letters, digits and dashes, starting with a letter",
    "name": "use up to 63 letters, digits and dashes, starting and ending with a letter or digit",
    "weekly_maintenance_start": "use d:HH:MM in UTC with d = 1 (Monday) to 7, e.g. 7:03:00",
    "file_system_path": "use an absolute path such as /data",
    "bucket_prefix": "use an empty string or a prefix ending in '/', e.g. datasets/",
}


def parse_config(data: object, source: str) -> EnvironmentConfig:
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): expected a mapping of settings"])
    try:
        return EnvironmentConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, problem_lines(error, pattern_hints=_PATTERN_HINTS)) from None


def _group_plans(config: EnvironmentConfig) -> list[GroupPlan]:
    percent = config.network.default_headroom_percent
    return [
        plan_group(
            name=g.name,
            instance_type=g.instance_type,
            count=g.count,
            orchestrator=config.hyperpod.orchestrator,
            interface=g.interface,
            headroom_nodes=g.headroom_nodes
            if g.headroom_nodes is not None
            else default_headroom(g.count, percent),
            availability_zone=g.availability_zone,
        )
        for g in config.hyperpod.groups_by_name()
    ]


def plan_layout(config: EnvironmentConfig, source: str = "config") -> NetworkLayout:
    net = config.network
    try:
        return plan_network(
            vpc_cidr=net.vpc_cidr,
            cluster_cidr=net.cluster_cidr,
            availability_zones=net.availability_zones,
            public_prefix=net.public_subnet_prefix,
            infra_prefix=net.infra_subnet_prefix,
            cluster_prefix=net.cluster_subnet_prefix,
            groups=_group_plans(config),
            cluster_level_azs=config.hyperpod.availability_zones,
        )
    except CapacityError as error:
        raise ConfigError(source, [str(error)]) from None


def load_file(path: Path) -> LoadedEnvironment:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, ["file not found; check the path or the env name"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(source, [f"cannot read the file ({error.__class__.__name__})"]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise ConfigError(source, [f"(yaml) {where}: {problem}; fix the YAML syntax"]) from None
    config = parse_config(data, source)
    layout = plan_layout(config, source)
    # Files in config/ are selected by name (-c env=<name>): the name and the field must agree,
    # or two files would deploy over the same stacks.
    if path.resolve().parent == CONFIG_DIR and path.stem != config.environment:
        raise ConfigError(
            source,
            [
                f"environment: is {config.environment!r} but the file is {path.name}; make them match"
            ],
        )
    return LoadedEnvironment(config=config, layout=layout, source=path)


def load_environment(name: str, config_dir: Path = CONFIG_DIR) -> LoadedEnvironment:
    """Load config/<name>.yaml (what `cdk synth -c env=<name>` selects)."""
    known = sorted(p.stem for p in config_dir.glob("*.yaml"))
    if name not in known:
        raise ConfigError(
            "-c env", [f"unknown environment {name!r}; use one of {', '.join(known)}"]
        )
    loaded = load_file(config_dir / f"{name}.yaml")
    if loaded.config.environment != name:
        raise ConfigError(
            str(loaded.source),
            [
                f"environment: is {loaded.config.environment!r} but the file is {name}.yaml; make them match"
            ],
        )
    return loaded
