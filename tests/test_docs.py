"""The README is a short front door and docs/ holds the rest; both stay true to the code.

Lists the code owns are either generated from it (tools/docs_lists.py: add-ons, trainer
metrics) or held to it here (preflight checks, stacks, exit codes). Every relative link
resolves, every `hpctl` command a page shows exists with the options it names, and the
README's first job renders."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

# typer vendors click; its command class is only reachable through the private module.
from typer._click.core import Command
from typer.core import TyperGroup

from config.names import STACK_UNITS
from hpctl.cli import app
from hpctl.errors import ExitCode
from hpctl.preflight.registry import CHECKS
from tests.cli.conftest import hpctl
from tools import REPO
from tools.docs_lists import LISTS, rewritten, stale_pages

README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 150
PAGES = (README, REPO / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md")))
# [text](target): the target up to the closing parenthesis, no spaces.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:")


def _prose(text: str) -> str:
    """`text` without code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", INLINE_CODE.sub(lambda m: m[0].strip("`"), heading).lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.MULTILINE)
    return {_slug(heading) for heading in headings}


def _links(page: Path) -> Iterator[str]:
    for target in LINK.findall(_prose(page.read_text())):
        if not target.startswith(EXTERNAL):
            yield target


def _section(text: str, marker: str) -> str:
    """The lines after an `<!-- marker -->` comment, up to the first blank line."""
    return text.split(f"<!-- {marker} -->\n", 1)[1].split("\n\n", 1)[0]


def test_readme_is_a_short_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path):
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in _links(README)}
    missing = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not missing, f"add these pages to the README's 'Where to go next': {missing}"


def test_generated_lists_match_the_code():
    assert stale_pages() == []


def test_a_generated_list_is_replaced_between_its_markers_only():
    text = "before\n<!-- generated: x -->\nold\n<!-- end generated: x -->\nafter\n"
    assert rewritten(text, "x", "new") == (
        "before\n<!-- generated: x -->\nnew\n<!-- end generated: x -->\nafter\n"
    )
    with pytest.raises(ValueError, match="<!-- generated: y -->: markers missing"):
        rewritten(text, "y", "new")


def test_every_generated_list_has_its_markers():
    for name, generated in LISTS.items():
        text = generated.page.read_text()
        assert rewritten(text, name, generated.write()).count(generated.write()) == 1


def test_preflight_list_is_the_registry_in_table_order():
    listed = re.findall(
        r"^- `([a-z-]+)`:", _section((DOCS / "preflight.md").read_text(), "preflight-checks"), re.M
    )
    assert listed == [check.name for check in CHECKS]


def test_exit_code_table_is_the_exit_code_enum():
    table = _section((DOCS / "operations.md").read_text(), "exit-codes")
    rows = re.findall(r"^\| (\d+) \| `([A-Z_]+)` \|", table, re.MULTILINE)
    assert [(int(code), name) for code, name in rows] == [(c.value, c.name) for c in ExitCode]


def test_stack_table_and_teardown_follow_the_deploy_order():
    text = (DOCS / "stacks.md").read_text()
    listed = re.findall(r"^\| `hyperpod-<env>-([a-z-]+)` \|", text, re.MULTILINE)
    units = list(STACK_UNITS.values())
    assert listed == units
    teardown = " ".join((DOCS / "teardown.md").read_text().split())
    assert "deletes the stacks in reverse order: " + ", ".join(reversed(units)) + "." in teardown


def test_every_stack_module_is_a_deployable_unit():
    modules = {p.stem.removesuffix("_stack") for p in (REPO / "stacks").glob("*_stack.py")}
    assert modules - {"pipeline"} == set(STACK_UNITS)


def test_every_benchmark_a_page_runs_exists():
    text = (DOCS / "benchmarks.md").read_text()
    scripts = re.findall(r"python (benchmarks/\w+\.py)", text)
    modules = re.findall(r"python -m (benchmarks\.\w+)", text)
    paths = [*scripts, *(m.replace(".", "/") + ".py" for m in modules)]
    assert paths and [p for p in paths if not (REPO / p).is_file()] == []


# --------------------------------------------------------------------- hpctl commands


def _commands(page: Path) -> Iterator[list[str]]:
    """Each `hpctl ...` line of a page's bash blocks, continuations joined, as words."""
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("hpctl "):
                yield shlex.split(line.replace("[", " ").replace("]", " ").replace("|", " "))


def _command(words: list[str]) -> tuple[Command, list[str]]:
    """The click command `hpctl WORDS...` runs, and the words after its name."""
    command: Command = typer.main.get_command(app)
    rest = words[1:]
    while isinstance(command, TyperGroup) and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_hpctl_command_shown_exists_with_its_options(page: Path):
    problems = []
    for words in _commands(page):
        command, rest = _command(words)
        if isinstance(command, TyperGroup):
            problems.append(f"{' '.join(words[:3])}: no such command")
            continue
        if command.hidden:
            problems.append(f"{command.name}: a deprecated command; use its new name")
        options = {
            opt: param for param in command.params for opt in param.opts + param.secondary_opts
        }
        for word in rest:
            if word == "--":
                break  # the job's own arguments follow
            name = word.split("=", 1)[0]
            if not name.startswith("-"):
                continue
            if name not in options:
                problems.append(f"{command.name} {name}: no such option")
            elif getattr(options[name], "hidden", False):
                problems.append(f"{command.name} {name}: a deprecated spelling; use the new one")
    assert not problems, f"{page.relative_to(REPO)}: {problems}"


def test_the_readme_first_job_renders():
    (submit,) = [w for w in _commands(README) if w[1:3] == ["job", "submit"]]
    args = [w.replace("<account>", "123456789012") for w in submit[3:] if w != "--wait"]
    result = hpctl("job", "render", *args)
    assert result.exit_code == 0, result.output
    assert "kind: HyperPodPyTorchJob" in result.stdout
