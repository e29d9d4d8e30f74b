"""The pull-request workflow: valid against the GitHub workflow schema (check-jsonschema's
vendored copy, offline), least privilege, pinned actions, and in step with the project (the
README's test command, the pipeline's environments)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from config.delivery import load_pipeline

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
PULL_REQUEST = ROOT / ".github" / "workflows" / "pull-request.yml"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def _check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "check_jsonschema",
            "--builtin-schema", "vendor.github-workflows",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip


def _workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(PULL_REQUEST.read_text())
    return loaded


def _steps() -> list[dict[str, Any]]:
    return [step for job in _workflow()["jobs"].values() for step in job["steps"]]


def test_workflows_match_the_github_schema():
    assert WORKFLOWS
    result = _check(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_planted_schema_violation_is_caught(tmp_path: Path):
    text = PULL_REQUEST.read_text()
    assert "runs-on: ubuntu-24.04" in text
    path = tmp_path / "broken.yml"
    path.write_text(text.replace("runs-on: ubuntu-24.04", "runs_on: ubuntu-24.04", 1))
    assert _check(PULL_REQUEST).returncode == 0
    result = _check(path)
    assert result.returncode == 1, result.stdout
    assert "runs_on" in result.stdout


def test_actions_are_pinned_to_full_commits():
    uses = [step["uses"] for step in _steps() if "uses" in step]
    assert uses and all(PINNED.fullmatch(u) for u in uses), uses


def test_least_privilege_and_no_stored_keys():
    workflow = _workflow()
    assert workflow["permissions"] == {"contents": "read"}
    writers = {
        name: job["permissions"] for name, job in workflow["jobs"].items() if "permissions" in job
    }
    assert writers == {"plan": {"contents": "read", "id-token": "write", "pull-requests": "write"}}
    text = PULL_REQUEST.read_text()
    assert "AWS_ACCESS_KEY_ID" not in text and "aws-secret-access-key" not in text
    (credentials,) = [s for s in _steps() if "configure-aws-credentials" in s.get("uses", "")]
    assert "role-to-assume" in credentials["with"]


def test_runs_the_readme_test_command_and_plans_every_pipeline_environment():
    workflow = _workflow()
    runs = [step.get("run", "") for step in workflow["jobs"]["test"]["steps"]]
    readme = (ROOT / "README.md").read_text()
    assert "make test" in runs and "make test" in readme
    matrix = workflow["jobs"]["plan"]["strategy"]["matrix"]["environment"]
    assert matrix == load_pipeline().config.environments
    plan = "\n".join(step.get("run", "") for step in workflow["jobs"]["plan"]["steps"])
    assert 'hpctl guard --env "$ENVIRONMENT"' in plan and "cdk diff" in plan


def test_plan_job_runs_in_the_protected_environment_its_role_trusts():
    plan = _workflow()["jobs"]["plan"]
    prefix = load_pipeline().config.pull_requests.github_environment_prefix
    assert plan["environment"] == prefix + "${{ matrix.environment }}"
    (credentials,) = [s for s in plan["steps"] if "configure-aws-credentials" in s.get("uses", "")]
    assert (
        credentials["with"]["role-to-assume"] == "${{ steps.settings.outputs.pull_request_role }}"
    )
    text = PULL_REQUEST.read_text()
    assert "lookup" not in text and "vars." not in text
    assert "--no-change-set" in text
