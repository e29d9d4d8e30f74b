"""tools/mutation.py: the score of a module, what counts as killed, and the equivalent list
that may excuse a survivor but never a killed or vanished mutant."""

from __future__ import annotations

import tomllib

import pytest

from tools.mutation import (
    EQUIVALENT_FILE,
    Module,
    load_equivalent,
    load_modules,
    run_config,
    score_module,
    status,
)


@pytest.mark.parametrize(
    ("code", "verdict"),
    [
        (1, "killed"),
        (3, "killed"),
        (-24, "killed"),  # CPU time exceeded: the mutant loops
        (37, "killed"),
        (0, "survived"),
        (33, "no tests"),
        (5, "no tests"),
        (None, "not checked"),
        (-11, "suspicious (exit -11)"),
        (-9, "suspicious (exit -9)"),
    ],
)
def test_exit_codes(code: int | None, verdict: str) -> None:
    assert status(code) == verdict


def test_a_module_scores_kills_over_what_a_test_could_kill() -> None:
    codes = {
        "config.capacity.x_a__mutmut_1": 1,
        "config.capacity.x_a__mutmut_2": 1,
        "config.capacity.x_a__mutmut_3": 0,
        "config.capacity.x_a__mutmut_4": 0,
        "config.capacity.x_a__mutmut_5": 33,
        "config.capacity.x_a__mutmut_6": -11,
    }
    equivalent = {"config.capacity.x_a__mutmut_3": "reason"}
    row, stale = score_module("config/capacity.py", codes, equivalent)
    assert (row.module, row.mutants, row.killed, row.survived, row.equivalent) == (
        "config.capacity",
        6,
        2,
        4,
        1,
    )
    assert row.score == pytest.approx(100 * 2 / 5)
    assert row.unexplained == [
        ("config.capacity.x_a__mutmut_4", "survived"),
        ("config.capacity.x_a__mutmut_5", "no tests"),
        ("config.capacity.x_a__mutmut_6", "suspicious (exit -11)"),
    ]
    assert stale == []


def test_an_excuse_for_a_killed_or_vanished_mutant_is_stale() -> None:
    codes = {"config.capacity.x_a__mutmut_1": 1}
    equivalent = {
        "config.capacity.x_a__mutmut_1": "reason",
        "config.capacity.x_a__mutmut_9": "reason",
        "config.capacity_other.x_b__mutmut_1": "another module's",
        "hpctl.replacement.x_c__mutmut_1": "another module's",
    }
    _, stale = score_module("config/capacity.py", codes, equivalent)
    assert stale == [
        "config.capacity.x_a__mutmut_1: listed as equivalent but killed; remove it from "
        "equivalent.toml",
        "config.capacity.x_a__mutmut_9: listed as equivalent but no such mutant; remove it "
        "from equivalent.toml",
    ]


def test_every_listed_module_and_test_file_exists() -> None:
    modules = load_modules()
    assert "config/capacity.py" in modules
    for module in modules.values():
        assert module.tests, module.path
        for path in (module.path, *module.tests):
            assert (EQUIVALENT_FILE.parent.parent.parent / path).is_file(), path


def test_every_equivalent_mutant_has_a_reason_and_belongs_to_a_listed_module() -> None:
    equivalent = load_equivalent()
    prefixes = {m.removesuffix(".py").replace("/", ".") + "." for m in load_modules()}
    for name, reason in equivalent.items():
        assert reason.strip() and "\n" not in reason, name
        assert any(name.startswith(p) for p in prefixes), name


def test_a_module_run_narrows_mutmut_to_the_module_and_its_tests() -> None:
    module = Module(
        "training/data.py", ["tests/training/test_data.py"], {"process_isolation": "forkserver"}
    )
    config = tomllib.loads(run_config(module))["tool"]["mutmut"]
    assert config["only_mutate"] == ["training/data.py"]
    assert config["pytest_add_cli_args_test_selection"] == ["tests/training/test_data.py"]
    assert config["process_isolation"] == "forkserver"
    # The shared settings stay.
    assert "not slow" in config["pytest_add_cli_args"]
    assert config["source_paths"] == ["config", "hpctl", "training"]
