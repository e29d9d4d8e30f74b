"""Rendered manifests validate: the custom resource against a JSON schema of the operator's CRD
fields, the pod template against the Kubernetes API schema."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from hpctl.job.render import render_job
from hpctl.job.spec import JobSpec
from tests.job.conftest import env_spec
from tests.support import environment_data, loaded_from

SCHEMA = json.loads((Path(__file__).parent / "hyperpodpytorchjob.schema.json").read_text())
# Oldest and newest Kubernetes minors the platform runs (HyperPod EKS supports 1.30-1.33).
KUBERNETES_VERSIONS = ("1.30.0", "1.33.0")
KUBERNETES_VERSION = KUBERNETES_VERSIONS[-1]

VARIANTS: list[dict[str, Any]] = [
    {},
    {
        "instance_type": "ml.g5.12xlarge",
        "nodes": 2,
        "spares": 1,
        "preset": "tiny",
        "hang_timeout_s": 120,
    },
    {"instance_type": "ml.trn1.32xlarge", "fsx_claim": "team-a.fsx"},
    {
        "min_tokens_per_s": 20000,
        "taints": [
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "training", "effect": "NoExecute"},
        ],
        "checkpoint_dirs": {"durable": "/fsx/teams/research/ckpt/x"},
        "tiered_storage": True,
        "clean_pod_policy": "None",
    },
]


# Specs as `hpctl job render --env` builds them: dev's g5 group, prod's p5 group with the
# managed tier's configMapKeyRef variable, a tainted group's tolerations.
def _tainted_prod() -> Any:
    data = environment_data("prod")
    group = data["hyperpod"]["instance_groups"][0]
    del group["deep_health_checks"]
    group["taints"] = [
        {"key": "example.com/dedicated", "value": "training", "effect": "NoSchedule"}
    ]
    return loaded_from(data).config


ENVIRONMENT_SPECS: dict[str, Callable[[], JobSpec]] = {
    "dev": lambda: env_spec("dev", team="sandbox", instance_group="gpu-g5", nodes=2),
    "prod": lambda: env_spec("prod", nodes=8, spares=4),
    "prod-tainted": lambda: env_spec(_tainted_prod(), team="research", nodes=4),
}


def _validator() -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    return cls(SCHEMA, format_checker=cls.FORMAT_CHECKER)


def _pod_template(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": manifest["metadata"]["name"],
            "namespace": manifest["metadata"]["namespace"],
        },
        "template": manifest["spec"]["replicaSpecs"][0]["template"],
    }


@pytest.mark.parametrize("overrides", VARIANTS)
def test_custom_resource_matches_the_crd_schema(spec_factory, overrides: dict[str, Any]) -> None:
    errors = [
        error.message for error in _validator().iter_errors(render_job(spec_factory(**overrides)))
    ]
    assert errors == []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overrides", VARIANTS)
def test_pod_template_validates_against_kubernetes(
    spec_factory, overrides: dict[str, Any], version: str
) -> None:
    manifest = render_job(spec_factory(**overrides))
    kubernetes_validate.validate(_pod_template(manifest), version, strict=True)


@pytest.mark.parametrize("env", sorted(ENVIRONMENT_SPECS))
def test_environment_jobs_validate(env: str) -> None:
    manifest = render_job(ENVIRONMENT_SPECS[env]())
    assert [error.message for error in _validator().iter_errors(manifest)] == []
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(_pod_template(manifest), version, strict=True)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "nprocPerNode"), 8),
        (("spec", "replicaSpecs", 0, "spares"), -1),
        (("spec", "runPolicy", "cleanPodPolicy"), "Always"),
        (("spec", "runPolicy", "restartPolicy", "maxRestarts"), 3),
        (("spec", "runPolicy", "logMonitoringConfiguration", 0, "operator"), "less"),
        (("spec", "runPolicy", "logMonitoringConfiguration", 0, "logPattern"), "(unclosed"),
        (("spec", "runPolicy", "logMonitoringConfiguration", 0, "metricThreshold"), 1.5),
        (("metadata", "labels", "kueue.x-k8s.io/queue-name"), "q" * 64),
    ],
)
def test_crd_schema_rejects_broken_manifests(
    spec_factory, path: tuple[Any, ...], value: Any
) -> None:
    manifest = copy.deepcopy(render_job(spec_factory()))
    node = manifest
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert list(_validator().iter_errors(manifest))


def test_kubernetes_schema_rejects_a_broken_pod_template(spec_factory) -> None:
    template = _pod_template(render_job(spec_factory()))
    template["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
    template = _pod_template(render_job(spec_factory()))
    template["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["name"] = "fsx"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
