"""The Kubernetes components HyperPod resiliency depends on, from manifests vendored in
config/manifests/ with every container image pinned (the table is in `config.images`).

AWS documents installing these before the HyperPod cluster is created, so they are applied
with the EKS cluster; they are DaemonSets and RBAC only, and applying them does not wait for
any pod (there are no nodes yet). Device plugins are pinned by node affinity to the
configured instance types that have the device: elsewhere they would crash-loop.

Under the cluster's RETAIN policy the manifests are retained: deleting the stack leaves them
applied (the kubectl provider is never asked to delete them), because a retained cluster's
nodes keep needing their device plugins, health agent and RBAC.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
import yaml
from aws_cdk import aws_eks_v2 as eks_v2
from constructs import Construct

from config.images import (
    EFA_DEVICE_PLUGIN,
    HEALTH_MONITORING_AGENT,
    NEURON_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    pinned_images,
)
from config.instance_types import INSTANCE_TYPES
from config.kubernetes import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    NodeGroup,
)
from config.manifests import MANIFEST_DIR

# The vendored DaemonSet that advertises each extended resource on a node.
ADVERTISED_BY = {
    GPU_RESOURCE: "nvidia-device-plugin-daemonset",
    EFA_RESOURCE: "aws-efa-k8s-device-plugin",
    NEURON_RESOURCE: "neuron-device-plugin-daemonset",
}

# Images: `config.images.pinned_images` (pure data, so config validation can check before
# synth that the nodes can pull every image); eks.image_overrides win over it.

# ------------------------------------------------------------------------ node selection


@dataclass(frozen=True)
class NodeClass:
    """The configured instance types with one kind of device, and the taints their groups
    carry (a device plugin must tolerate them or it never reaches those nodes)."""

    instance_types: tuple[str, ...] = ()
    taints: tuple[tuple[str, str], ...] = ()  # (key, effect)

    def __bool__(self) -> bool:
        return bool(self.instance_types)


@dataclass(frozen=True, kw_only=True)
class DeviceNodes:
    nvidia: NodeClass = field(default_factory=NodeClass)
    neuron: NodeClass = field(default_factory=NodeClass)
    efa: NodeClass = field(default_factory=NodeClass)

    @classmethod
    def from_groups(cls, groups: Iterable[NodeGroup]) -> DeviceNodes:
        members: dict[str, list[NodeGroup]] = {"nvidia": [], "neuron": [], "efa": []}
        for group in groups:
            accelerator = INSTANCE_TYPES[group.instance_type].accelerator
            if accelerator in ("nvidia", "neuron"):
                members[accelerator].append(group)
            if group.efa:
                members["efa"].append(group)
        return cls(**{kind: _node_class(found) for kind, found in members.items()})


def _node_class(groups: Sequence[NodeGroup]) -> NodeClass:
    return NodeClass(
        instance_types=tuple(sorted({g.instance_type for g in groups})),
        taints=tuple(sorted({taint for g in groups for taint in g.taints})),
    )


# ----------------------------------------------------------------------------- manifests


def load_manifest(name: str) -> list[dict[str, Any]]:
    with (MANIFEST_DIR / name).open(encoding="utf-8") as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def _daemonset(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == "DaemonSet" and doc["metadata"]["name"] == name:
            return doc
    raise KeyError(f"no DaemonSet {name} in manifest")


def pin_daemonset(daemonset: dict[str, Any], *, image: str, nodes: NodeClass) -> None:
    """Set the image of every container and restrict scheduling to `nodes`' types."""
    pod = daemonset["spec"]["template"]["spec"]
    for container in pod["containers"]:
        container["image"] = image
    pod["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": INSTANCE_TYPE_LABEL,
                                "operator": "In",
                                "values": list(nodes.instance_types),
                            }
                        ]
                    }
                ]
            }
        }
    }
    tolerations = pod.setdefault("tolerations", [])
    for key, effect in nodes.taints:
        if not _tolerated(tolerations, key, effect):
            tolerations.append({"key": key, "operator": "Exists", "effect": effect})


def _tolerated(tolerations: list[dict[str, Any]], key: str, effect: str) -> bool:
    """Whether an existing Exists toleration already matches every taint `key`:`effect`."""
    return any(
        t.get("operator") == "Exists"
        and t.get("key") in (None, key)
        and t.get("effect") in (None, effect)
        for t in tolerations
    )


def render_components(
    *, nodes: DeviceNodes, images: Mapping[str, str]
) -> dict[str, list[dict[str, Any]]]:
    """Component name -> the Kubernetes objects to apply, for the device kinds present."""
    components: dict[str, list[dict[str, Any]]] = {
        "namespace": load_manifest("hyperpod-namespace.yaml"),
        "deep-health-check": load_manifest("deep-health-check-rbac.yaml"),
        "hyperpod-patching": load_manifest("hyperpod-patching-rbac.yaml"),
        "job-auto-restart": load_manifest("job-auto-restart-rbac.yaml"),
    }

    def image(component: str) -> str:
        try:
            return images[component]
        except KeyError:
            raise ValueError(
                f"no pinned {component} image for this Region; set eks.image_overrides."
                f"{component} to a pinned copy in your registry"
            ) from None

    if nodes.nvidia or nodes.neuron:
        hma = load_manifest("health-monitoring-agent.yaml")
        # The chart's two DaemonSets of the agent: NVIDIA nodes and all others.
        variants = (
            ("health-monitoring-agent", nodes.nvidia),
            ("health-monitoring-agent-non-nvidia", nodes.neuron),
        )
        for name, node_class in variants:
            daemonset = _daemonset(hma, name)
            if node_class:
                pin_daemonset(daemonset, image=image(HEALTH_MONITORING_AGENT), nodes=node_class)
            else:
                hma.remove(daemonset)  # a DaemonSet with an empty type list is invalid
        components[HEALTH_MONITORING_AGENT] = hma
    device_plugins = (
        (NVIDIA_DEVICE_PLUGIN, "nvidia-device-plugin.yaml", ADVERTISED_BY[GPU_RESOURCE], nodes.nvidia),
        (EFA_DEVICE_PLUGIN, "efa-device-plugin.yaml", ADVERTISED_BY[EFA_RESOURCE], nodes.efa),
        (NEURON_DEVICE_PLUGIN, "neuron-device-plugin.yaml", ADVERTISED_BY[NEURON_RESOURCE], nodes.neuron),
    )  # fmt: skip
    for component, manifest, daemonset_name, node_class in device_plugins:
        if not node_class:
            continue
        docs = load_manifest(manifest)
        pin_daemonset(_daemonset(docs, daemonset_name), image=image(component), nodes=node_class)
        components[component] = docs
    return components


class HyperPodDependencies(Construct):
    """Applies the HyperPod resiliency components to `cluster`, one manifest resource per
    component so each updates (and fails) on its own. `manifests` maps component names to
    the applied constructs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks_v2.ICluster,
        region: str,
        node_groups: Sequence[NodeGroup],
        image_overrides: Mapping[str, str],
        removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.DESTROY,
    ) -> None:
        super().__init__(scope, construct_id)
        images = {**pinned_images(region), **image_overrides}
        components = render_components(nodes=DeviceNodes.from_groups(node_groups), images=images)
        self.manifests: dict[str, eks_v2.KubernetesManifest] = {}
        for name, objects in components.items():
            self.manifests[name] = eks_v2.KubernetesManifest(
                self,
                _construct_id(name),
                cluster=cluster,
                manifest=copy.deepcopy(objects),
                # apply (not create): re-running against objects that already exist, e.g. a
                # namespace an add-on also declares, converges instead of failing.
                overwrite=True,
                removal_policy=removal_policy,
            )
        namespace = self.manifests["namespace"]
        for name, manifest in self.manifests.items():
            if name != "namespace":
                manifest.node.add_dependency(namespace)


def _construct_id(component: str) -> str:
    return "".join(part.capitalize() for part in component.split("-"))
