"""The training exit-code table in docs/training-jobs.md is the code's: each named row is the
constant of that name, and bad input is the code the launcher stops on."""

from __future__ import annotations

import re

from tests.training.conftest import REPO
from training import cli, launch, watchdog

DOC = REPO / "docs" / "training-jobs.md"


def _rows() -> list[tuple[int, str]]:
    table = DOC.read_text().split("<!-- trainer-exit-codes -->\n", 1)[1].split("\n\n", 1)[0]
    return [
        (int(code), name)
        for code, name in re.findall(r"^\| (\d+) \| `?([A-Z_]*)`? *\|", table, re.MULTILINE)
    ]


def test_each_named_code_in_the_table_is_its_constant() -> None:
    constants = {
        name: getattr(module, name)
        for module in (cli, watchdog, launch)
        for name in dir(module)
        if name.endswith("_EXIT_CODE")
    }
    rows = _rows()
    assert [code for code, _ in rows] == sorted(code for code, _ in rows)
    assert {name: code for code, name in rows if name} == constants


def test_bad_input_is_the_code_the_launcher_does_not_restart_on() -> None:
    # The launcher stops at once on USAGE_EXIT_CODE (training/launch.py, Launcher.run); the
    # trainer exits with it for ConfigError, which every bad-input error here derives from.
    from training.config_parsing import ConfigError
    from training.data import DataError
    from training.export_hf import ExportError
    from training.init_from import InitFromError

    assert cli.USAGE_EXIT_CODE == 2 and (2, "USAGE_EXIT_CODE") in _rows()
    assert all(issubclass(e, ConfigError) for e in (DataError, ExportError, InitFromError))
