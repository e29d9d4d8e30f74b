"""The lists in docs/ that the code owns, written from the code between markers.

A generated list sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`
in its page; `make docs` (`python -m tools.docs_lists`) rewrites every one, and
`python -m tools.docs_lists --check` (run by tests/test_docs.py) names each stale page.
Lists whose wording is prose (the preflight checks, the stacks, the exit codes) are written by
hand and held to the code by tests/test_docs.py instead.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

from config.addons import ADDONS
from config.observability_metrics import METRICS, TRAINER
from tools import REPO

DOCS: Final = REPO / "docs"


@dataclass(frozen=True)
class GeneratedList:
    """One list: the page that holds it and the function that writes its Markdown."""

    page: Path
    write: Callable[[], str]


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def addon_table() -> str:
    """config/addons.py's table: name, pin, minimum, stack, service account, ordering."""
    lines = [
        _row("add-on", "pinned version", "minimum", "stack", "service account", "after"),
        _row(*["---"] * 6),
    ]
    for addon in ADDONS.values():
        account = addon.service_account
        lines.append(
            _row(
                f"`{addon.name}`",
                f"`{addon.version}`",
                ".".join(str(part) for part in addon.minimum),
                f"`{addon.stack}`",
                f"`{account.namespace}/{account.name}`" if account else "",
                ", ".join(f"`{name}`" for name in addon.after),
            )
        )
    return "\n".join(lines)


def trainer_metrics_table() -> str:
    """The catalogue's rows the project's trainer exports (config/observability_metrics.py)."""
    lines = [_row("metric", "kind", "unit", "what"), _row(*["---"] * 4)]
    for metric in METRICS.values():
        if metric.source is TRAINER:
            lines.append(_row(f"`{metric.name}`", metric.kind.value, metric.unit, metric.help))
    return "\n".join(lines)


LISTS: Final[Mapping[str, GeneratedList]] = MappingProxyType(
    {
        "addons": GeneratedList(DOCS / "stacks.md", addon_table),
        "trainer-metrics": GeneratedList(DOCS / "observability.md", trainer_metrics_table),
    }
)


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)",
        re.DOTALL,
    )


def rewritten(text: str, name: str, body: str) -> str:
    """`text` with the list `name` replaced by `body`; ValueError when its markers are missing."""
    pattern = _block(name)
    if not pattern.search(text):
        raise ValueError(
            f"<!-- generated: {name} -->: markers missing; add the pair "
            f"'<!-- generated: {name} -->' and '<!-- end generated: {name} -->' to the page"
        )
    return pattern.sub(lambda match: match[1] + body + "\n" + match[3], text, count=1)


def stale_pages() -> list[str]:
    """One line per list whose page does not hold what the code gives."""
    problems = []
    for name, generated in LISTS.items():
        text = generated.page.read_text(encoding="utf-8")
        if rewritten(text, name, generated.write()) != text:
            page = generated.page.relative_to(REPO)
            problems.append(f"{page}: the {name} list is stale; run make docs")
    return problems


def write_all() -> None:
    """Rewrite every generated list in its page."""
    for name, generated in LISTS.items():
        text = generated.page.read_text(encoding="utf-8")
        generated.page.write_text(rewritten(text, name, generated.write()), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the lists in docs/ the code owns.")
    parser.add_argument("--check", action="store_true", help="report stale lists, change nothing")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale_pages()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    write_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
