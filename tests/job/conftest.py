"""Shared builders for the job generator tests."""

from __future__ import annotations

from typing import Any

import pytest

from hpctl.job import JobSpec

REQUIRED: dict[str, Any] = {
    "name": "llama-8b",
    "team": "research",
    "priority": "training",
    "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/hptrain:1.4.0",
    "instance_type": "ml.p5.48xlarge",
    "instance_group": "gpu-p5",
}


def make_spec(**overrides: Any) -> JobSpec:
    return JobSpec(**{**REQUIRED, **overrides})


@pytest.fixture
def spec_factory():
    return make_spec


@pytest.fixture
def required_fields() -> dict[str, Any]:
    return dict(REQUIRED)
