"""Load an environment file, validate it, and plan the platform (config/plan.py): the one
path that both `cdk synth` (app.py) and `hpctl validate` take, so they can never disagree."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from config.capacity import NetworkLayout
from config.errors import ConfigError, Location, ScalarText, not_text, problem_lines
from config.plan import PlatformPlan, plan
from config.schema import EnvironmentConfig
from config.schema.base import (
    ACCOUNT_CONTEXT,
    ENVIRONMENT_CONTEXT,
    REGION_CONTEXT,
    ZONE_IDS_CONTEXT,
)
from config.zones import CONTEXT_FILE, recorded_zone_ids

CONFIG_DIR = Path(__file__).resolve().parent


# Environment files are a few KiB with a handful of nesting levels; anything far beyond is
# not an environment file, and the limits keep a hostile one from costing time or memory.
MAX_FILE_BYTES = 32 * 1024
MAX_DEPTH = 32


class _Refused(yaml.MarkedYAMLError):
    """YAML that parses but that environment files refuse; `problem` says what to do."""


class _ConfigLoader(yaml.SafeLoader):
    """safe_load for environment files, refusing what they never need and a hostile file
    could abuse:

    - aliases (`*name`): an alias repeats a value without copying it, so a few nested ones
      expand into billions of values once validated ("billion laughs");
    - nesting deeper than MAX_DEPTH (the composer recurses per level);
    - keys that are not text: lists and mappings as keys (`? [a, b]`), and unquoted keys YAML
      reads as numbers, booleans or null (`1:`, `yes:`);
    - a key given twice in one mapping (plain YAML keeps the last, silently dropping the
      first).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise _Refused(
                None,
                None,
                "YAML aliases (*name) are not allowed; write the value out",
                self._next_mark(),
            )
        if self._depth >= MAX_DEPTH:
            raise _Refused(
                None,
                None,
                f"nested more than {MAX_DEPTH} levels deep; settings need a few levels: "
                "check the brackets and the indentation",
                self._next_mark(),
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _next_mark(self) -> yaml.Mark | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        mark: yaml.Mark | None = getattr(event, "start_mark", None)
        return mark

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "a list" if isinstance(key_node, yaml.SequenceNode) else "a mapping"
                raise _Refused(
                    None,
                    None,
                    f"a key is {kind}; keys are names: write the key as text",
                    key_node.start_mark,
                )
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _Refused(
                    None,
                    None,
                    "merge keys (<<) are not allowed; write the keys out",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=deep)
            if key is None:
                raise _Refused(
                    None, None, "a key is empty or null; write the key's name", key_node.start_mark
                )
            if not isinstance(key, str):
                raise _Refused(
                    None, None, f"key {not_text(key, key_node.value)}", key_node.start_mark
                )
            if key in seen:
                raise _Refused(None, None, f"duplicate key {key!r}; keep one", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class LoadedEnvironment:
    """An environment file's validated config and its plan (config/plan.py), made once."""

    config: EnvironmentConfig
    plan: PlatformPlan
    source: Path

    @property
    def layout(self) -> NetworkLayout:
        return self.plan.layout


# What to write instead, for fields whose rule is a pattern.
_PATTERN_HINTS = {
    "account": "use the 12-digit AWS account ID, quoted",
    "environment": "use 2-32 lowercase letters, digits and dashes, starting with a letter",
    "name": "use up to 63 letters, digits and dashes, starting and ending with a letter or digit",
    "weekly_maintenance_start": 'use d:HH:MM in UTC with d = 1 (Monday) to 7, quoted: "7:03:00"',
    "file_system_path": "use an absolute path such as /data",
    "bucket_prefix": "use an empty string or a prefix ending in '/', e.g. datasets/",
}


def parse_config(
    data: object,
    source: str,
    *,
    scalar_text: ScalarText | None = None,
    zone_ids: Mapping[str, str] | None = None,
) -> EnvironmentConfig:
    """Validate `data`; `scalar_text` gives a value's text as written in the file (see
    `config.errors.problem_lines`); `zone_ids` is the account's AZ name -> zone ID mapping
    (config/zones.py), which zones written by ID need: by default the one cdk.context.json
    records for the account and Region in `data`."""
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): expected a mapping of settings"])
    if zone_ids is None:
        zone_ids = _recorded_zone_ids(data, CONTEXT_FILE)
    context = {
        ENVIRONMENT_CONTEXT: _text(data, "environment"),
        ACCOUNT_CONTEXT: _text(data, "account"),
        REGION_CONTEXT: _text(data, "region"),
        ZONE_IDS_CONTEXT: dict(zone_ids),
    }
    try:
        return EnvironmentConfig.model_validate(data, context=context)
    except ValidationError as error:
        raise ConfigError(
            source, problem_lines(error, pattern_hints=_PATTERN_HINTS, scalar_text=scalar_text)
        ) from None


def planned(config: EnvironmentConfig, source: Path) -> LoadedEnvironment:
    """`config` (from `source`) with its plan: what `load_file` gives once the file is read."""
    return LoadedEnvironment(config=config, plan=plan(config, str(source)), source=source)


def _read_text(path: Path) -> str:
    """The file's text; a file that is missing, too large or not UTF-8 is one problem."""
    source = str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(source, ["file not found; check the path or the env name"]) from None
    except OSError as error:
        reason = error.strerror or error.__class__.__name__
        raise ConfigError(source, [f"cannot read the file ({reason}); check the path"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(
            source,
            [
                f"file is larger than {MAX_FILE_BYTES // 1024} KiB; settings files are a "
                "few KiB: check that this is the right file"
            ],
        )
    if not raw.strip():
        raise ConfigError(source, ["file is empty; write its settings"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        raise ConfigError(
            source,
            [
                f"file is not UTF-8: byte 0x{raw[error.start]:02x} at offset {error.start} "
                f"(line {line}) is not valid UTF-8; save the file as UTF-8"
            ],
        ) from None


def _parse_yaml(text: str, source: str) -> tuple[yaml.Node, object]:
    """The file's one YAML document: its node tree (which keeps each scalar's text as
    written) and its data."""
    # YAML refuses most control characters; say which and where (the reader's own error
    # names neither line nor character).
    unprintable = yaml.reader.Reader.NON_PRINTABLE.search(text)
    if unprintable is not None:
        line = text.count("\n", 0, unprintable.start()) + 1
        raise ConfigError(
            source,
            [
                f"(yaml) line {line}: character U+{ord(unprintable.group()[0]):04X} is not "
                "allowed in YAML; remove it"
            ],
        )
    loader = None
    try:
        loader = _ConfigLoader(text)
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(
                source,
                ["file has only comments and blank lines; write its settings"],
            )
        data: object = loader.construct_document(node)
    except yaml.YAMLError as error:
        raise ConfigError(source, [_yaml_problem(error)]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return node, data


def _yaml_problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
    problem = getattr(error, "problem", None) or "invalid YAML"
    if isinstance(error, _Refused):
        return f"(yaml) {where}: {problem}"
    return f"(yaml) {where}: {problem}; fix the YAML syntax"


def _scalar_text(root: yaml.Node) -> ScalarText:
    """Location (as pydantic reports it) -> the scalar's text as written, if there is one."""

    def text_at(loc: Location) -> str | None:
        node = root
        for part in loc:
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                found = [
                    v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part
                ]
                if not found:
                    return None
                node = found[0]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    return None
                node = node.value[part]
            else:
                return None
        return node.value if isinstance(node, yaml.ScalarNode) else None

    return text_at


def read_yaml(path: Path) -> object:
    """The data of a YAML settings file, read as environment files are: one `ConfigError`
    line for a file that is missing, empty, too large, not UTF-8 or not the YAML these files
    allow (aliases, deep nesting, keys that are not text, duplicate keys)."""
    return read_document(path)[0]


def read_document(path: Path) -> tuple[object, ScalarText]:
    """`read_yaml`'s data, and each scalar's text as written: pass it to `problem_lines`
    (`scalar_text=`) so that a value YAML read as another type is named as written."""
    source = str(path)
    root, data = _parse_yaml(_read_text(path), source)
    return data, _scalar_text(root)


def _text(data: dict[str, Any], key: str) -> str | None:
    """A top-level text value as the schema reads it (stripped), for validation context."""
    value = data.get(key)
    return value.strip() if isinstance(value, str) else None


def _recorded_zone_ids(data: object, context_file: Path) -> dict[str, str]:
    if not isinstance(data, dict):
        return {}
    account, region = _text(data, "account"), _text(data, "region")
    if account is None or region is None:
        return {}
    return recorded_zone_ids(account, region, context_file)


def load_file(path: Path, context_file: Path = CONTEXT_FILE) -> LoadedEnvironment:
    source = str(path)
    data, scalar_text = read_document(path)
    config = parse_config(
        data, source, scalar_text=scalar_text, zone_ids=_recorded_zone_ids(data, context_file)
    )
    loaded = planned(config, path)
    # Files in config/ are selected by name (-c env=<name>): the name and the field must agree,
    # or two files would deploy over the same stacks.
    if path.resolve().parent == CONFIG_DIR and path.stem != config.environment:
        raise ConfigError(
            source,
            [
                f"environment: is {config.environment!r} but the file is {path.name}; make them match"
            ],
        )
    return loaded


def load_environment(
    name: str, config_dir: Path = CONFIG_DIR, context_file: Path = CONTEXT_FILE
) -> LoadedEnvironment:
    """Load config/<name>.yaml (what `cdk synth -c env=<name>` selects)."""
    known = sorted(p.stem for p in config_dir.glob("*.yaml"))
    if name not in known:
        raise ConfigError(
            "-c env", [f"unknown environment {name!r}; use one of {', '.join(known)}"]
        )
    loaded = load_file(config_dir / f"{name}.yaml", context_file)
    if loaded.config.environment != name:
        raise ConfigError(
            str(loaded.source),
            [
                f"environment: is {loaded.config.environment!r} but the file is {name}.yaml; make them match"
            ],
        )
    return loaded
