"""`make mutation`: mutmut over the modules the platform's promises rest on, one module at a
time with its own test files (tests/mutation/modules.toml), then a score per module.

mutmut 3 mutates a copy of the repository in `mutants/` and reads `[tool.mutmut]` from the
pyproject.toml of the directory it runs in. So each module runs in `mutants/<module>/`, a
directory of links to the repository with a pyproject.toml whose `[tool.mutmut]` names that
module and its tests; its results land in `mutants/<module>/mutants/<path>.meta` (JSON, the
exit code of each mutant's test run).

The report prints one row per module (mutants / killed / survived / equivalent / score) and
exits non-zero when a mutant outlives the tests without a line in
`tests/mutation/equivalent.toml` saying why no test can tell it apart from the original, or
when that file lists a mutant the run killed or no longer has (a stale excuse hides the next
real survivor).

    python tools/mutation.py run [config/capacity.py ...]   # all modules by default
    python tools/mutation.py report [config/capacity.py ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parent.parent
MUTANTS: Final = REPO / "mutants"
MODULES_FILE: Final = REPO / "tests" / "mutation" / "modules.toml"
EQUIVALENT_FILE: Final = REPO / "tests" / "mutation" / "equivalent.toml"
# What a module's run directory links to: the packages mutmut copies (source_paths) and
# what the tests import or read besides them (also_copy).
LINKED: Final = (
    "config",
    "hpctl",
    "training",
    "tests",
    "stacks",
    "platform_constructs",
    "lifecycle",
    "tools",
    "benchmarks",
    "app.py",
    "cdk.json",
    "cdk.context.json",
)

# mutmut's exit codes (mutmut/stats.py `status_by_exit_code`) as this report counts them:
# a test failed (1, 3), the run overran its CPU budget (a mutant that loops) or the type
# check caught it: the mutant was noticed. 0 is a survivor; 5 and 33: no test reaches the
# mutated function at all, which is a survivor too. A crash (-11, -9) says nothing about
# the tests (a forked worker that inherited torch's threads): unexplained until rerun.
KILLED_CODES: Final = frozenset({1, 3, 24, -24, 152, 255, 36, 37})
SURVIVED_CODES: Final = frozenset({0})
NO_TESTS_CODES: Final = frozenset({5, 33})


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Module:
    """One module to mutate: its test files, and mutmut settings of its own."""

    path: str
    tests: list[str]
    settings: dict[str, Any]


def load_modules(path: Path = MODULES_FILE) -> dict[str, Module]:
    table: dict[str, dict[str, Any]] = tomllib.loads(path.read_text())["modules"]
    return {
        name: Module(name, list(entry["tests"]), {k: v for k, v in entry.items() if k != "tests"})
        for name, entry in table.items()
    }


def module_name(path: str) -> str:
    """`config/capacity.py` -> `config.capacity` (mutmut's mutant names start with it)."""
    return path.removesuffix(".py").replace("/", ".")


def run_config(module: Module) -> str:
    """The pyproject.toml of a module's run directory: the repository's, with `[tool.mutmut]`
    narrowed to the module and its tests (JSON strings, arrays and booleans are TOML)."""
    settings = {
        "only_mutate": [module.path],
        "pytest_add_cli_args_test_selection": module.tests,
        **module.settings,
    }
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    text = (REPO / "pyproject.toml").read_text()
    return text.replace("[tool.mutmut]\n", f"[tool.mutmut]\n{lines}", 1)


def prepare(module: Module) -> Path:
    """The run directory of `module`, fresh: links to the repository and its own config."""
    missing = [t for t in [module.path, *module.tests] if not (REPO / t).is_file()]
    if missing:
        raise SystemExit(f"{MODULES_FILE.name}: {missing[0]} does not exist; fix the entry")
    directory = MUTANTS / module_name(module.path)
    if directory.exists():
        subprocess.run(["rm", "-rf", str(directory)], check=True)
    directory.mkdir(parents=True)
    for name in LINKED:
        (directory / name).symlink_to(REPO / name)
    (directory / "pyproject.toml").write_text(run_config(module))
    return directory


def run(modules: dict[str, Module], max_children: int) -> int:
    """mutmut over each module in turn; the log of each is in its run directory."""
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    mutmut = Path(sys.executable).with_name("mutmut")
    failed = 0
    for module in modules.values():
        directory = prepare(module)
        started = time.monotonic()
        with open(directory / "mutmut.log", "w") as log:
            result = subprocess.run(
                [str(mutmut), "run", "--max-children", str(max_children)],
                cwd=directory,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        took = time.monotonic() - started
        print(f"{module.path}: mutmut exited {result.returncode} in {took:.0f} s", flush=True)
        if result.returncode != 0:
            print(f"  see {directory.relative_to(REPO)}/mutmut.log", flush=True)
            failed += 1
    return failed


# --------------------------------------------------------------------------- report


@dataclass
class ModuleScore:
    module: str
    killed: int = 0
    equivalent: int = 0
    unexplained: list[tuple[str, str]] = field(default_factory=list)  # (mutant, status)

    @property
    def mutants(self) -> int:
        return self.killed + self.equivalent + len(self.unexplained)

    @property
    def survived(self) -> int:
        return self.equivalent + len(self.unexplained)

    @property
    def score(self) -> float:
        """Killed among the mutants a test could kill (equivalents excluded), in percent."""
        detectable = self.mutants - self.equivalent
        return 100.0 * self.killed / detectable if detectable else 100.0


def status(exit_code: int | None) -> str:
    if exit_code is None:
        return "not checked"
    if exit_code in KILLED_CODES:
        return "killed"
    if exit_code in SURVIVED_CODES:
        return "survived"
    if exit_code in NO_TESTS_CODES:
        return "no tests"
    return f"suspicious (exit {exit_code})"


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[str, str]:
    """Mutant name -> the one-line reason no test can kill it."""
    if not path.is_file():
        return {}
    table: dict[str, Any] = tomllib.loads(path.read_text()).get("equivalent", {})
    bad = [name for name, reason in table.items() if not isinstance(reason, str) or not reason]
    if bad:
        raise SystemExit(f"{path.name}: give each equivalent mutant a one-line reason: {bad[0]}")
    return {str(name): str(reason) for name, reason in table.items()}


def score_module(
    module: str, exit_codes: dict[str, int | None], equivalent: dict[str, str]
) -> tuple[ModuleScore, list[str]]:
    """The module's score, and the entries of the equivalent list for it that are stale."""
    row = ModuleScore(module_name(module))
    verdicts = {mutant: status(code) for mutant, code in exit_codes.items()}
    for mutant, verdict in sorted(verdicts.items()):
        if verdict == "killed":
            row.killed += 1
        elif verdict in ("survived", "no tests") and mutant in equivalent:
            row.equivalent += 1
        else:
            row.unexplained.append((mutant, verdict))
    stale = [
        f"{mutant}: listed as equivalent but "
        f"{verdicts.get(mutant, 'no such mutant')}; "
        f"remove it from {EQUIVALENT_FILE.name}"
        for mutant in sorted(equivalent)
        if mutant.rsplit("__mutmut_", 1)[0].startswith(f"{row.module}.")
        and verdicts.get(mutant) not in ("survived", "no tests")
    ]
    return row, stale


def report(modules: dict[str, Module]) -> int:
    equivalent = load_equivalent()
    header = ("module", "mutants", "killed", "survived", "equivalent", "score")
    print(f"{header[0]:<30} {' '.join(f'{h:>10}' for h in header[1:])}")
    problems: list[str] = []
    for module in modules:
        meta = MUTANTS / module_name(module) / "mutants" / f"{module}.meta"
        if not meta.is_file():
            problems.append(f"{module}: no results; run `make mutation` first")
            continue
        exit_codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
        row, stale = score_module(module, exit_codes, equivalent)
        figures = (row.mutants, row.killed, row.survived, row.equivalent)
        print(f"{row.module:<30} {' '.join(f'{n:>10}' for n in figures)} {row.score:>9.1f}%")
        problems += [
            f"{mutant} {verdict}: see `mutmut show {mutant}` in mutants/{row.module}; kill it "
            f"with a test, or list it in {EQUIVALENT_FILE.name} with why no test can"
            for mutant, verdict in row.unexplained
        ]
        problems += stale
    for line in problems:
        print(line)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", choices=("run", "report"))
    parser.add_argument("modules", nargs="*", help="module paths (default: all in modules.toml)")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    args = parser.parse_intermixed_args(argv)
    known = load_modules()
    unknown = [m for m in args.modules if m not in known]
    if unknown:
        parser.error(f"{unknown[0]} is not in {MODULES_FILE.name}; one of: {', '.join(known)}")
    chosen = {m: known[m] for m in args.modules} if args.modules else known
    if args.command == "run":
        started = time.monotonic()
        failed = run(chosen, args.max_children)
        print(f"mutation run: {time.monotonic() - started:.0f} s wall", flush=True)
        if failed:
            return 1
    return report(chosen)


if __name__ == "__main__":
    sys.exit(main())
