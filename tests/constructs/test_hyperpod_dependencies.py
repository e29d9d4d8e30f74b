"""HyperPod dependency components rendered for node groups the environments do not use, and
the construct that applies them, on a bare stack."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
import yaml

from config.images import NEURON_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN, pinned_images
from config.kubernetes import NodeGroup
from config.schema import SUPPORTED_KUBERNETES_VERSIONS
from platform_constructs.hyperpod_dependencies import (
    MANIFEST_DIR,
    DeviceNodes,
    HyperPodDependencies,
    render_components,
)
from tests.support import (
    bare_stack,
    imported_cluster,
    instance_type_affinity,
    kubernetes_objects,
    template_of,
)

GPU = NodeGroup(instance_type="ml.g5.12xlarge", efa=True)
CPU = NodeGroup(instance_type="ml.m5.xlarge", efa=False)
TRAINIUM = NodeGroup(instance_type="ml.trn1.32xlarge", efa=True)
NEURON_MIRROR = "111111111111.dkr.ecr.us-west-2.amazonaws.com/neuron/neuron-device-plugin:2.19.16.0"


def daemonsets(components: dict[str, list[dict]]) -> dict[str, dict]:
    return {
        o["metadata"]["name"]: o for c in components.values() for o in c if o["kind"] == "DaemonSet"
    }


def render(*groups: NodeGroup, region: str = "us-west-2") -> dict[str, list[dict]]:
    return render_components(nodes=DeviceNodes.from_groups(groups), images=pinned_images(region))


def test_trainium_group_adds_the_neuron_plugin_and_agent_variant():
    sets = daemonsets(render(GPU, CPU, TRAINIUM))
    assert instance_type_affinity(sets["neuron-device-plugin-daemonset"]) == ["ml.trn1.32xlarge"]
    assert instance_type_affinity(sets["health-monitoring-agent-non-nvidia"]) == [
        "ml.trn1.32xlarge"
    ]
    assert instance_type_affinity(sets["aws-efa-k8s-device-plugin"]) == [
        "ml.g5.12xlarge",
        "ml.trn1.32xlarge",
    ]
    assert instance_type_affinity(sets["nvidia-device-plugin-daemonset"]) == ["ml.g5.12xlarge"]
    assert instance_type_affinity(sets["health-monitoring-agent"]) == ["ml.g5.12xlarge"]


def test_device_plugins_tolerate_the_taints_of_their_groups():
    tainted = NodeGroup(
        instance_type="ml.g5.12xlarge", efa=True, taints=(("example.com/dedicated", "NoSchedule"),)
    )
    components = render(tainted, CPU)
    plugin = components[NVIDIA_DEVICE_PLUGIN][0]["spec"]["template"]["spec"]
    assert {
        "key": "example.com/dedicated",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in plugin["tolerations"]


def test_every_component_is_a_valid_kubernetes_object_for_the_cluster_versions():
    import kubernetes_validate

    objects = [o for c in render(GPU, CPU, TRAINIUM, region="us-east-1").values() for o in c]
    assert len(objects) >= 15
    for version in SUPPORTED_KUBERNETES_VERSIONS:
        for obj in objects:
            # Strict: an unknown (misspelt) field is an error, not silently dropped.
            kubernetes_validate.validate(obj, f"{version}.0", strict=True)


def test_cpu_only_cluster_gets_no_device_plugins():
    assert set(render(CPU)) == {
        "namespace",
        "deep-health-check",
        "hyperpod-patching",
        "job-auto-restart",
    }


def test_hyperpod_service_may_restart_jobs():
    # The service's Kubernetes user deletes a failed job's pods and marks nodes; without this
    # binding HyperPod cannot auto-restart jobs after a node fault.
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(CPU)["job-auto-restart"]}
    binding = objects[("ClusterRoleBinding", "job-auto-restart")]
    assert binding["subjects"] == [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": "hyperpod-service-linked-role",
        }
    ]
    assert binding["roleRef"]["name"] == "job-auto-restart"
    rules = objects[("ClusterRole", "job-auto-restart")]["rules"]
    assert any("pods" in r["resources"] and "delete" in r["verbs"] for r in rules)
    assert any("nodes" in r["resources"] and "patch" in r["verbs"] for r in rules)


def test_region_without_a_published_agent_needs_an_override():
    with pytest.raises(ValueError, match=r"eks\.image_overrides\.health-monitoring-agent"):
        render(GPU, CPU, region="af-south-1")


def test_manifests_are_parseable_kubernetes_objects():
    for path in MANIFEST_DIR.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            assert {"apiVersion", "kind", "metadata"} <= set(doc), path.name


def test_construct_applies_each_component_after_the_namespace_with_overrides_winning():
    stack = bare_stack()
    dependencies = HyperPodDependencies(
        stack,
        "Dependencies",
        cluster=imported_cluster(stack),
        region="us-west-2",
        node_groups=[GPU, TRAINIUM],
        image_overrides={NEURON_DEVICE_PLUGIN: NEURON_MIRROR},
    )
    assert set(dependencies.manifests) == set(render(GPU, TRAINIUM))
    template = template_of(stack).to_json()
    sets = {
        o["metadata"]["name"]: o for o in kubernetes_objects(template) if o["kind"] == "DaemonSet"
    }
    neuron = sets["neuron-device-plugin-daemonset"]["spec"]["template"]["spec"]["containers"]
    assert {c["image"] for c in neuron} == {NEURON_MIRROR}
    nvidia = sets["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]["containers"]
    assert {c["image"] for c in nvidia} == {pinned_images("us-west-2")[NVIDIA_DEVICE_PLUGIN]}
    manifests = {
        k: v
        for k, v in template["Resources"].items()
        if v["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    }
    namespace = stack.get_logical_id(dependencies.manifests["namespace"].node.default_child)
    assert json.loads(manifests[namespace]["Properties"]["Manifest"])[0]["kind"] == "Namespace"
    for logical_id, manifest in manifests.items():
        # apply, not create: re-running converges on objects that already exist.
        assert manifest["Properties"]["Overwrite"] is True
        if logical_id != namespace:
            assert namespace in manifest["DependsOn"], logical_id


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(cdk.RemovalPolicy.RETAIN, "Retain"), (cdk.RemovalPolicy.DESTROY, "Delete")],
)
def test_a_retained_cluster_keeps_its_dependency_components(policy, expected):
    # Retained: deleting the stack never asks kubectl to delete the device plugins, health
    # agent or RBAC that a retained cluster's nodes keep needing.
    stack = bare_stack()
    HyperPodDependencies(
        stack,
        "Dependencies",
        cluster=imported_cluster(stack),
        region="us-west-2",
        node_groups=[GPU],
        image_overrides={},
        removal_policy=policy,
    )
    manifests = [
        r
        for r in template_of(stack).to_json()["Resources"].values()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    ]
    assert len(manifests) >= 5
    for manifest in manifests:
        assert manifest.get("DeletionPolicy", "Delete") == expected
        assert manifest.get("UpdateReplacePolicy", "Delete") == expected


def test_nvidia_device_plugin_requests_memory_and_cpu_and_is_memory_limited():
    plugin = daemonsets(render(GPU))["nvidia-device-plugin-daemonset"]
    for container in plugin["spec"]["template"]["spec"]["containers"]:
        resources = container["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}
        # Memory only: a CPU limit would throttle the kubelet's Allocate calls.
        assert set(resources["limits"]) == {"memory"}
