"""The stack outputs hpctl reads are the ones the stacks write: the observability stack's
Grafana endpoint (`hpctl job describe`'s dashboard link), synthesized for an environment with
a Grafana workspace (no shipped environment has one, so the snapshots do not show it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.schema.observability import GRAFANA_ENDPOINT_OUTPUT
from tests.support import VARIANTS_GROUP, synthesize, variant_of


@pytest.mark.slow
@pytest.mark.xdist_group(VARIANTS_GROUP)
def test_the_observability_stack_exports_the_grafana_endpoint_hpctl_reads(tmp_path: Path):
    def with_grafana(data: dict) -> None:
        data["observability"]["grafana"] = True

    loaded = variant_of("dev", with_grafana)
    result = synthesize(loaded, tmp_path)
    stack = result.stacks["observability"]
    assert stack.stack_name == loaded.config.names.stack("observability")
    workspace = result.logical_id("observability", stack.grafana.workspace)
    outputs = result.templates["observability"]["Outputs"]
    assert outputs[GRAFANA_ENDPOINT_OUTPUT]["Value"] == {"Fn::GetAtt": [workspace, "Endpoint"]}
