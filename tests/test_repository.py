"""Set-up and toolchain contracts: what a fresh machine and CI rely on."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHELLCHECK = Path(sys.executable).parent / "shellcheck"


def test_cdk_cli_is_pinned_to_the_2_1xxx_line_with_a_lockfile():
    package = json.loads((REPO / "package.json").read_text())
    version = package["devDependencies"]["aws-cdk"]
    assert re.fullmatch(r"2\.1\d{3}\.\d+", version), version
    lock = json.loads((REPO / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == version


def test_python_dependencies_are_pinned_exactly():
    text = (REPO / "pyproject.toml").read_text()
    block = text[text.index("dependencies = [") : text.index("[project.scripts]")]
    specs = re.findall(r'"([A-Za-z0-9_.\-\[\]]+)([<>=!~]=?[^"]*)?"', block)
    assert specs
    for name, spec in specs:
        assert spec.startswith("=="), f"{name} is not pinned exactly"
    constraints = (REPO / "constraints.txt").read_text().splitlines()
    pinned = [line for line in constraints if line and not line.startswith("#")]
    assert pinned and all("==" in line for line in pinned)


def test_readme_quickstart_has_exactly_the_two_commands_ci_uses():
    readme = (REPO / "README.md").read_text()
    quickstart = readme[readme.index("## Quickstart") :].split("\n## ", 1)[0]
    block = quickstart.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make synth", "make test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci


def test_cdk_app_runs_with_the_project_interpreter():
    cdk_json = json.loads((REPO / "cdk.json").read_text())
    assert cdk_json["app"] == ".venv/bin/python app.py"
    assert cdk_json["context"]["env"] == "dev"


def test_context_file_is_committed_with_every_environment_account():
    context = json.loads((REPO / "cdk.json").read_text())
    cached = json.loads((REPO / "cdk.context.json").read_text())
    for env in ("dev", "staging", "prod"):
        text = (REPO / "config" / f"{env}.yaml").read_text()
        account = re.search(r'^account: "(\d{12})"', text, re.M)[1]
        region = re.search(r"^region: (\S+)", text, re.M)[1]
        assert f"availability-zones:account={account}:region={region}" in cached
    assert "env" in context["context"]


def test_shell_scripts_are_shellcheck_clean():
    scripts = [REPO / "scripts" / "bootstrap.sh", REPO / ".ci" / "run"]
    result = subprocess.run(
        [str(SHELLCHECK), "-x", *map(str, scripts)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout
