"""The torch API the training package uses exists in the installed torch and, read from its
wheel's source, in the training image's torch; the check fails when a name is missing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed.tensor

from tools import torch_api, torch_source

PLANTED = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint import no_such_function
    from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans


    def step(x: torch.Tensor) -> torch.Tensor:
        torch.cuda.no_such_attribute()
        dist.all_reduce(x, no_such_keyword=1)
        return torch.nn.functional.cross_entropy(x, x)
    """
)


def _planted(tmp_path: Path) -> Path:
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "step.py").write_text(PLANTED)
    return package


@pytest.fixture(scope="module")
def package_uses() -> dict[str, torch_api.Use]:
    """The training package's torch names, read once: every test only reads them."""
    return torch_api.collect()


def test_every_torch_name_the_package_uses_exists_here(
    package_uses: dict[str, torch_api.Use],
) -> None:
    uses = package_uses
    # The scan sees imports, aliases, annotations, calls inside functions and keywords.
    assert {
        "torch.nn.functional.scaled_dot_product_attention",  # F.<name>
        "torch.distributed.all_reduce",  # dist.<name>
        "torch.cuda.cudart",  # only called inside a method
        "torch.futures.Future",  # an annotation
        "torch.distributed.checkpoint.planner.SavePlan",  # from-import
    } <= set(uses)
    assert "src_data_rank" in uses["torch.distributed.tensor.distribute_tensor"].keywords
    assert "enable_gqa" in uses["torch.nn.functional.scaled_dot_product_attention"].keywords
    assert torch_api.problems(uses) == []


def test_the_package_uses_no_private_torch_module(package_uses: dict[str, torch_api.Use]) -> None:
    assert [name for name in package_uses if torch_api._private(name)] == []


def test_planted_missing_names_are_reported(tmp_path: Path) -> None:
    found = torch_api.problems(torch_api.collect(_planted(tmp_path)))
    text = "\n".join(found)
    assert "planted/step.py:4: torch.distributed.checkpoint.no_such_function does not exist" in text
    assert "torch.cuda.no_such_attribute does not exist" in text
    assert "torch.distributed.all_reduce() takes no keyword 'no_such_keyword'" in text
    assert "_dedup_save_plans.dedup_save_plans is private torch API" in text
    assert len(found) == 4, found
    assert not any("cross_entropy" in line for line in found)


def test_a_torch_without_a_name_the_package_uses_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, package_uses: dict[str, torch_api.Use]
) -> None:
    # As an older or newer torch would: a function gone, and a keyword a function lost.
    monkeypatch.delattr(torch.cuda, "cudart")

    def distribute_tensor(tensor, device_mesh=None, placements=None):  # type: ignore[no-untyped-def]
        raise AssertionError("never called")

    monkeypatch.setattr(torch.distributed.tensor, "distribute_tensor", distribute_tensor)
    found = "\n".join(torch_api.problems(package_uses))
    assert "training/checkpoint/staging.py" in found and "torch.cuda.cudart does not exist" in found
    assert "torch.distributed.tensor.distribute_tensor() takes no keyword 'src_data_rank'" in found


def test_the_command_line_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # In process: `python -m tools.torch_api` only exits with what main returns, and a
    # second interpreter would spend seconds importing torch again.
    assert torch_api.main([]) == 0
    ok = capsys.readouterr()
    assert f"torch {torch.__version__}: all" in ok.out
    assert torch_api.main(["--package-dir", str(_planted(tmp_path))]) == 1
    bad = capsys.readouterr()
    assert "no_such_function does not exist" in bad.err


# ---- against the image's torch, read from its wheel's source ----------------------------

NEWER_THAN_THE_IMAGE = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F


    def loss(h: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(h, op=dist.ReduceOp.SUM)
        return F.linear_cross_entropy(h, w, y)
    """
)


@pytest.fixture(scope="module")
def image_torch() -> torch_source.SourceTree:
    root = torch_source.IMAGE_SOURCES_DIR / torch_source.image_version()
    if not (root / "torch" / "__init__.py").is_file():
        pytest.fail(f"the image's torch sources are not unpacked at {root}: run `make setup`")
    return torch_source.SourceTree(root)


@pytest.fixture(scope="module")
def installed_torch_source() -> torch_source.SourceTree:
    return torch_source.SourceTree(Path(torch.__file__).resolve().parents[1])


def test_the_package_uses_only_torch_api_the_image_torch_has(
    image_torch: torch_source.SourceTree, package_uses: dict[str, torch_api.Use]
) -> None:
    assert torch_api.problems(package_uses, image_torch) == []


def test_reading_the_source_finds_every_name_and_signature_importing_finds(
    installed_torch_source: torch_source.SourceTree, package_uses: dict[str, torch_api.Use]
) -> None:
    uses = package_uses
    unresolved = [name for name in uses if installed_torch_source.resolve(name) is None]
    assert unresolved == []
    # Every keyword the package passes is checked against a signature read from the source,
    # none waved through for want of one.
    unread = [
        (name, keyword)
        for name, use in uses.items()
        for keyword in use.keywords
        if installed_torch_source.accepts(installed_torch_source.resolve(name), keyword) is None  # type: ignore[arg-type]  # resolved above
    ]
    assert unread == []


def test_planted_problems_read_from_source_are_those_importing_finds(
    tmp_path: Path, installed_torch_source: torch_source.SourceTree
) -> None:
    uses = torch_api.collect(_planted(tmp_path))
    assert torch_api.problems(uses, installed_torch_source) == torch_api.problems(uses)


def test_a_function_newer_than_the_image_torch_is_reported(
    tmp_path: Path, image_torch: torch_source.SourceTree
) -> None:
    # F.linear_cross_entropy arrived after the image's release: the tests' torch has it, so
    # only the check against the image's source can catch it before an image build.
    package = tmp_path / "planted"
    package.mkdir()
    (package / "loss.py").write_text(NEWER_THAN_THE_IMAGE)
    uses = torch_api.collect(package)
    assert torch_api.problems(uses) == []
    assert torch_api.problems(uses, image_torch) == [
        "planted/loss.py:9: torch.nn.functional.linear_cross_entropy does not exist"
    ]


def test_the_release_command_checks_against_the_image_torch(
    image_torch: torch_source.SourceTree, capsys: pytest.CaptureFixture[str]
) -> None:
    code = torch_api.main(["--release", "image"])
    result = capsys.readouterr()
    assert code == 0, result.err
    assert f"torch {torch_source.image_version()} (source): all" in result.out


FAKE_TORCH = {
    "torch/__init__.py": """
        from typing import TYPE_CHECKING
        from torch.version import __version__ as __version__
        if TYPE_CHECKING:
            from torch._C._functions import *
            from torch.cuda.streams import Event as TypingOnly
        else:
            from torch.cuda.streams import Event as RunTime
        try:
            from .cuda import Stream
        except ImportError:
            pass
        def helper() -> None: ...
        del helper
        """,
    "torch/version.py": "__version__ = '0.0'\n",
    "torch/_C/__init__.pyi": "",
    "torch/_C/_functions.pyi": """
        from typing import overload
        @overload
        def empty(size: int, *, dtype: object = None) -> object: ...
        @overload
        def empty(*size: int, pin_memory: bool = False) -> object: ...
        def _private() -> None: ...
        from torch.nn.functional import Options
        """,
    "torch/cuda/__init__.py": """
        from .streams import *
        _lazy_modules = {"lazy_mod"}
        def __getattr__(name):
            if name in _lazy_modules or name == "legacy":
                return None
            raise AttributeError(name)
        """,
    "torch/cuda/streams.py": """
        __all__ = ["Stream"]
        __all__ += ["Event"]
        class Stream:
            def __new__(cls, device=None, priority=0): ...
            def synchronize(self) -> None: ...
        class Event: ...
        class Unlisted: ...
        class SubStream(Stream):
            def __init__(self) -> None:
                self.handle = 0
        class Mapping(dict):
            pass
        """,
    "torch/nn/__init__.py": "from torch.cuda.streams import *\n",
    "torch/nn/functional.py": """
        import torch
        from dataclasses import dataclass
        silu = _add_docstr(torch._C._functions.empty, "doc")
        @dataclass(frozen=True)
        class Options:
            full: bool = False
        class Inherits(Options):
            pass
        """,
}


@pytest.fixture
def fake_torch(tmp_path: Path) -> torch_source.SourceTree:
    for relative, text in FAKE_TORCH.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return torch_source.SourceTree(tmp_path)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("torch.cuda", "module"),
        ("torch.cuda.streams.Stream", "class"),
        ("torch.cuda.Stream", "class"),  # relative star import
        ("torch.Stream", "class"),  # relative import inside try
        ("torch.empty", "function"),  # TYPE_CHECKING star import of a stub
        ("torch.__version__", "value"),
        ("torch.nn.functional.silu", "function"),  # _add_docstr(fn, ...) is fn
        ("torch.cuda.Stream.synchronize", "function"),
        ("torch.nn.Event", "class"),  # star import of a name added to __all__ later
        ("torch.cuda.streams.Unlisted", "class"),
        ("torch.cuda.lazy_mod", "external"),  # named in the module's literal set
        ("torch.cuda.legacy", "external"),  # named in its __getattr__
        ("torch.RunTime", "class"),  # the run-time branch of `if TYPE_CHECKING`
        ("torch.cuda.streams.SubStream.synchronize", "function"),  # inherited
        ("torch.cuda.streams.SubStream.handle", "value"),  # set on self
        ("torch.cuda.streams.Mapping.anything", "external"),  # may come from dict
    ],
)
def test_source_tree_resolves(fake_torch: torch_source.SourceTree, name: str, kind: str) -> None:
    binding = fake_torch.resolve(name)
    assert binding is not None and binding.kind == kind


@pytest.mark.parametrize(
    "name",
    [
        "torch.nothing",
        "torch._private",
        "torch.nn.missing",
        "torch.nn.functional.gone",
        "torch.nn.Unlisted",  # not in the __all__ of the module torch.nn star-imports
        "torch.cuda.anything",  # a module __getattr__ that names other things only
        "torch.TypingOnly",  # imported for type checkers only
        "torch.helper",  # deleted at module level
        "torch.Options",  # a stub's import without `as`: not re-exported
        "torch.cuda.streams.SubStream.missing",  # neither it nor its torch bases have it
    ],
)
def test_source_tree_reports_missing_names(fake_torch: torch_source.SourceTree, name: str) -> None:
    assert fake_torch.resolve(name) is None


@pytest.mark.parametrize(
    ("name", "keyword", "verdict"),
    [
        ("torch.empty", "dtype", True),  # first overload
        ("torch.empty", "pin_memory", True),  # second overload
        ("torch.empty", "device", False),
        ("torch.cuda.Stream", "priority", True),  # __new__
        ("torch.cuda.Stream", "stream_id", False),
        ("torch.nn.functional.Options", "full", True),  # a dataclass field
        ("torch.nn.functional.Options", "partial", False),
        ("torch.nn.functional.Inherits", "partial", None),  # fields of a base: not read
        ("torch.__version__", "x", None),
    ],
)
def test_source_tree_reads_keywords(
    fake_torch: torch_source.SourceTree, name: str, keyword: str, verdict: bool | None
) -> None:
    binding = fake_torch.resolve(name)
    assert binding is not None
    assert fake_torch.accepts(binding, keyword) is verdict


def test_the_image_torch_version_comes_from_its_pin(tmp_path: Path) -> None:
    pins = tmp_path / "requirements.txt"
    pins.write_text("numpy==2.4.6\ntorch==2.11.0  # the base image's\n")
    assert torch_source.image_version(pins) == "2.11.0"
    pins.write_text("numpy==2.4.6\ntorchvision==0.26.0\n")
    with pytest.raises(ValueError, match="pins no torch==VERSION"):
        torch_source.image_version(pins)


def test_requires_dist_reads_a_distributions_own_range(tmp_path: Path) -> None:
    metadata = tmp_path / "agent.METADATA"
    metadata.write_text(
        "Metadata-Version: 2.4\nName: agent\nRequires-Dist: Torch<2.12.0,>=2.4.0\n"
        "Requires-Dist: pip<25.3; python_version >= '3.9'\n"
        "Description: Requires-Dist: numpy<1\n"
    )
    assert torch_source.requires_dist(metadata, "torch") == "<2.12.0,>=2.4.0"
    assert torch_source.requires_dist(metadata, "pip") == "<25.3"
    with pytest.raises(ValueError, match="declares no Requires-Dist on numpy"):
        torch_source.requires_dist(metadata, "numpy")


@pytest.mark.parametrize(
    "name",
    [
        "torch.thread_safe_generator",  # newer than the image's release
        "torch.nn.functional.linear_cross_entropy",  # newer as well
        "torch.nn.Module.no_such_method",
        "torch.DeviceMesh",  # imported under TYPE_CHECKING only
        "torch.register_after_fork",  # deleted by torch/__init__.py
    ],
)
def test_the_image_torch_lacks(image_torch: torch_source.SourceTree, name: str) -> None:
    assert image_torch.resolve(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "torch.Tensor.copy_",  # a method of the C base class, from its stub
        "torch.nn.Module.register_buffer",
        "torch.optim.AdamW.step",  # inherited from Adam
        "torch.onnx",  # a lazy submodule
        "torch.distributed.tensor.DTensor.full_tensor",
    ],
)
def test_the_image_torch_has(image_torch: torch_source.SourceTree, name: str) -> None:
    assert image_torch.resolve(name) is not None


def test_names_bound_only_at_run_time_are_listed_not_failed(
    tmp_path: Path, image_torch: torch_source.SourceTree
) -> None:
    # torch.cuda.FloatTensor exists (in both releases), but only a running torch binds it.
    package = tmp_path / "planted"
    package.mkdir()
    (package / "legacy.py").write_text("import torch\n\nKIND = torch.cuda.FloatTensor\n")
    uses = torch_api.collect(package)
    assert torch_api.problems(uses, image_torch) == []
    assert torch_api.unreadable(uses, image_torch) == ["torch.cuda.FloatTensor"]
