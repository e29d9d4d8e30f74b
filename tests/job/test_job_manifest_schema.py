"""Rendered manifests validate: the custom resource strictly against the operator's field model
(vendored from the HyperPod CLI, unknown fields rejected at every depth) and the project's value
rules, the pod template against the Kubernetes API schema."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from hpctl.job.render import render_job
from hpctl.job.spec import JobSpec
from tests.job.conftest import env_spec, gb200_environment
from tests.support import KUBERNETES_VALIDATE_VERSIONS, environment_data, loaded_from

_HERE = Path(__file__).parent
# Which fields exist: the HyperPod CLI's model of the CRD (source and commit in the file).
CRD_SCHEMA = json.loads((_HERE / "hyperpodpytorchjob.crd.schema.json").read_text())
# What values they may take where the model says only "string" or "integer".
VALUE_SCHEMA = json.loads((_HERE / "hyperpodpytorchjob.schema.json").read_text())
KUBERNETES_VERSION = KUBERNETES_VALIDATE_VERSIONS[-1]

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
    # Placement, elastic jobs and parallelism (tests/job/test_job_scaling.py).
    {"nodes": 4, "topology": "required:topology.k8s.aws/network-node-layer-2"},
    {"nodes": 2, "elastic": "2:8", "tp": 2},
    {"nodes": 3, "elastic": "3:8", "spares": 1},
    {"preset": "tiny", "instance_type": "ml.g5.12xlarge", "nodes": 1, "elastic": "1:2"},
    {"nodes": 2, "parallelism": "fsdp", "topology": "none"},
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
    "prod-gb200": lambda: env_spec(
        gb200_environment(),
        instance_group="gpu-gb200",
        nodes=4,
        elastic="4:16",
        tp=2,
        topology="ultraserver",
    ),
}


@functools.cache
def _validators() -> tuple[Any, ...]:
    """A validator per schema, each schema checked against its meta-schema once: checking
    the CRD model takes half a second, which every manifest would pay again."""
    validators = []
    for schema in (CRD_SCHEMA, VALUE_SCHEMA):
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validators.append(cls(schema, format_checker=cls.FORMAT_CHECKER))
    return tuple(validators)


def _errors(manifest: dict[str, Any]) -> list[str]:
    errors = []
    for validator in _validators():
        errors += [
            f"{error.json_path}: {error.message}"
            for error in validator.iter_errors(_without_pod_security_context(manifest))
        ]
    return errors


def _without_pod_security_context(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest less each pod's securityContext, which the Kubernetes schema checks instead.

    The CLI's generated model has one `SecurityContext` class for containers and pods alike
    (its line 975, used for the pod's `securityContext` too), so the pod-level fields of
    Kubernetes' PodSecurityContext (supplementalGroups, fsGroup, sysctls) are missing there,
    although the same file's pod descriptions name `spec.securityContext.supplementalGroups`.
    The operator embeds the real PodTemplateSpec; `_pod_template` validates it strictly."""
    trimmed = copy.deepcopy(manifest)
    for replica in trimmed["spec"]["replicaSpecs"]:
        replica["template"]["spec"].pop("securityContext", None)
    return trimmed


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
    assert _errors(render_job(spec_factory(**overrides))) == []


@pytest.mark.parametrize("version", KUBERNETES_VALIDATE_VERSIONS)
@pytest.mark.parametrize("overrides", VARIANTS)
def test_pod_template_validates_against_kubernetes(
    spec_factory, overrides: dict[str, Any], version: str
) -> None:
    manifest = render_job(spec_factory(**overrides))
    kubernetes_validate.validate(_pod_template(manifest), version, strict=True)


@pytest.mark.parametrize("env", sorted(ENVIRONMENT_SPECS))
def test_environment_jobs_validate(env: str) -> None:
    manifest = render_job(ENVIRONMENT_SPECS[env]())
    assert _errors(manifest) == []
    for version in KUBERNETES_VALIDATE_VERSIONS:
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
    assert _errors(manifest)


_RULE = ("spec", "runPolicy", "logMonitoringConfiguration", 0)
_CONTAINER = ("spec", "replicaSpecs", 0, "template", "spec", "containers", 0)


# `kubectl apply` validates fields strictly: a field the operator does not know fails the apply,
# at whatever depth it sits.
@pytest.mark.parametrize(
    ("path", "field"),
    [
        ((), "status"),
        (("spec",), "nprocsPerNode"),
        (("spec", "replicaSpecs", 0), "spare"),
        (("spec", "replicaSpecs", 0, "template"), "labels"),
        (("spec", "runPolicy"), "maxRestarts"),
        (("spec", "runPolicy", "restartPolicy"), "maxRestarts"),
        (_RULE, "faultOnMatch"),
        (_CONTAINER, "gpus"),
        ((*_CONTAINER, "resources"), "gpus"),
    ],
)
def test_crd_schema_rejects_an_unknown_field(
    spec_factory, path: tuple[Any, ...], field: str
) -> None:
    manifest = copy.deepcopy(render_job(spec_factory(min_tokens_per_s=1000)))
    node = manifest
    for key in path:
        node = node[key]
    node[field] = True
    assert [error for error in _errors(manifest) if repr(field) in error]


def test_kubernetes_schema_rejects_a_broken_pod_template(spec_factory) -> None:
    template = _pod_template(render_job(spec_factory()))
    template["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
    template = _pod_template(render_job(spec_factory()))
    template["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["name"] = "fsx"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)


def test_the_pod_security_context_is_held_to_the_kubernetes_schema(spec_factory) -> None:
    manifest = render_job(spec_factory())
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert {"runAsUser", "runAsGroup"} <= set(pod["securityContext"])
    kubernetes_validate.validate(_pod_template(manifest), KUBERNETES_VERSION, strict=True)
    pod["securityContext"]["supplementalGroup"] = [1]  # misspelt: Kubernetes has no such field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(_pod_template(manifest), KUBERNETES_VERSION, strict=True)


def test_crd_schema_rejects_a_misspelt_elastic_field(spec_factory) -> None:
    manifest = copy.deepcopy(render_job(spec_factory(nodes=2, elastic="2:8")))
    assert _errors(manifest) == []
    policy = manifest["spec"]["elasticPolicy"]
    policy["replicaValues"] = policy.pop("replicaDiscreteValues")
    assert [error for error in _errors(manifest) if "'replicaValues'" in error]
