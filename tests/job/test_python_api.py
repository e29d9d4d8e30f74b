"""The Python API's documented example (docs/python-api.md) runs as written, against a fake
API server, and does what `hpctl job` does with the same options."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctl.job import api
from tests.job.kube_api import KubeAPI, kubeconfig, serving
from tools import REPO

PAGE = REPO / "docs" / "python-api.md"
MARKER = "<!-- python-api-example -->"


def example() -> str:
    """The code of the page's example: the fenced block after the marker."""
    text = PAGE.read_text(encoding="utf-8")
    return text.split(MARKER, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def dev_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixed_clock: object
) -> Iterator[KubeAPI]:
    """A fake API server that the dev environment's default kubeconfig points at."""
    with serving() as served:
        path = kubeconfig(tmp_path / "hpctl-dev.yaml", served.url, env="dev")
        monkeypatch.setattr(api, "default_kubeconfig", lambda env: path)
        yield served


def test_the_documented_example_runs_and_does_what_the_cli_does(dev_cluster: KubeAPI) -> None:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        exec(compile(example(), str(PAGE), "exec"), {})  # noqa: S102 - the repository's own docs
    assert output.getvalue().splitlines() == [
        "hyperpod-ns-sandbox 4",
        "world 4 batch 8",
        "tiny-smoke Submitted 0/1",
    ]
    posted = [r.body for r in dev_cluster.requests if r.method == "POST"]
    rendered = api.render(
        api.spec(
            api.environment("dev"),
            team="sandbox",
            instance_group="gpu-g5",
            nodes=1,
            image="123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0",
            preset="tiny",
            name="tiny-smoke",
        )
    )
    assert posted == [rendered]
    assert [r.method for r in dev_cluster.requests][-1] == "DELETE"
    (job,) = dev_cluster.jobs.values()
    assert job["metadata"]["deletionTimestamp"]  # cancelled: its pods are stopping


def test_bad_input_is_one_line_naming_the_option() -> None:
    with pytest.raises(api.JobRequestError) as refused:
        api.spec(
            api.environment("dev"),
            team="sandbox",
            instance_group="gpu-g5",
            image="hptrain:1.4.0",
        )
    assert str(refused.value) == "--nodes: missing; pass --nodes"
