"""The torch API the training package uses, checked against the installed torch.

    python -m tools.torch_api                   # exit 1, one line per problem
    python -m tools.torch_api --release image   # against the image's torch, read from source

The package's source is read, not run: every torch name it uses is collected (``import
torch.x``, ``from torch.x import y``, attribute chains from torch or an alias of it, such as
``dist.all_reduce`` or ``F.cross_entropy``, annotations included) with the keyword arguments
passed to it, and each is resolved in the installed torch: a name that does not exist, a
keyword a function does not take, or a private name (a part starting with ``_``) is reported.

Names used only inside functions (``torch.cuda.cudart``, a keyword of ``distribute_tensor``)
fail here, before an image is built, instead of in the middle of a job. The tests run it
against their torch and, with ``--release``, against the image's torch read from its wheel's
source (torch_source.py), which a CPU machine cannot install (training/README.md, "Torch
versions").
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tools import TRAINING_DIR, torch_source

ROOT = "torch"


@dataclass
class Use:
    """One torch name and where the package uses it."""

    name: str
    where: list[str] = field(default_factory=list)
    keywords: dict[str, list[str]] = field(default_factory=dict)


def _import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> torch dotted name, from every import in the module (any scope)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != ROOT:
                    continue
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # `import torch.x.y` binds `torch`
                    aliases[ROOT] = ROOT
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _chain(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`a.b.c` -> the torch dotted name it denotes, when `a` is a torch import."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


class _Collector(ast.NodeVisitor):
    def __init__(self, aliases: dict[str, str], label: str, uses: dict[str, Use]) -> None:
        self.aliases, self.label, self.uses = aliases, label, uses

    def _use(self, name: str, node: ast.AST) -> Use:
        use = self.uses.setdefault(name, Use(name))
        site = f"{self.label}:{getattr(node, 'lineno', 0)}"
        if site not in use.where:
            use.where.append(site)
        return use

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == ROOT:
                self._use(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module and node.module.split(".")[0] == ROOT:
            for alias in node.names:
                self._use(f"{node.module}.{alias.name}", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = _chain(node, self.aliases)
        if name is None:
            self.generic_visit(node)
        else:  # the longest chain only: its prefixes resolve on the way to it
            self._use(name, node)

    def visit_Name(self, node: ast.Name) -> None:
        # A bare imported name (`DTensor`, `checkpoint`) is checked at its import.
        return

    def visit_Call(self, node: ast.Call) -> None:
        name = _chain(node.func, self.aliases)
        if name is not None:
            use = self._use(name, node)
            for kw in node.keywords:
                if kw.arg is not None:
                    sites = use.keywords.setdefault(kw.arg, [])
                    sites.append(f"{self.label}:{node.lineno}")
        self.generic_visit(node)


def collect(package_dir: Path = TRAINING_DIR) -> dict[str, Use]:
    """Every torch name the modules in `package_dir` use, with where and with which keywords."""
    uses: dict[str, Use] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        label = path.relative_to(package_dir.parent).as_posix()
        _Collector(_import_aliases(tree), label, uses).visit(tree)
    return uses


_MISSING = object()


def resolve(name: str) -> Any:
    """The object `name` denotes in the installed torch, or _MISSING."""
    parts = name.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        if not inspect.ismodule(obj):
            return _MISSING
        try:  # a submodule its parent does not import
            obj = importlib.import_module(".".join(parts[: i + 1]))
        except ImportError:
            return _MISSING
    return obj


def _accepts(obj: Any, keyword: str) -> bool:
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # builtins without a signature: nothing to check
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return keyword in params


def _takes_in_source(
    release: torch_source.SourceTree, binding: torch_source.Binding, keyword: str
) -> bool:
    # A signature the source does not show (an inherited __init__) is not held against it,
    # as a builtin without a signature is not in the installed torch.
    return release.accepts(binding, keyword) is not False


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def problems(uses: dict[str, Use], release: torch_source.SourceTree | None = None) -> list[str]:
    """One line per name missing from the torch checked against (the installed one, or
    `release` read from source: names no source shows are left to `unreadable`), keyword it
    does not take, or private name."""
    out: list[str] = []
    run_time_only = set(unreadable(uses, release)) if release is not None else set()
    for name in sorted(uses):
        use = uses[name]
        where = ", ".join(use.where)
        if _private(name):
            out.append(f"{where}: {name} is private torch API (not stable across releases)")
        takes: Callable[[str], bool]
        if release is None:
            obj = resolve(name)
            if obj is _MISSING:
                out.append(f"{where}: {name} does not exist")
                continue
            takes = functools.partial(_accepts, obj)
        else:
            binding = release.resolve(name)
            if binding is None:
                if name not in run_time_only:
                    out.append(f"{where}: {name} does not exist")
                continue
            takes = functools.partial(_takes_in_source, release, binding)
        for keyword, sites in sorted(use.keywords.items()):
            if not takes(keyword):
                out.append(f"{', '.join(sites)}: {name}() takes no keyword {keyword!r}")
    return out


def installed_source() -> torch_source.SourceTree:
    """The installed torch's own sources, read the way a release's are."""
    return torch_source.SourceTree(Path(torch.__file__).resolve().parents[1])


def unreadable(uses: dict[str, Use], release: torch_source.SourceTree) -> list[str]:
    """Names the installed torch has that neither its source nor `release`'s shows (bound
    while torch runs, e.g. the legacy torch.cuda.FloatTensor classes): reading can say
    nothing about them, so they are listed, not failed."""
    here = installed_source()
    return [
        name
        for name in sorted(uses)
        if release.resolve(name) is None
        and here.resolve(name) is None
        and resolve(name) is not _MISSING
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package-dir", type=Path, default=TRAINING_DIR)
    ap.add_argument(
        "--release",
        metavar="VERSION",
        help="check against this torch release's source instead of the installed torch "
        "('image': the version the training image pins); fetched from PyPI once",
    )
    args = ap.parse_args(argv)
    uses = collect(args.package_dir)
    release: torch_source.SourceTree | None = None
    version = str(torch.__version__)
    if args.release:
        version = torch_source.image_version() if args.release == "image" else args.release
        release = torch_source.SourceTree(torch_source.fetch(version))
        version += " (source)"
    found = problems(uses, release)
    for name in unreadable(uses, release) if release is not None else []:
        print(f"torch {version}: {name} is bound at run time, not checked from source")
    for line in found:
        print(f"torch {version}: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"torch {version}: all {len(uses)} torch names the package uses are present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
