"""The training image definition: lint-clean and with the properties the operator relies on.

No container engine is available to build it, so the Dockerfile is linted and its
instructions are checked directly.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from config.kubernetes import METRICS_PORT
from config.teams import TRAINING_GID, TRAINING_UID
from hpctl.job.render import AGENT_PORT, TRAINER_MODULE
from tools import REPO, TRAINING_DIR, torch_source

DOCKERFILE = TRAINING_DIR / "Dockerfile"
REQUIREMENTS = TRAINING_DIR / "requirements-container.txt"
DOCKERIGNORE = TRAINING_DIR / ".dockerignore"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        result.append((keyword.upper(), " ".join(rest.split())))
        pending = ""
    return result


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def _args(parsed: list[tuple[str, str]], keyword: str) -> list[str]:
    return [rest for key, rest in parsed if key == keyword]


def _base_image(parsed: list[tuple[str, str]]) -> str:
    defaults = dict(arg.split("=", 1) for arg in _args(parsed, "ARG") if "=" in arg)
    (image,) = _args(parsed, "FROM")
    return re.sub(r"\$\{(\w+)\}", lambda m: defaults[m[1]], image)


def test_hadolint_reports_nothing(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.fail(f"hadolint is not installed next to {sys.executable}; install the dev extras")
    # Default rules only: no config file can be picked up and inline ignore pragmas are disabled.
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    result = subprocess.run(
        [str(hadolint), "--disable-ignore-pragma", "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert json.loads(result.stdout or "null") == [], result.stdout + result.stderr
    assert result.returncode == 0


def test_hadolint_check_can_fail(tmp_path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    if not hadolint.exists():
        pytest.fail(f"hadolint is not installed next to {sys.executable}")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\n")
    result = subprocess.run(
        [str(hadolint), "--format", "json", str(bad)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert {finding["code"] for finding in json.loads(result.stdout)} >= {"DL3007", "DL3013"}


def test_no_lint_suppressions() -> None:
    assert "hadolint" not in DOCKERFILE.read_text().lower()


def test_base_image_is_pinned_cuda_pytorch(dockerfile) -> None:
    image = _base_image(dockerfile)
    reference, _, digest = image.partition("@")
    name, _, tag = reference.rpartition(":")
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), image  # by digest, the tag for people
    assert name == "pytorch/pytorch"
    assert "-cuda12." in tag and tag.endswith("-runtime")


def test_torch_pin_matches_the_base_image(dockerfile) -> None:
    tag = _base_image(dockerfile).partition("@")[0].rpartition(":")[2]
    base_torch = tag.split("-", 1)[0]
    assert f"torch=={base_torch}" in REQUIREMENTS.read_text().splitlines()


@pytest.fixture(scope="module")
def agent_metadata() -> Path:
    """The elastic agent's own metadata (its sdist's PKG-INFO), which set-up fetched."""
    path = torch_source.IMAGE_SOURCES_DIR / (
        f"{torch_source.ELASTIC_AGENT}-{torch_source.image_pin(torch_source.ELASTIC_AGENT)}.METADATA"
    )
    if not path.is_file():
        pytest.fail(f"the elastic agent's metadata is not at {path}: run `make setup`")
    return path


def test_torch_pin_is_the_newest_minor_the_elastic_agent_allows(agent_metadata: Path) -> None:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    allowed = SpecifierSet(torch_source.requires_dist(agent_metadata, "torch"))
    pin = Version(torch_source.image_version())
    assert pin in allowed, (str(pin), str(allowed))
    next_minor = Version(f"{pin.major}.{pin.minor + 1}.0")
    assert next_minor not in allowed, f"the agent allows torch {next_minor}: raise the pin"
    # The comment above the pin quotes the same range.
    (quoted,) = re.findall(r"Requires-Dist torch([<>=!~.,0-9]+)", REQUIREMENTS.read_text())
    assert SpecifierSet(quoted) == allowed


def test_pip_pin_is_inside_the_elastic_agents_range(dockerfile, agent_metadata: Path) -> None:
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(torch_source.requires_dist(agent_metadata, "pip"))
    (pip,) = re.findall(r'"pip==([0-9.]+)"', " ".join(_args(dockerfile, "RUN")))
    assert pip in allowed, (pip, str(allowed))


def _import_check(parsed: list[tuple[str, str]]) -> tuple[int, str]:
    """The index and the command of the RUN that imports every module of the package."""
    (found,) = [
        (i, rest)
        for i, (key, rest) in enumerate(parsed)
        if key == "RUN" and "walk_packages" in rest
    ]
    return found


def _run_import_check(command: str, root: Path) -> subprocess.CompletedProcess[str]:
    # As in the image: the package under the working directory, which is on PYTHONPATH, and
    # python3 the interpreter with torch (here the tests' own).
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(root)}
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_image_build_imports_every_module_before_dropping_root(dockerfile) -> None:
    check, command = _import_check(dockerfile)
    copy = dockerfile.index(("COPY", ". training/"))
    user = max(i for i, (key, _) in enumerate(dockerfile) if key == "USER")
    assert copy < check < user
    # Against the tests' torch: every module of the package imports, and the log names each.
    ok = _run_import_check(command, TRAINING_DIR.parent)
    assert ok.returncode == 0, ok.stderr
    modules = {
        ".".join(path.relative_to(TRAINING_DIR.parent).with_suffix("").parts).removesuffix(
            ".__init__"
        )
        for path in TRAINING_DIR.rglob("*.py")
    } - {"training"}
    assert "training.checkpoint.manager" in modules  # subpackages count
    assert set(ok.stdout.split()) == modules


def test_image_build_import_check_fails_for_a_module_that_does_not_import(
    dockerfile, tmp_path: Path
) -> None:
    package = tmp_path / "training"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fine.py").write_text("import torch\n")
    # In a subpackage: the check walks into packages.
    (package / "sub").mkdir()
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "newer.py").write_text("import torch.no_such_module\n")
    result = _run_import_check(_import_check(dockerfile)[1], tmp_path)
    assert result.returncode != 0
    assert "No module named 'torch.no_such_module'" in result.stderr


def test_runs_as_numeric_non_root_user(dockerfile) -> None:
    user = _args(dockerfile, "USER")[-1]
    uid = user.split(":", 1)[0]
    assert uid.isdigit() and int(uid) != 0, user
    # The image's own user (rendered pods run as their team's, config/team_groups.py).
    assert user == f"{TRAINING_UID}:{TRAINING_GID}"
    # Nothing runs after the switch that would need root.
    last_user = max(i for i, (key, _) in enumerate(dockerfile) if key == "USER")
    assert not [key for key, _ in dockerfile[last_user:] if key in ("RUN", "COPY", "ADD")]


def test_hyperpodrun_is_the_exec_form_entrypoint(dockerfile) -> None:
    (entrypoint,) = _args(dockerfile, "ENTRYPOINT")
    assert json.loads(entrypoint) == ["hyperpodrun"]
    for cmd in _args(dockerfile, "CMD"):
        assert isinstance(json.loads(cmd), list)


def test_exposes_the_agent_and_metrics_ports_jobs_use(dockerfile) -> None:
    ports = {p.removesuffix("/tcp") for p in " ".join(_args(dockerfile, "EXPOSE")).split()}
    assert ports == {str(AGENT_PORT), str(METRICS_PORT)}


def test_installs_the_pinned_requirements_and_copies_the_package(dockerfile) -> None:
    runs = " ".join(_args(dockerfile, "RUN"))
    assert "--require-hashes --no-deps --requirement /tmp/requirements-container.lock" in runs
    assert runs.index("--requirement /tmp/requirements-container.lock") < runs.index("pip check")
    assert "--no-cache-dir" in runs
    copies = _args(dockerfile, "COPY")
    assert "requirements-container.txt requirements-container.lock /tmp/" in copies
    assert ". training/" in copies
    assert _args(dockerfile, "WORKDIR")[-1] == "/opt/hptrain"


def test_efa_user_space_is_installed_for_containers(dockerfile) -> None:
    runs = " ".join(_args(dockerfile, "RUN"))
    # The AWS-documented container flags: no kernel module, no ulimit files, no lspci check.
    assert "efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify" in runs
    assert any(arg.startswith("EFA_INSTALLER_VERSION=1.") for arg in _args(dockerfile, "ARG"))


def _efa_run_commands() -> list[str]:
    """The `&&`-separated commands of the RUN that installs EFA, whitespace kept as written."""
    text = re.sub(r"\\\n\s*", "", DOCKERFILE.read_text())
    (run,) = [
        line for line in text.splitlines() if line.startswith("RUN ") and "efa_installer.sh" in line
    ]
    return [command.strip() for command in run[len("RUN ") :].split(" && ")]


def _run_in_build_shell(command: str, cwd: Path, **build_args: str) -> subprocess.CompletedProcess:
    # Build args reach RUN as environment variables; the Dockerfile's SHELL is bash -o pipefail.
    env = {"PATH": os.environ["PATH"], **build_args}
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_efa_installer_checksum_is_required(dockerfile, tmp_path: Path) -> None:
    args = _args(dockerfile, "ARG")
    declared = [arg for arg in args if arg.split("=", 1)[0] == "EFA_INSTALLER_SHA256"]
    assert declared == ["EFA_INSTALLER_SHA256"], "the checksum must have no default"
    guard = _efa_run_commands()[0]
    assert "EFA_INSTALLER_SHA256" in guard and "https://" not in guard
    # The guard comes first, so nothing is downloaded without a checksum.
    for missing in ({}, {"EFA_INSTALLER_SHA256": ""}):
        result = _run_in_build_shell(guard, tmp_path, EFA_INSTALLER_VERSION="1.47.0", **missing)
        assert result.returncode != 0
        assert "EFA_INSTALLER_SHA256 is required" in result.stderr
    ok = _run_in_build_shell(
        guard, tmp_path, EFA_INSTALLER_VERSION="1.47.0", EFA_INSTALLER_SHA256="0" * 64
    )
    assert ok.returncode == 0, ok.stderr


def test_efa_installer_download_is_verified_before_it_runs(tmp_path: Path) -> None:
    commands = _efa_run_commands()
    download = next(i for i, c in enumerate(commands) if "efa-installer.amazonaws.com" in c)
    (verify,) = [i for i, c in enumerate(commands) if "sha256sum -c" in c]
    unpack = next(i for i, c in enumerate(commands) if c.startswith("tar "))
    install = next(i for i, c in enumerate(commands) if "efa_installer.sh" in c)
    assert 0 < download < verify < unpack < install
    assert "if " not in commands[verify], "the check must not be optional"
    # The check itself: a matching tarball passes, any other content fails the build.
    tarball = tmp_path / "efa.tar.gz"
    tarball.write_bytes(b"installer")
    digest = hashlib.sha256(b"installer").hexdigest()
    assert (
        _run_in_build_shell(commands[verify], tmp_path, EFA_INSTALLER_SHA256=digest).returncode == 0
    )
    tarball.write_bytes(b"tampered")
    assert (
        _run_in_build_shell(commands[verify], tmp_path, EFA_INSTALLER_SHA256=digest).returncode != 0
    )


def test_environment_for_log_monitoring_and_efa(dockerfile) -> None:
    env = " ".join(_args(dockerfile, "ENV"))
    for setting in [
        "PYTHONUNBUFFERED=1",
        "FI_PROVIDER=efa",
        "NCCL_DEBUG=WARN",
        "NCCL_SOCKET_IFNAME=^lo,docker",
    ]:
        assert setting in env.split(), setting
    # RDMA support differs by instance type, so only the job manifest may set it.
    assert "FI_EFA_USE_DEVICE_RDMA" not in env


_PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[a-z0-9,_-]+\])?==[0-9][0-9A-Za-z.+-]*$")


def test_requirements_are_all_pinned() -> None:
    lines = [line.strip() for line in REQUIREMENTS.read_text().splitlines()]
    packages = [line for line in lines if line and not line.startswith("#")]
    assert packages
    assert [line for line in packages if not _PINNED.match(line)] == []
    names = {re.split(r"[\[=]", line, maxsplit=1)[0].lower() for line in packages}
    assert {"hyperpod-elastic-agent", "amzn-sagemaker-checkpointing", "torch"} <= names
    assert len(names) == len(packages), "a package is listed twice"


def test_pin_check_rejects_loose_requirements() -> None:
    for loose in ["torch", "torch>=2.4", "torch==2.*", "torch ==2.7.1", "-e ."]:
        assert not _PINNED.match(loose), loose


def test_dockerignore_keeps_the_context_to_the_package() -> None:
    patterns = {
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"**/__pycache__", "**/*.py[cod]"} <= patterns
    assert "requirements-container.txt" not in patterns


# What the image runs: the job's module (`hpctl job render`), the local launcher, and the
# tools a job runs beside the data and checkpoints on FSx: tokenizing into shards and
# exporting a checkpoint as Hugging Face weights.
ENTRY_POINTS = (TRAINER_MODULE, "training.launch", "training.prepare_data", "training.export_hf")


def _dockerignore_patterns(context: Path) -> list[str]:
    patterns = [
        line.strip()
        for line in (context / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # The matcher below knows no exceptions; one would make it pass files Docker keeps out.
    assert not [p for p in patterns if p.startswith("!")], patterns
    return patterns


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1].replace("[!", "[^"), end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _ignored(relative: str, patterns: list[str]) -> bool:
    """Whether Docker leaves `relative` out of the build context: it, or a directory above
    it, matches a pattern."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return any(_pattern(p.strip("/")).fullmatch(prefix) for p in patterns for prefix in prefixes)


def image_modules(parsed: list[tuple[str, str]], context: Path) -> dict[str, Path]:
    """Module name -> context file, for every .py file the Dockerfile's COPY instructions put
    in the image (destinations relative to the working directory, which is on PYTHONPATH)."""
    patterns = _dockerignore_patterns(context)
    modules: dict[str, Path] = {}
    for arguments in _args(parsed, "COPY"):
        *sources, destination = [a for a in arguments.split() if not a.startswith("--")]
        for source in sources:
            root = (context / source).resolve()
            files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
            for path in files:
                relative = path.relative_to(context.resolve()).as_posix()
                if path.suffix != ".py" or _ignored(relative, patterns):
                    continue
                assert not destination.startswith("/"), f"{relative} is copied to {destination}"
                inside = path.relative_to(root) if root.is_dir() else Path(path.name)
                parts = [*Path(destination).parts, *inside.with_suffix("").parts]
                modules[".".join(parts).removesuffix(".__init__")] = path
    return modules


def _imported(path: Path, module: str) -> set[str]:
    """The modules a file imports (`from a import b` counts `a` and `a.b`)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:  # relative: level 1 is the package itself, 2 its parent
                parts = package.split(".")[: package.count(".") + 2 - node.level]
                source = ".".join([*parts, node.module] if node.module else parts)
            found |= {source, *(f"{source}.{alias.name}" for alias in node.names)}
    return found


def unreachable_modules(modules: dict[str, Path]) -> list[str]:
    """The copied modules no entry point imports, directly or through other modules."""
    reached: set[str] = set()
    pending = list(ENTRY_POINTS)
    while pending:
        module = pending.pop()
        if module in reached or module not in modules:
            continue
        reached.add(module)
        parents = [module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)]
        pending += [*parents, *_imported(modules[module], module)]
    return sorted(set(modules) - reached)


@pytest.mark.parametrize(
    ("relative", "ignored"),
    [
        ("__pycache__/train.cpython-312.pyc", True),
        ("sub/__pycache__/x.py", True),
        ("model.pyc", True),
        (".mypy_cache/3.12/training/model.data.json", True),
        ("Dockerfile", True),
        ("model.py", False),
        ("requirements-container.txt", False),
    ],
)
def test_the_build_context_leaves_out_what_dockerignore_names(relative: str, ignored: bool) -> None:
    assert _ignored(relative, _dockerignore_patterns(TRAINING_DIR)) is ignored


def test_the_image_holds_only_modules_its_entry_points_run(dockerfile) -> None:
    # Development tools and test helpers stay out of the image: every module it copies is
    # imported by what a job or the launcher runs.
    modules = image_modules(dockerfile, TRAINING_DIR)
    assert set(ENTRY_POINTS) <= set(modules)
    assert unreachable_modules(modules) == []


def test_a_tool_put_back_into_the_package_is_found(dockerfile, tmp_path: Path) -> None:
    context = tmp_path / "training"
    shutil.copytree(TRAINING_DIR, context, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "tools" / "torch_api.py", context / "torch_api.py")
    assert unreachable_modules(image_modules(dockerfile, context)) == ["training.torch_api"]


def test_the_image_package_imports_nothing_from_the_infrastructure_code() -> None:
    # The build context is training/ alone: an import of config, hpctl, stacks,
    # platform_constructs, the development tools or the tests would fail inside the image.
    # (hpctl's job renderer imports training, never the other way round.)
    outside = {
        "config",
        "hpctl",
        "stacks",
        "platform_constructs",
        "app",
        "lifecycle",
        "tools",
        "tests",
    }
    found = []
    for path in sorted(TRAINING_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [
                f"{path.relative_to(TRAINING_DIR)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] in outside
            ]
    assert found == []


def test_installs_work_on_the_base_images_system_python(dockerfile) -> None:
    # The base is Ubuntu 24.04's externally managed Python 3.12 with a Debian-packaged pip.
    env = " ".join(_args(dockerfile, "ENV"))
    assert "PIP_BREAK_SYSTEM_PACKAGES=1" in env
    runs = _args(dockerfile, "RUN")
    (pip_pin,) = [r for r in runs if '"pip==' in r]
    assert '--ignore-installed "pip==' in pip_pin
    # python3 exists on both layouts; a bare `python` only where python-is-python3 is installed.
    assert not [r for r in runs if re.search(r"(^|[;&|]\s*)python\s", r)]
