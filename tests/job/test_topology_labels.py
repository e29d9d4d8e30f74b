"""The topology levels jobs ask Kueue for are labels HyperPod puts on nodes (AWS's list,
recorded with its sources in hyperpod_node_labels.json): a request for a label no node carries
would never be admitted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config.instance_types import INSTANCE_TYPES, topology_instance_types
from config.kubernetes import (
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    NODE_HEALTH_LABEL,
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    TOPOLOGY_LEVELS,
)
from hpctl.job.render import render_job
from tests.job.conftest import make_spec

LABELS = json.loads((Path(__file__).parent / "hyperpod_node_labels.json").read_text())
NODE_LABELS = frozenset(LABELS["topology"]) | frozenset(LABELS["node"])
TOPOLOGY_ANNOTATIONS = (REQUIRED_TOPOLOGY_ANNOTATION, PREFERRED_TOPOLOGY_ANNOTATION)


def unknown_labels(manifest: dict[str, Any]) -> list[str]:
    """Node labels the manifest's topology requests and node selector name that HyperPod does
    not put on nodes."""
    (replica,) = manifest["spec"]["replicaSpecs"]
    template = replica["template"]
    named = [
        value
        for metadata in (manifest["metadata"], template["metadata"])
        for key, value in metadata.get("annotations", {}).items()
        if key in TOPOLOGY_ANNOTATIONS
    ]
    named += list(template["spec"]["nodeSelector"])
    return [label for label in named if label not in NODE_LABELS]


def test_every_level_is_a_label_hyperpod_sets() -> None:
    assert set(TOPOLOGY_LEVELS) <= NODE_LABELS
    # ...and exactly the levels the HyperPod CLI accepts for a job.
    assert set(TOPOLOGY_LEVELS) == set(LABELS["hyperpod_cli_allowed_topology_labels"])


def test_the_node_labels_jobs_select_on_are_hyperpod_labels() -> None:
    assert {INSTANCE_TYPE_LABEL, INSTANCE_GROUP_LABEL, NODE_HEALTH_LABEL} <= NODE_LABELS


def test_the_types_with_topology_are_those_aws_lists() -> None:
    # Every type of the table that AWS lists, and none it does not.
    listed = set(LABELS["topology_instance_types"])
    assert set(topology_instance_types()) == listed & set(INSTANCE_TYPES)


@pytest.mark.parametrize(
    "topology",
    [
        None,
        *(f"{mode}:{level}" for mode in ("required", "preferred") for level in TOPOLOGY_LEVELS[:3]),
    ],
)
def test_rendered_requests_name_hyperpod_labels(topology: str | None) -> None:
    assert unknown_labels(render_job(make_spec(nodes=4, topology=topology))) == []


def test_the_check_catches_a_label_no_node_carries() -> None:
    manifest = render_job(make_spec(nodes=4))
    manifest["metadata"]["annotations"][PREFERRED_TOPOLOGY_ANNOTATION] = "topology.k8s.aws/rack"
    assert unknown_labels(manifest) == ["topology.k8s.aws/rack"]
