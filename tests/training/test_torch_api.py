"""The torch API the training package uses exists in the installed torch (the container build
runs the same check against the image's torch), and the check fails when a name is missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed.tensor

from training import torch_api

REPO = Path(__file__).resolve().parents[2]

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


def test_every_torch_name_the_package_uses_exists_here() -> None:
    uses = torch_api.collect()
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


def test_the_package_uses_no_private_torch_module() -> None:
    assert [name for name in torch_api.collect() if torch_api._private(name)] == []


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
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As an older or newer torch would: a function gone, and a keyword a function lost.
    monkeypatch.delattr(torch.cuda, "cudart")

    def distribute_tensor(tensor, device_mesh=None, placements=None):  # type: ignore[no-untyped-def]
        raise AssertionError("never called")

    monkeypatch.setattr(torch.distributed.tensor, "distribute_tensor", distribute_tensor)
    found = "\n".join(torch_api.problems(torch_api.collect()))
    assert "training/checkpoint_staging.py" in found and "torch.cuda.cudart does not exist" in found
    assert "torch.distributed.tensor.distribute_tensor() takes no keyword 'src_data_rank'" in found


def test_the_command_the_image_build_runs(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "training.torch_api", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    ok = run("--import")
    assert ok.returncode == 0, ok.stderr
    assert f"torch {torch.__version__}: all" in ok.stdout
    bad = run("--package-dir", str(_planted(tmp_path)))
    assert bad.returncode == 1
    assert "no_such_function does not exist" in bad.stderr
