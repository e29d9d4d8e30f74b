"""The house's size limits, read from the code: no module of 600 lines or more and no function
(any def, methods and nested functions included) over 80 lines, outside the benchmarks. A
long function is a list of steps that deserves names; a long module, several subjects. A
planted violation proves the checker finds both."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Where the limits hold: every Python file under these folders, and these single files.
FOLDERS = ("config", "platform_constructs", "stacks", "hpctl", "training", "tools", "lifecycle")
FILES = ("app.py",)
SCRIPT_FOLDER = "scripts"
MODULE_LINES_LIMIT = 600  # a module of this many lines or more is too long
FUNCTION_LINES_LIMIT = 80  # a function of more lines than this is too long


def checked_files() -> list[Path]:
    paths = [path for folder in FOLDERS for path in (REPO / folder).rglob("*.py")]
    paths += (REPO / SCRIPT_FOLDER).rglob("*.py")
    paths += (REPO / name for name in FILES)
    return sorted(path for path in paths if ".venv" not in path.parts)


def limit_violations(source: str, name: str) -> Iterator[str]:
    """One line per module or function of `source` (read from the file `name`) past a limit."""
    lines = len(source.splitlines())
    if lines >= MODULE_LINES_LIMIT:
        yield f"{name}: module has {lines} lines (limit: under {MODULE_LINES_LIMIT})"
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LINES_LIMIT:
                yield (
                    f"{name}:{node.lineno}: function {node.name} has {length} lines "
                    f"(limit: {FUNCTION_LINES_LIMIT})"
                )


def test_the_limits_cover_the_code() -> None:
    files = checked_files()
    for folder in (*FOLDERS, SCRIPT_FOLDER):
        assert any(path.is_relative_to(REPO / folder) for path in files), folder
    assert REPO / "app.py" in files


def test_no_module_or_function_is_too_long() -> None:
    problems = [
        problem
        for path in checked_files()
        for problem in limit_violations(
            path.read_text(encoding="utf-8"), str(path.relative_to(REPO))
        )
    ]
    assert not problems, "split these into named parts:\n" + "\n".join(problems)


def planted_function(name: str, lines: int, indent: str = "") -> list[str]:
    """The source lines of a function `lines` lines long."""
    return [f"{indent}def {name}():"] + [f"{indent}    step_{i} = {i}" for i in range(lines - 1)]


def test_a_planted_violation_is_found() -> None:
    at_limit = planted_function("at_limit", FUNCTION_LINES_LIMIT)
    too_long = planted_function("too_long", FUNCTION_LINES_LIMIT + 1)
    method = planted_function("method", FUNCTION_LINES_LIMIT + 1, indent="    ")
    lines = [*at_limit, "", *too_long, "", "class Planted:", *method]
    source = "".join(f"{line}\n" for line in lines + [""] * (MODULE_LINES_LIMIT - len(lines)))
    assert len(source.splitlines()) == MODULE_LINES_LIMIT

    found = list(limit_violations(source, "planted.py"))

    too_long_at = lines.index(too_long[0]) + 1
    method_at = lines.index(method[0]) + 1
    over = f"{FUNCTION_LINES_LIMIT + 1} lines (limit: {FUNCTION_LINES_LIMIT})"
    assert sorted(found) == sorted(
        [
            f"planted.py: module has {MODULE_LINES_LIMIT} lines "
            f"(limit: under {MODULE_LINES_LIMIT})",
            f"planted.py:{too_long_at}: function too_long has {over}",
            f"planted.py:{method_at}: function method has {over}",
        ]
    )
    within = "".join(
        f"{line}\n" for line in at_limit + [""] * (MODULE_LINES_LIMIT - 1 - len(at_limit))
    )
    assert len(within.splitlines()) == MODULE_LINES_LIMIT - 1
    assert not list(limit_violations(within, "planted.py"))
