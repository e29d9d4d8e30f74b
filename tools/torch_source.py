"""Another torch release's API, read from its source instead of importing it.

The CPU tests run one torch and the image another (training/README.md, "Torch versions"); the
image's cannot be installed on a CPU machine, but its Python sources and type stubs are the
same in every wheel of a release. ``fetch`` unpacks them from the smallest wheel PyPI has (the
macOS one: CPU only) and ``SourceTree`` answers, from the syntax tree alone, whether a dotted
name exists in that release and which keywords a function takes:

    python -m tools.torch_api --release 2.11.0

Names bound in ways only running code can see (torch/__init__.py binds the C functions in a
loop over ``dir()``) are found through the imports the release makes for type checkers
(``if TYPE_CHECKING: from torch._C._VariableFunctions import *``) in the stubs it ships
(``torch/_C/*.pyi``).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.requirements import Requirement

from tools import REPO, TRAINING_DIR

# The platform whose wheel is smallest: no CUDA libraries, same Python sources.
WHEEL_PLATFORM = "macosx_11_0_arm64"
# Where set-up unpacks releases (scripts/bootstrap.sh): inside the ignored virtualenv, so a
# fresh environment starts clean.
IMAGE_SOURCES_DIR = REPO / ".venv" / "image-sources"
IMAGE_REQUIREMENTS = TRAINING_DIR / "requirements-container.txt"

# What the import system sets on every module.
_MODULE_ATTRIBUTES = frozenset(
    {"__name__", "__file__", "__path__", "__doc__", "__spec__", "__loader__", "__package__"}
)

Kind = Literal["module", "function", "class", "value", "external"]


@dataclass
class Binding:
    """What a dotted name denotes in the release: its kind and, for functions and classes,
    their definitions (a function's overloads are all kept)."""

    kind: Kind
    name: str
    nodes: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = field(default_factory=list)


@dataclass
class _Module:
    names: dict[str, list[ast.stmt | tuple[str, str]]]
    star: list[str]  # modules whose public names this one re-exports (`from x import *`)
    # Names a module-level __getattr__ answers: the strings it and the module's literal
    # collections hold (torch's lazy submodules, deprecated names); None = no __getattr__.
    dynamic: set[str] | None = None
    # What `from this import *` takes: a literal __all__, else (None) every public name.
    exports: set[str] | None = None
    deleted: set[str] = field(default_factory=set)  # unbound by a module-level `del`


# Where a module-level statement runs: always, only sometimes (under if/try/with: both
# branches count, as either may be the one that runs), or only for type checkers.
Where = Literal["top", "nested", "typing"]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(body: list[ast.stmt], where: Where = "top") -> list[tuple[ast.stmt, Where]]:
    """Module-level statements with where they run, including those under if/try/with, not
    those inside functions or classes."""
    out: list[tuple[ast.stmt, Where]] = []
    inner: Where = "typing" if where == "typing" else "nested"
    for stmt in body:
        out.append((stmt, where))
        if isinstance(stmt, ast.If):
            typing_only = where == "typing" or _is_type_checking(stmt.test)
            out += _statements(stmt.body, "typing" if typing_only else inner)
            out += _statements(stmt.orelse, inner)
        elif isinstance(stmt, ast.Try):
            out += _statements(stmt.body, inner) + _statements(stmt.orelse, inner)
            out += _statements(stmt.finalbody, inner)
            for handler in stmt.handlers:
                out += _statements(handler.body, inner)
        elif isinstance(stmt, ast.With):
            out += _statements(stmt.body, inner)
    return out


def _bind(parsed: _Module, name: str, entry: ast.stmt | tuple[str, str]) -> None:
    parsed.names.setdefault(name, []).append(entry)
    parsed.deleted.discard(name)


def _targets(stmt: ast.stmt) -> list[str]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign):
        targets = [stmt.target]
    names: list[str] = []
    for target in targets:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, ast.Tuple):
            names += [e.id for e in target.elts if isinstance(e, ast.Name)]
    return names


class SourceTree:
    """The `torch/` tree of one release: `root` holds the `torch` package directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, _Module | None] = {}

    # ---- modules --------------------------------------------------------------------------

    def module_file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (
            base / "__init__.py",
            base / "__init__.pyi",
            base.with_suffix(".py"),
            base.with_suffix(".pyi"),
        ):
            if candidate.is_file():
                return candidate
        return None

    def _module(self, module: str) -> _Module | None:
        if module not in self._modules:
            self._modules[module] = self._read(module)
        return self._modules[module]

    def _read(self, module: str) -> _Module | None:
        path = self.module_file(module)
        if path is None:
            return None
        package = module if path.stem == "__init__" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        # In a stub, `from x import y` is for the stub's own annotations; only `import y as
        # y` re-exports (PEP 484), so torch._C does not seem to hold every name its stub uses.
        stub = path.suffix == ".pyi"
        parsed = _Module(names={}, star=[])
        literals: set[str] = set()  # strings in module-level literal collections
        for stmt, where in _statements(tree.body):
            star = isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names)
            if where == "typing" and not star:
                # Imports for type checkers bind nothing at run time; only their star imports
                # of the C stubs stand for what torch binds dynamically (see the docstring).
                continue
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                _bind(parsed, stmt.name, stmt)
                if stmt.name == "__getattr__":
                    parsed.dynamic = {
                        n.value
                        for n in ast.walk(stmt)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    }
            elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                for name in _targets(stmt):
                    _bind(parsed, name, stmt)
                if "__all__" in _targets(stmt):
                    parsed.exports = _strings(stmt.value)
                literals |= _collection_strings(stmt.value)
            elif _extends_all(stmt):
                added = _strings(_extension(stmt))
                parsed.exports = (
                    None if parsed.exports is None or added is None else parsed.exports | added
                )
            elif isinstance(stmt, ast.Delete) and where == "top":
                for gone in stmt.targets:
                    if isinstance(gone, ast.Name):
                        parsed.names.pop(gone.id, None)
                        parsed.deleted.add(gone.id)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if stub and alias.asname != alias.name:
                        continue
                    bound = alias.asname or alias.name.split(".")[0]
                    target = alias.name if alias.asname else bound
                    _bind(parsed, bound, ("module", target))
            elif isinstance(stmt, ast.ImportFrom):
                source = self._absolute(stmt, package)
                for alias in stmt.names:
                    if alias.name == "*":
                        parsed.star.append(source)
                    elif stub and alias.asname != alias.name:
                        continue
                    else:
                        target = f"{source}.{alias.name}"
                        _bind(parsed, alias.asname or alias.name, ("import", target))
        if parsed.dynamic is not None:
            parsed.dynamic |= literals
        return parsed

    @staticmethod
    def _absolute(stmt: ast.ImportFrom, package: str) -> str:
        if stmt.level == 0:
            return stmt.module or ""
        parts = package.split(".")
        base = parts[: len(parts) - (stmt.level - 1)]
        return ".".join([*base, stmt.module] if stmt.module else base)

    # ---- names ----------------------------------------------------------------------------

    def resolve(self, name: str, _seen: frozenset[str] = frozenset()) -> Binding | None:
        """What `name` (`torch.a.b`) denotes in this release, or None when it does not exist."""
        if name in _seen:
            return None
        seen = _seen | {name}
        if name.split(".")[0] != "torch":
            return Binding("external", name)
        if self.module_file(name) is not None:
            return Binding("module", name)
        module, _, attr = name.rpartition(".")
        if not module:
            return None
        parent = self.resolve(module, seen)
        if parent is None:
            return None
        if parent.kind == "module":
            return self._attribute(parent.name, attr, seen)
        if parent.kind == "class":
            return self._class_attribute(parent, attr, seen)
        # An attribute of a value or of a name outside torch: nothing more to read.
        return Binding("external", name)

    def _attribute(self, module: str, attr: str, seen: frozenset[str]) -> Binding | None:
        parsed = self._module(module)
        if parsed is None:
            return None
        if attr in _MODULE_ATTRIBUTES:
            return Binding("value", f"{module}.{attr}")
        entries = parsed.names.get(attr, [])
        definitions = [
            e
            for e in entries
            if isinstance(e, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        ]
        if definitions:
            kind: Kind = "class" if isinstance(definitions[-1], ast.ClassDef) else "function"
            return Binding(kind, f"{module}.{attr}", nodes=definitions)
        for entry in reversed(entries):
            if isinstance(entry, tuple):
                how, target = entry
                if how == "module":
                    return self.resolve(target, seen) or Binding("external", target)
                found = self.resolve(target, seen)
                if found is not None:
                    return found
            elif isinstance(entry, ast.Assign | ast.AnnAssign):
                return self._value(module, attr, entry, seen)
        for source in [] if attr in parsed.deleted else parsed.star:
            exporter = self._module(source)
            if exporter is None:
                continue
            exported = (
                attr in exporter.exports
                if exporter.exports is not None
                else not attr.startswith("_")  # `import *` skips private names
            )
            found = self._attribute(source, attr, seen) if exported else None
            if found is not None:
                return found
        if parsed.dynamic is not None and attr in parsed.dynamic:
            return Binding("external", f"{module}.{attr}")
        return None

    def _value(
        self, module: str, attr: str, stmt: ast.Assign | ast.AnnAssign, seen: frozenset[str]
    ) -> Binding:
        value = stmt.value
        # `f = _add_docstr(torch._C._nn.f, "...")`: the function is the first argument.
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name | ast.Attribute)
            and (value.func.id if isinstance(value.func, ast.Name) else value.func.attr)
            == "_add_docstr"
            and value.args
        ):
            target = _dotted(value.args[0])
            if target:
                found = self.resolve(target, seen)
                if found is not None:
                    return found
        return Binding("value", f"{module}.{attr}")

    def _class_attribute(
        self, cls: Binding, attr: str, seen: frozenset[str] = frozenset()
    ) -> Binding | None:
        """`attr` of a class: its body, `self.attr = ...` in its methods, then its bases.
        External when it may come from a base outside torch; None when every class it could
        come from is read and none has it (a metaclass's class-level attributes aside)."""
        if cls.name in seen:
            return None
        seen = seen | {cls.name}
        if attr.startswith("__") and attr.endswith("__"):
            return Binding("external", f"{cls.name}.{attr}")  # object's own, among others
        module = cls.name.rpartition(".")[0]
        outside = False
        for node in cls.nodes:
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    if stmt.name == attr:
                        kind: Kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
                        return Binding(kind, f"{cls.name}.{attr}", nodes=[stmt])
                elif attr in _targets(stmt):
                    return Binding("value", f"{cls.name}.{attr}")
            if attr in _instance_attributes(node):
                return Binding("value", f"{cls.name}.{attr}")
            for base in node.bases:
                found = self._base(module, base, seen)
                if found is None or found.kind != "class":
                    outside = True  # object, a typing construct, a class outside torch
                    continue
                inherited = self._class_attribute(found, attr, seen)
                if inherited is not None:
                    return inherited
        return Binding("external", f"{cls.name}.{attr}") if outside else None

    def _base(self, module: str, base: ast.expr, seen: frozenset[str]) -> Binding | None:
        """The class a base-class expression in `module` names (Generic[T] -> Generic)."""
        dotted = _dotted(base.value if isinstance(base, ast.Subscript) else base)
        if dotted is None:
            return None
        first, _, rest = dotted.partition(".")
        bound = self._attribute(module, first, seen) if self._module(module) else None
        if bound is None or not rest:
            return bound
        return self.resolve(f"{bound.name}.{rest}", seen) if bound.kind == "module" else None

    def accepts(self, binding: Binding, keyword: str) -> bool | None:
        """Whether the function or class `binding` takes `keyword`; None when its signature
        cannot be read from the source (a value, a name outside torch, an inherited init)."""
        functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        for node in binding.nodes:
            if not isinstance(node, ast.ClassDef):
                functions.append(node)
                continue
            functions += [
                s
                for s in node.body
                if isinstance(s, ast.FunctionDef) and s.name in ("__init__", "__new__")
            ]
            if not functions and _is_dataclass(node):
                if keyword in {n for s in node.body for n in _targets(s)}:
                    return True
                return None if node.bases else False
        if not functions:
            return None
        for fn in functions:
            a = fn.args
            if a.kwarg is not None:
                return True
            if keyword in {p.arg for p in [*a.args, *a.kwonlyargs]}:
                return True
        return False


def _instance_attributes(node: ast.ClassDef) -> set[str]:
    """Names a class's methods assign on `self` (`self.x = ...`, `self.x: T = ...`)."""
    names: set[str] = set()
    for stmt in ast.walk(node):
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else [stmt.target]
            if isinstance(stmt, ast.AnnAssign | ast.AugAssign)
            else []
        )
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                names.add(target.attr)
    return names


def _extends_all(stmt: ast.stmt) -> bool:
    """`__all__ += [...]`, `__all__.extend([...])` or `__all__.append("x")`."""
    if isinstance(stmt, ast.AugAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == "__all__"
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        return (
            isinstance(func, ast.Attribute)
            and func.attr in ("append", "extend")
            and isinstance(func.value, ast.Name)
            and func.value.id == "__all__"
        )
    return False


def _extension(stmt: ast.stmt) -> ast.expr | None:
    """What an `_extends_all` statement adds, as a list expression."""
    if isinstance(stmt, ast.AugAssign):
        return stmt.value
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not isinstance(call, ast.Call) or len(call.args) != 1:
        return None
    if isinstance(call.func, ast.Attribute) and call.func.attr == "append":
        return ast.List(elts=[call.args[0]], ctx=ast.Load())
    return call.args[0]


def _collection_strings(node: ast.expr | None) -> set[str]:
    """The strings of a literal set, list, tuple or dict (its keys) assigned at module level."""
    if isinstance(node, ast.Dict):
        elements = [k for k in node.keys if k is not None]
    elif isinstance(node, ast.Set | ast.List | ast.Tuple):
        elements = list(node.elts)
    else:
        return set()
    return {e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)}


def _strings(node: ast.expr | None) -> set[str] | None:
    """The strings of a literal list or tuple of strings, else None (not readable)."""
    if not isinstance(node, ast.List | ast.Tuple):
        return None
    values = [
        e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]
    return set(values) if len(values) == len(node.elts) else None


def _is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (_dotted(target) or "").split(".")[-1] == "dataclass":
            return True
    return False


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def image_pin(package: str, requirements: Path = IMAGE_REQUIREMENTS) -> str:
    """The version the training image pins for `package` (its `package==VERSION` line)."""
    for line in requirements.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and name.strip() == package:
            return version.split("#")[0].split(";")[0].strip()
    raise ValueError(f"{requirements.name} pins no {package}==VERSION")


def image_version(requirements: Path = IMAGE_REQUIREMENTS) -> str:
    """The torch version the training image pins."""
    return image_pin("torch", requirements)


def _download(requirement: str, dest: Path, *selection: str) -> Path:
    """The one distribution file pip downloads for `requirement` (no dependencies)."""
    shutil.rmtree(dest, ignore_errors=True)  # what an interrupted run left
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            *selection,
            "--dest",
            str(dest),
            requirement,
        ],
        check=True,
    )
    (found,) = dest.iterdir()
    return found


def fetch(version: str, into: Path = IMAGE_SOURCES_DIR) -> Path:
    """Unpacks torch `version`'s Python sources and stubs under `into/<version>` (once) and
    returns that directory. Needs PyPI."""
    target = into / version
    if (target / "torch" / "__init__.py").is_file():
        return target
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheel = _download(
        f"torch=={version}",
        into / f".download-{version}",
        "--only-binary=:all:",
        "--platform",
        WHEEL_PLATFORM,
        "--python-version",
        python,
    )
    staging = into / f".unpack-{version}"
    shutil.rmtree(staging, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            parts = Path(name).parts
            if parts[0] != "torch" or ".." in parts or not name.endswith((".py", ".pyi")):
                continue
            path = staging.joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(name))
    staging.rename(target)  # only a complete tree ever appears under its final name
    shutil.rmtree(wheel.parent)
    return target


def fetch_metadata(package: str, version: str, into: Path = IMAGE_SOURCES_DIR) -> Path:
    """The core metadata (PKG-INFO) of `package` `version`'s source distribution, saved as
    `into/<package>-<version>.METADATA` (once). Needs PyPI."""
    target = into / f"{package}-{version}.METADATA"
    if target.is_file():
        return target
    sdist = _download(f"{package}=={version}", into / f".download-{package}", "--no-binary=:all:")
    with tarfile.open(sdist) as archive:
        (member,) = [
            m
            for m in archive.getmembers()
            if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        ]
        extracted = archive.extractfile(member)
        if extracted is None:
            raise ValueError(f"{sdist.name}: {member.name} is not a regular file")
        text = extracted.read().decode()
    shutil.rmtree(sdist.parent)
    staging = target.with_suffix(".partial")
    staging.write_text(text)
    staging.rename(target)
    return target


def requires_dist(metadata: Path, package: str) -> str:
    """The version specifier a distribution's metadata puts on `package` (its Requires-Dist)."""
    for line in metadata.read_text().splitlines():
        key, _, value = line.partition(": ")
        if key == "Requires-Dist":
            requirement = Requirement(value)
            if requirement.name.lower() == package:
                return str(requirement.specifier)
    raise ValueError(f"{metadata.name} declares no Requires-Dist on {package}")


# The image's launcher bounds its torch: `hyperpodrun` comes from this package.
ELASTIC_AGENT = "hyperpod-elastic-agent"


if __name__ == "__main__":
    # Set-up: unpack the image's torch release and its launcher's metadata, so the tests can
    # check the package and the torch pin against them offline.
    print(fetch(image_version()))
    print(fetch_metadata(ELASTIC_AGENT, image_pin(ELASTIC_AGENT)))
