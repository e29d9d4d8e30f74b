"""Shared fixtures: each environment's app, the pipeline app and the prod baseline the
variant tests compare with are synthesized once per test session.

Tests that use `synth_all`, `dev`, `staging`, `prod`, `env` or `pipeline` must carry
`pytest.mark.xdist_group(SYNTH_GROUP)` (module-level `pytestmark`), and tests that use
`prod_baseline` `pytest.mark.xdist_group(VARIANTS_GROUP)`, so that under
`pytest -n 2 --dist loadgroup` each synthesis runs on one worker only; collection stops
with a usage error naming any test that does not.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support import (
    ENVIRONMENTS,
    SYNTH_GROUP,
    VARIANTS_GROUP,
    PipelineSynth,
    SynthResult,
    environment,
    synthesize,
    synthesize_pipeline,
)

# Property tests: a modest, fixed set of examples (derandomized: the same examples on every
# run, so CI is repeatable and a failure reproduces), no per-example deadline (the shared
# 2-core machines make timings noise), no example database in the work tree.
# HYPOTHESIS_PROFILE=thorough searches wider and at random, for a local hunt.
settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True, database=None)
settings.register_profile("thorough", max_examples=2000, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _groups(item: pytest.Item) -> set[str]:
    return {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }


# Each session synth fixture and the one xdist group whose worker may build it.
GROUPED_FIXTURES = {
    "synth_all": SYNTH_GROUP,
    "pipeline": SYNTH_GROUP,
    "prod_baseline": VARIANTS_GROUP,
}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for fixture, group in GROUPED_FIXTURES.items():
        strays = [
            item.nodeid
            for item in items
            if fixture in getattr(item, "fixturenames", ()) and _groups(item) != {group}
        ]
        if strays:
            raise pytest.UsageError(
                f"these tests use the session fixture {fixture!r} but are not in "
                f"xdist_group({group!r}) alone; add "
                f"`pytestmark = pytest.mark.xdist_group({group!r})`: " + ", ".join(strays)
            )
    if config.getoption("loadgroup", default=False):
        _suffix_groups(items)


def _suffix_groups(items: list[pytest.Item]) -> None:
    """On an xdist worker under `--dist loadgroup`: end each grouped test's node ID in
    `@<group>`, which is how the scheduler groups tests. pytest-xdist 3.8 does this by
    assigning `item._nodeid`, which pytest 9 no longer reads (a node's ID is `item._id`), so
    without this every grouped test would be scheduled on its own."""
    from _pytest.nodeid import NodeId

    for item in items:
        groups = _groups(item)
        suffix = f"@{'_'.join(sorted(groups))}"
        if groups and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(f"{item.nodeid}{suffix}")


@pytest.fixture(scope="session", autouse=True)
def shared_aws_model_loader() -> Iterator[None]:
    """Every boto3 session the tests make reads the AWS API models through one loader, which
    keeps what it parsed: each fresh session would parse the endpoint data and the service
    models again (a fifth of a second for SageMaker), and the tests make hundreds."""
    import botocore.session

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(
            botocore.session, "create_loader", functools.cache(botocore.session.create_loader)
        )
        yield


@pytest.fixture(scope="session")
def synth_all(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthResult]:
    return {
        name: synthesize(environment(name), tmp_path_factory.mktemp(f"cdk-{name}"))
        for name in ENVIRONMENTS
    }


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> PipelineSynth:
    """The delivery pipeline app with every environment as a Stage."""
    return synthesize_pipeline(tmp_path_factory.mktemp("cdk-pipeline"))


@pytest.fixture(scope="session")
def prod_baseline(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    """prod as shipped, synthesized on the variants worker for the tests that compare a
    changed prod with it (synth_all's prod lives on the other worker)."""
    return synthesize(environment("prod"), tmp_path_factory.mktemp("cdk-prod-baseline"))


@pytest.fixture(scope="session")
def dev(synth_all: dict[str, SynthResult]) -> SynthResult:
    return synth_all["dev"]


@pytest.fixture(scope="session")
def staging(synth_all: dict[str, SynthResult]) -> SynthResult:
    return synth_all["staging"]


@pytest.fixture(scope="session")
def prod(synth_all: dict[str, SynthResult]) -> SynthResult:
    return synth_all["prod"]


@pytest.fixture(params=ENVIRONMENTS)
def env(request: pytest.FixtureRequest, synth_all: dict[str, SynthResult]) -> SynthResult:
    """Each environment in turn."""
    return synth_all[request.param]
