"""The house's floors, read from the code's own imports: facts and schema (`config`) at the
bottom, constructs above them, stacks above those; the CLI beside the stacks; the training
container alone. A test per rule, plus a planted violation that proves the checker reads."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("config", "platform_constructs", "stacks", "hpctl", "training")

# What each package may import of the others (its own modules always).
ALLOWED: Mapping[str, frozenset[str]] = {
    "config": frozenset(),
    "platform_constructs": frozenset({"config"}),
    "stacks": frozenset({"config", "platform_constructs"}),
    "hpctl": frozenset({"config", "training"}),
    "training": frozenset(),
}
# Single modules that reach a floor their package may not, each with its reason.
EXCEPTIONS: Mapping[str, frozenset[str]] = {
    # `hpctl guard --env` synthesizes the environment in-process to compare its templates
    # with what is deployed: it runs the CDK app, as `cdk synth` would.
    "hpctl.guard": frozenset({"stacks"}),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str) -> Iterable[str]:
    """Every module a file imports, at any depth of the file (a function-level import ties
    two modules as much as a top-level one)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """module -> the project modules it imports (only names that are modules of `sources`)."""
    return {
        module: {name for name in imports_of(text) if name in sources and name != module}
        for module, text in sources.items()
    }


def layer_violations(graph: Mapping[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        package = module.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            allowed = ALLOWED.get(package, frozenset()) | EXCEPTIONS.get(module, frozenset())
            if other != package and other not in allowed:
                problems.append(f"{module} imports {target}")
    return problems


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_sources() -> dict[str, str]:
    return {
        module_name(path): path.read_text()
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(_package_sources())


def test_every_package_imports_only_the_floors_below_it(graph) -> None:
    assert layer_violations(graph) == []


def test_no_modules_import_each_other_in_a_circle(graph) -> None:
    assert cycles(graph) == []


def test_planted_violations_are_found() -> None:
    planted = import_graph(
        {
            "config.facts": "from platform_constructs.network import Network\n",
            "platform_constructs.network": "import config.facts\n",
            "hpctl.a": "def f():\n    from hpctl.b import g\n",
            "hpctl.b": "from hpctl import a\nfrom hpctl.a import f\n",
        }
    )
    assert layer_violations(planted) == ["config.facts imports platform_constructs.network"]
    assert cycles(planted) == [
        ["config.facts", "platform_constructs.network"],
        ["hpctl.a", "hpctl.b"],
    ]
