"""Command-line conventions shared by the entry points (training.train, training.launch).

Standard library only: argument errors must fail in milliseconds, before torch is imported.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

# Bad command line, config or input: restarting cannot help (the launcher stops at once).
USAGE_EXIT_CODE = 2
# The trainer's SIGTERM grace period ran out before its save committed.
SIGTERM_TIMEOUT_EXIT_CODE = 4
# The run ended (completed, or stopped by SIGTERM) but its final checkpoint did not commit:
# the steps since the last committed checkpoint are not saved. Returned only after the final
# barrier of every rank (training/train.py), like 0: the launcher waits for the peers of a
# rank that exits with it, rather than killing them as it does after a crash.
UNSAVED_EXIT_CODE = 5


class OneLineErrorParser(argparse.ArgumentParser):
    """Reports a bad command line as one ``error: ...`` line on stderr, without the usage
    dump, and exits with USAGE_EXIT_CODE."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(USAGE_EXIT_CODE)
