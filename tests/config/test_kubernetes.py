"""Kubernetes' own name rules (`config.kubernetes`), one test per rule, each at its edges:
the API server's validation (k8s.io/apimachinery/pkg/util/validation) decides what passes."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import botocore.session
import pytest
from botocore.model import ServiceModel
from pydantic import ValidationError

from config.kubernetes import (
    Taint,
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_key,
    is_label_value,
)

LABEL_63 = "a" * 63
SUBDOMAIN_253 = ".".join([LABEL_63] * 3 + ["a" * 61])  # 3 x 63 + 61 + 3 dots = 253

# (rule, predicate, accepted values, rejected values)
RULES: list[tuple[str, Callable[[str], bool], list[str], list[str]]] = [
    (
        "dns1123-label",
        is_dns1123_label,
        ["a", "0", "team-a", "1st", LABEL_63],
        ["", "A", "-a", "a-", "a.b", "a_b", "a" * 64, "a\n"],
    ),
    (
        "dns1123-subdomain",
        is_dns1123_subdomain,
        ["a", "fsx-claim", "team-a.training", SUBDOMAIN_253],
        ["", "A", ".a", "a.", "a..b", "-a.b", "a_b", SUBDOMAIN_253 + "a", "a\n"],
    ),
    (
        "dns1035-label",
        is_dns1035_label,
        ["a", "llama-8b", LABEL_63],
        ["", "8b", "-a", "a-", "A", "a.b", "a" * 64],
    ),
    (
        "label-key",
        is_label_key,
        [
            "a",
            "A_b.c-D",
            "example.com/gpu",
            "nvidia.com/gpu",
            "a/" + LABEL_63,
            SUBDOMAIN_253 + "/a",
        ],
        [
            "",
            "/a",
            "a/",
            "a/b/c",
            "Example.com/a",
            "_a",
            "a_",
            "a b",
            "a" * 64,
            "a/" + "a" * 64,
            SUBDOMAIN_253 + "a/a",
            "a\n",
        ],
    ),
    (
        "label-value",
        is_label_value,
        ["", "a", "A_b.c-1", LABEL_63],
        ["-a", "a-", ".a", "a b", "a/b", "a" * 64, "a\n"],
    ),
]


@pytest.mark.parametrize(
    ("rule", "predicate", "accepted", "rejected"), RULES, ids=[r[0] for r in RULES]
)
def test_name_rule(
    rule: str, predicate: Callable[[str], bool], accepted: list[str], rejected: list[str]
) -> None:
    assert [v for v in accepted if not predicate(v)] == []
    assert [v for v in rejected if predicate(v)] == []


def test_taint_key_is_a_label_key() -> None:
    assert Taint(key="example.com/gpu", effect="NoSchedule").key == "example.com/gpu"
    with pytest.raises(ValidationError, match="not a valid Kubernetes taint key"):
        Taint(key="example.com/", effect="NoSchedule")


def test_taint_value_is_a_label_value() -> None:
    assert Taint(key="a", value="A_b.c-1", effect="NoSchedule").value == "A_b.c-1"
    with pytest.raises(ValidationError, match="not a valid Kubernetes taint value"):
        Taint(key="a", value="a b", effect="NoSchedule")


def test_an_empty_taint_value_is_no_value() -> None:
    # Kubernetes stores no value as "" (an omitempty string): both are one taint.
    empty = Taint(key="a", value="", effect="NoSchedule")
    assert empty.value is None
    assert empty == Taint(key="a", effect="NoSchedule")


@pytest.mark.parametrize("effect", ["NoSchedule", "PreferNoSchedule", "NoExecute"])
def test_taint_effects(effect: str) -> None:
    assert Taint(key="a", effect=effect).effect == effect  # type: ignore[arg-type]


def test_an_unknown_taint_effect_is_rejected() -> None:
    with pytest.raises(ValidationError, match="NoSchedule"):
        Taint(key="a", effect="NoWay")  # type: ignore[arg-type]


def test_toleration_of_a_taint_with_and_without_value() -> None:
    assert Taint(key="a", value="b", effect="NoExecute").toleration() == {
        "key": "a",
        "operator": "Equal",
        "value": "b",
        "effect": "NoExecute",
    }
    assert Taint(key="a", effect="NoSchedule").toleration() == {
        "key": "a",
        "operator": "Exists",
        "effect": "NoSchedule",
    }


# What HyperPod's API enforces on the labels and taints an instance group sends
# (botocore's SageMaker model: min, max and pattern of each shape), against the schema.
HYPERPOD_SAMPLES = [
    "",
    "a",
    "gpu-p5",
    "A_b.c-D",
    "-a",
    "a-",
    "a b",
    "a" * 63,
    "a" * 64,
    "example.com/pool",
    "a/" + LABEL_63,
    SUBDOMAIN_253 + "/" + LABEL_63,
]


@functools.cache
def _sagemaker_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("sagemaker")


def _hyperpod_accepts(shape_name: str, value: str) -> bool:
    meta = _sagemaker_model().shape_for(shape_name).metadata
    return (
        meta["min"] <= len(value) <= meta["max"]
        and re.fullmatch(meta["pattern"], value) is not None
    )


@pytest.mark.parametrize("value", HYPERPOD_SAMPLES)
def test_label_and_taint_keys_the_schema_accepts_are_ones_hyperpod_accepts(value: str) -> None:
    for shape in ("ClusterKubernetesLabelKey", "ClusterKubernetesTaintKey"):
        if is_label_key(value):
            assert _hyperpod_accepts(shape, value), (shape, value)


@pytest.mark.parametrize("value", HYPERPOD_SAMPLES)
def test_a_taint_value_is_sent_to_hyperpod_only_in_a_form_it_accepts(value: str) -> None:
    # An empty value is sent as none (Taint), so only non-empty values reach the API.
    if is_label_value(value) and value:
        assert _hyperpod_accepts("ClusterKubernetesTaintValue", value), value
        assert _hyperpod_accepts("ClusterKubernetesLabelValue", value), value
    if value == "":
        assert Taint(key="a", effect="NoSchedule", value="").value is None
        assert not _hyperpod_accepts("ClusterKubernetesLabelValue", value)
