"""config/delivery/pipeline.yaml: one test per rule, each a planted violation that must come
back as exactly one line naming the field."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.delivery import PIPELINE_FILE, load_pipeline
from config.errors import ConfigError


def _errors(tmp_path: Path, mutate: Callable[[dict[str, Any]], None]) -> list[str]:
    data = yaml.safe_load(PIPELINE_FILE.read_text())
    mutate(data)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    return caught.value.lines


def _one_error_on(tmp_path: Path, field: str, mutate: Callable[[dict[str, Any]], None]) -> str:
    lines = _errors(tmp_path, mutate)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{field}: "), lines
    return lines[0]


def test_shipped_pipeline_deploys_every_environment_with_approval_before_prod():
    loaded = load_pipeline()
    assert loaded.config.environments == ["dev", "staging", "prod"]
    assert [e.config.environment for e in loaded.environments] == ["dev", "staging", "prod"]
    assert loaded.config.approval_before == ["prod"]


def test_connection_arn_is_a_codeconnections_connection(tmp_path: Path):
    def token_instead(d: dict[str, Any]) -> None:
        d["source"]["connection_arn"] = "ghp_0123456789abcdef"

    _one_error_on(tmp_path, "source.connection_arn", token_instead)


def test_repository_is_owner_slash_name(tmp_path: Path):
    def url(d: dict[str, Any]) -> None:
        d["source"]["repository"] = "https://github.com/example-org/hyperpod-platform"

    _one_error_on(tmp_path, "source.repository", url)


def test_environments_are_listed_once(tmp_path: Path):
    def twice(d: dict[str, Any]) -> None:
        d["environments"] = ["dev", "dev", "prod"]

    line = _one_error_on(tmp_path, "environments", twice)
    assert "dev" in line


def test_approval_names_a_deployed_environment(tmp_path: Path):
    def stray(d: dict[str, Any]) -> None:
        d["approval_before"] = ["production"]

    line = _one_error_on(tmp_path, "approval_before[0]", stray)
    assert "dev, staging, prod" in line


def test_notification_addresses_are_emails(tmp_path: Path):
    def not_email(d: dict[str, Any]) -> None:
        d["notify"]["emails"] = ["oncall"]

    _one_error_on(tmp_path, "notify.emails[0]", not_email)


def test_unknown_environment_is_one_line(tmp_path: Path):
    def unknown(d: dict[str, Any]) -> None:
        d["environments"] = ["dev", "qa", "prod"]

    (line,) = _errors(tmp_path, unknown)
    assert "unknown environment 'qa'" in line
