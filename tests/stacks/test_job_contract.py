"""Contract between `hpctl job render` and the synthesized platform.

For every team of every environment, on every accelerated group it may use, at every priority
class, a rendered job may only name what the templates create, or what a component they
install creates from them (AWS documents both):

- its namespace and LocalQueue: task governance creates `hyperpod-ns-<team>` and
  `hyperpod-ns-<team>-localqueue` for a team's compute quota, and the templates wait for the
  namespace before applying anything into it;
- its priority class: task governance creates `<class>-priority` for each class of the
  cluster's scheduler config;
- its claim, service account and ConfigMap keys: objects the templates apply in the job's
  namespace; the service account has an EKS pod identity association; the claim's volume is
  the platform's FSx file system;
- its node selector, node affinity and tolerations: HyperPod labels every node with its
  instance group and type and applies the group's labels and taints;
- its extended resources: a device plugin DaemonSet pinned to the job's instance type;
- its CPU, memory and hugepages: with every DaemonSet the templates apply on the group's nodes,
  the managed add-ons' DaemonSets and the system pods that may share the node, within what
  the node model (`config.node_model`) says the kubelet allocates there, less HyperPod
  tiered storage's memory;
- its kind and Kueue labels: the training operator and task governance add-ons;
- its metrics: the managed Prometheus collector's scrape configuration (read from the
  template, relabelled the way Prometheus does) keeps its worker pods, on the port the trainer
  serves (`--set metrics.port`), and names their series after the job (`training_job`) in its
  namespace.

`contract_problems` knows no team, group or class by name: it reads both sides. The planted
violations at the end prove each check can fail.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from config.addons import ADDON_DAEMONSETS, TASK_GOVERNANCE, TRAINING_OPERATOR
from config.instance_types import INSTANCE_TYPES
from config.kubernetes import (
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    METRICS_LABEL,
    NODE_HEALTH_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TEAM_NAMESPACE_PREFIX,
    TRAINING_JOB_LABEL,
    local_queue,
    priority_class,
    team_namespace,
)
from config.node_model import HUGEPAGES_2MI_MIB, NodeModel, group_model
from config.pods import PodRequests, mebibytes, millicores, pod_requests
from config.schema import EnvironmentConfig
from config.teams import team_capacity, team_directory
from hpctl.job.environment import spec_for_environment
from hpctl.job.render import render_job
from platform_constructs.eks_fsx_volume import file_system_path
from platform_constructs.hyperpod_dependencies import ADVERTISED_BY
from tests.support import (
    SYNTH_GROUP,
    SynthResult,
    instance_type_affinity,
    kubernetes_objects,
    manifest_tokens,
    variant_of,
)

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/hptrain:1.4.0@sha256:4f1c2f9e6b0d3a8c7e5b2a9d1f0e8c6b4a2d9f7e5c3b1a0f8e6d4c2b0a9f7e5d"
# Labels HyperPod puts on every node it manages (group, type, health).
HYPERPOD_NODE_LABELS = frozenset({INSTANCE_GROUP_LABEL, INSTANCE_TYPE_LABEL, NODE_HEALTH_LABEL})
HARD_TAINT_EFFECTS = ("NoSchedule", "NoExecute")

ObjectKey = tuple[str, str | None, str]  # kind, namespace (None: cluster-scoped), name


@dataclass
class Platform:
    """What one environment's templates create, read from the templates alone."""

    objects: dict[ObjectKey, dict[str, Any]] = field(default_factory=dict)
    addons: set[str] = field(default_factory=set)
    quota_teams: set[str] = field(default_factory=set)
    awaited_namespaces: set[str] = field(default_factory=set)
    priority_classes: set[str] = field(default_factory=set)
    pod_identities: set[tuple[str, str]] = field(default_factory=set)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    file_system: Any = None
    # The data repository association's directory (FileSystemPath).
    data_path: str = ""
    # PersistentVolume name -> (stack, value) the file system ID of its CSI volume handle is
    # exported from, and the directory of the file system the volume is ("" for all of it).
    volume_handles: dict[str, tuple[str, Any]] = field(default_factory=dict)
    volume_paths: dict[str, str] = field(default_factory=dict)
    # The `scrape_configs` of every managed Prometheus collector (AWS::APS::Scraper).
    scrape_jobs: list[dict[str, Any]] = field(default_factory=list)


def _with_tokens(value: Any, tokens: dict[str, Any]) -> Any:
    """`value` with every `<token N>` placeholder string put back as its CloudFormation value."""
    if isinstance(value, dict):
        return {k: _with_tokens(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_tokens(v, tokens) for v in value]
    return tokens.get(value, value) if isinstance(value, str) else value


def platform_of(result: SynthResult) -> Platform:
    platform = Platform()
    for template in result.templates.values():
        tokens = manifest_tokens(template)
        for obj in kubernetes_objects(template):
            meta = obj["metadata"]
            key = (obj["kind"], meta.get("namespace"), meta["name"])
            platform.objects[key] = _with_tokens(obj, tokens)
            if obj["kind"] == "PersistentVolume":
                # "<token N>" (the file system ID) and the sub-directory after it, if any.
                token, _, path = obj["spec"]["csi"]["volumeHandle"].partition(">")
                platform.volume_handles[meta["name"]] = result.exported(tokens[token + ">"])
                platform.volume_paths[meta["name"]] = path
        for resource in template["Resources"].values():
            props = resource.get("Properties", {})
            match resource["Type"]:
                case "AWS::EKS::Addon":
                    platform.addons.add(props["AddonName"])
                case "AWS::SageMaker::ComputeQuota":
                    platform.quota_teams.add(props["ComputeQuotaTarget"]["TeamName"])
                case "AWS::SageMaker::ClusterSchedulerConfig":
                    classes = props["SchedulerConfig"]["PriorityClasses"]
                    platform.priority_classes.update(c["Name"] for c in classes)
                case "AWS::EKS::PodIdentityAssociation":
                    platform.pod_identities.add((props["Namespace"], props["ServiceAccount"]))
                case "Custom::AWSCDK-EKS-KubernetesObjectValue":
                    if props["ObjectType"] == "namespace":
                        platform.awaited_namespaces.add(props["ObjectName"])
                case "AWS::SageMaker::Cluster":
                    platform.groups.update(
                        {g["InstanceGroupName"]: g for g in props["InstanceGroups"]}
                    )
                case "AWS::APS::Scraper":
                    blob = props["ScrapeConfiguration"]["ConfigurationBlob"]["Fn::Base64"]
                    platform.scrape_jobs.extend(yaml.safe_load(blob)["scrape_configs"])
    storage = result.templates["storage"]["Resources"]
    (platform.file_system,) = [
        {"Ref": k} for k, r in storage.items() if r["Type"] == "AWS::FSx::FileSystem"
    ]
    (platform.data_path,) = [
        r["Properties"]["FileSystemPath"]
        for r in storage.values()
        if r["Type"] == "AWS::FSx::DataRepositoryAssociation"
    ]
    return platform


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("key") != taint["Key"]:
        return False
    if toleration.get("effect") not in (None, "", taint["Effect"]):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return bool(toleration.get("value") == taint.get("Value"))


def _pod_problems(pod: dict[str, Any], namespace: str, platform: Platform) -> Iterator[str]:
    objects = platform.objects
    account = pod.get("serviceAccountName")
    if ("ServiceAccount", namespace, account) not in objects:
        yield f"service account {account!r} is not created in {namespace}"
    if (namespace, account) not in platform.pod_identities:
        yield f"service account {account!r} in {namespace} has no pod identity association"
    for volume in pod.get("volumes", []):
        claim_name = volume.get("persistentVolumeClaim", {}).get("claimName")
        if claim_name is None:
            continue
        claim = objects.get(("PersistentVolumeClaim", namespace, claim_name))
        if claim is None:
            yield f"claim {claim_name!r} is not created in {namespace}"
            continue
        pv = objects.get(("PersistentVolume", None, claim["spec"]["volumeName"]), {})
        if pv.get("spec", {}).get("claimRef") != {"namespace": namespace, "name": claim_name}:
            yield f"claim {claim_name!r} in {namespace} has no volume reserved for it"
        elif platform.volume_handles.get(pv["metadata"]["name"]) != (
            "storage",
            platform.file_system,
        ):
            yield f"claim {claim_name!r} in {namespace} is not the platform's file system"
        elif platform.volume_paths[pv["metadata"]["name"]] not in (
            file_system_path(team_directory(namespace.removeprefix(TEAM_NAMESPACE_PREFIX))),
            platform.data_path,
        ):
            yield f"claim {claim_name!r} in {namespace} reaches beyond its team's tree"

    selector = pod.get("nodeSelector", {})
    group = platform.groups.get(selector.get(INSTANCE_GROUP_LABEL))
    if group is None:
        yield f"node selector names no instance group of the cluster: {selector}"
        return
    node_labels = {
        **group.get("KubernetesConfig", {}).get("Labels", {}),
        INSTANCE_GROUP_LABEL: group["InstanceGroupName"],
        INSTANCE_TYPE_LABEL: group["InstanceType"],
    }
    for key, value in selector.items():
        if node_labels.get(key) != value:
            yield f"node selector {key}={value} matches no node of group {group['InstanceGroupName']}"
    terms = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    for term in terms:
        for expression in term["matchExpressions"]:
            if expression["key"] not in HYPERPOD_NODE_LABELS | set(node_labels):
                yield f"node affinity on {expression['key']}, a label no node carries"

    taints = group.get("KubernetesConfig", {}).get("Taints", [])
    tolerations = pod.get("tolerations", [])
    for taint in taints:
        if taint["Effect"] in HARD_TAINT_EFFECTS and not any(
            _tolerates(t, taint) for t in tolerations
        ):
            yield f"taint {taint['Key']}:{taint['Effect']} of group {group['InstanceGroupName']} is not tolerated"
    for toleration in tolerations:
        if not any(_tolerates(toleration, taint) for taint in taints):
            yield f"toleration {toleration} matches no taint of group {group['InstanceGroupName']}"

    for container in pod["containers"]:
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get("configMapKeyRef")
            if ref is None:
                continue
            config_map = objects.get(("ConfigMap", namespace, ref["name"]))
            # An optional key (the MLflow URI, where the environment runs no server) may be
            # absent: the kubelet starts the pod without the variable. The ConfigMap may not.
            absent_allowed = ref.get("optional") is True and config_map is not None
            if config_map is None or (
                ref["key"] not in config_map.get("data", {}) and not absent_allowed
            ):
                yield f"ConfigMap key {ref['name']}/{ref['key']} is not created in {namespace}"
        for resource in container["resources"].get("limits", {}):
            if "/" not in resource:
                continue
            daemonsets = [
                obj for (kind, _, name), obj in objects.items()
                if kind == "DaemonSet" and name == ADVERTISED_BY.get(resource)
            ]  # fmt: skip
            if not any(group["InstanceType"] in instance_type_affinity(d) for d in daemonsets):
                yield f"no device plugin advertises {resource} on {group['InstanceType']}"


def _meta_label(name: str) -> str:
    """Prometheus's name for a Kubernetes label in discovery meta labels."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """`labels` after Prometheus `relabel_configs` (keep, drop, replace), None if dropped."""
    labels = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        value = rule.get("separator", ";").join(labels.get(n, "") for n in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if (action == "keep" and match is None) or (action == "drop" and match is not None):
            return None
        if action == "replace" and match is not None:
            replacement = re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", rule.get("replacement", "$1"))
            labels[rule["target_label"]] = match.expand(replacement)
        elif action not in ("keep", "drop", "replace"):
            raise AssertionError(f"relabel action {action} is not modelled here")
    return labels


def _served_port(container: dict[str, Any]) -> int | None:
    args = container.get("args", [])
    sets = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"]
    ports = [int(s.split("=", 1)[1]) for s in sets if s.startswith("metrics.port=")]
    return ports[-1] if ports and ports[-1] else None


def _scrape_problems(job: dict[str, Any], platform: Platform) -> Iterator[str]:
    """Does a collector scrape each worker pod's metrics endpoint, labelled with the job?"""
    if not platform.scrape_jobs:
        yield "no managed Prometheus collector scrapes the trainer's metrics"
        return
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    for replica in job["spec"]["replicaSpecs"]:
        template = replica["template"]
        pod_meta = {
            "__meta_kubernetes_namespace": namespace,
            "__meta_kubernetes_pod_phase": "Running",
            **{
                f"__meta_kubernetes_pod_label_{_meta_label(k)}": v
                for k, v in template.get("metadata", {}).get("labels", {}).items()
            },
        }
        targets = []  # (container, port, labels after relabelling): what Prometheus scrapes
        for container in template["spec"]["containers"]:
            for port in container.get("ports", []):
                meta = {
                    **pod_meta,
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                    "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                }
                for scrape in platform.scrape_jobs:
                    labels = _relabel(meta, scrape.get("relabel_configs", []))
                    if labels is not None:
                        targets.append((container, port["containerPort"], labels))
        if not targets:
            yield f"no collector scrapes the pods of replica {replica['name']} (labels, port name)"
        for container, port, labels in targets:
            served = _served_port(container)
            if served != port:
                yield f"the collector scrapes port {port}, but the trainer serves {served}"
            if labels.get("training_job") != name:
                yield f"series would carry training_job={labels.get('training_job')!r}, not {name!r}"
            if labels.get("namespace") != namespace:
                yield f"series would carry namespace={labels.get('namespace')!r}, not {namespace!r}"


def contract_problems(job: dict[str, Any], platform: Platform) -> list[str]:
    """Everything `job` names that the platform does not create (empty: the job can run)."""
    problems = []
    if TRAINING_OPERATOR not in platform.addons:
        problems.append(f"{job['kind']} needs the {TRAINING_OPERATOR} add-on")
    if TASK_GOVERNANCE not in platform.addons:
        problems.append(f"Kueue labels need the {TASK_GOVERNANCE} add-on")
    namespace = job["metadata"]["namespace"]
    teams = [t for t in platform.quota_teams if team_namespace(t) == namespace]
    if ("Namespace", None, namespace) not in platform.objects and not teams:
        problems.append(f"namespace {namespace} is created by nothing")
    elif teams and namespace not in platform.awaited_namespaces:
        problems.append(f"namespace {namespace} is not awaited before its objects are applied")
    labels = job["metadata"].get("labels", {})
    if labels.get(QUEUE_LABEL) not in {local_queue(t) for t in teams}:
        problems.append(f"queue {labels.get(QUEUE_LABEL)!r} is not {namespace}'s LocalQueue")
    if labels.get(PRIORITY_LABEL) not in {priority_class(c) for c in platform.priority_classes}:
        problems.append(f"priority class {labels.get(PRIORITY_LABEL)!r} is created by nothing")
    for replica in job["spec"]["replicaSpecs"]:
        problems.extend(_pod_problems(replica["template"]["spec"], namespace, platform))
    problems.extend(_scrape_problems(job, platform))
    return problems


def rendered_jobs(result: SynthResult) -> Iterator[tuple[str, dict[str, Any]]]:
    """(description, manifest) for every team x usable accelerated group x priority class."""
    config = result.config
    governance = config.governance
    assert governance is not None
    for team in governance.teams:
        usable = [
            c
            for c in team_capacity(governance, team, config.hyperpod.instance_groups)
            if c.max_job_nodes >= 1 and INSTANCE_TYPES[c.instance_type].has_accelerators
        ]
        assert usable, f"team {team.name} can run no job in {result.env_name}"
        for capacity in usable:
            for priority in governance.priority_classes:
                spec = spec_for_environment(
                    config,
                    team=team.name,
                    instance_group=capacity.instance_group,
                    nodes=1,
                    image=IMAGE,
                    priority=priority.name,
                    preset="tiny",
                    clock=lambda: datetime(2026, 11, 23, tzinfo=UTC),
                )
                where = f"{team.name} on {capacity.instance_group} at {priority.name}"
                yield where, render_job(spec)


def test_every_rendered_job_names_only_what_the_platform_creates(env: SynthResult):
    platform = platform_of(env)
    jobs = dict(rendered_jobs(env))
    governance = env.config.governance
    assert len(jobs) >= len(governance.teams) * len(governance.priority_classes)
    problems = {where: contract_problems(job, platform) for where, job in jobs.items()}
    assert {where: found for where, found in problems.items() if found} == {}


def test_no_pod_can_mount_two_volumes_of_one_handle(env: SynthResult):
    """kubernetes/kubernetes#132921: a pod whose two volumes share a CSI handle never starts.
    A pod mounts only its own namespace's claims, so the volumes of each namespace's claims
    have handles of their own (the file system ID and the directory)."""
    platform = platform_of(env)
    handles: dict[str, list[tuple[Any, str]]] = {}
    for (kind, namespace, _), obj in platform.objects.items():
        volume = obj["spec"].get("volumeName") if kind == "PersistentVolumeClaim" else None
        if volume in platform.volume_handles:
            handles.setdefault(str(namespace), []).append(
                (platform.volume_handles[volume], platform.volume_paths[volume])
            )
    assert handles
    for namespace, found in handles.items():
        assert len(found) == len({json.dumps(h, sort_keys=True) for h in found}), namespace
    for where, job in rendered_jobs(env):
        pod = job["spec"]["replicaSpecs"][0]["template"]["spec"]
        mounted = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert len(mounted) == 2, (where, mounted)


# --------------------------------------------------------------------------- room on the node


def applied_daemonsets(platform: Platform, instance_type: str) -> dict[str, tuple[int, int]]:
    """Name -> (millicores, MiB) of every DaemonSet the templates apply that lands on a node
    of `instance_type` (no affinity: every node)."""
    found = {}
    for (kind, _, name), obj in platform.objects.items():
        if kind != "DaemonSet":
            continue
        pod = obj["spec"]["template"]["spec"]
        if "affinity" in pod and instance_type not in instance_type_affinity(obj):
            continue
        found[name] = pod_requests(pod)
    return found


def fit_problems(
    job: dict[str, Any],
    platform: Platform,
    config: EnvironmentConfig,
    *,
    addon_daemonsets: tuple[PodRequests, ...] = ADDON_DAEMONSETS,
) -> list[str]:
    """Why the job's pod would not fit beside the DaemonSets on a node of its group."""
    problems = []
    for replica in job["spec"]["replicaSpecs"]:
        pod = replica["template"]["spec"]
        group = pod["nodeSelector"][INSTANCE_GROUP_LABEL]
        model: NodeModel = group_model(config, group)
        daemonsets = applied_daemonsets(platform, model.instance.name)
        daemonsets |= {
            d.name: (d.cpu_millicores, d.memory_mib)
            for d in addon_daemonsets
            if d.addon in platform.addons
        }
        # Nothing pins the platform's Deployments to the system group: any may land here.
        for system_pod in model.shared_system_pods:
            for replica_index in range(system_pod.replicas):
                name = f"{system_pod.name}-{replica_index}"
                daemonsets[name] = (system_pod.cpu_millicores, system_pod.memory_mib)
        job_cpu, job_memory = pod_requests(pod)
        ds_cpu = sum(cpu for cpu, _ in daemonsets.values())
        ds_memory = sum(memory for _, memory in daemonsets.values())
        if job_cpu + ds_cpu > model.allocatable_cpu_millicores:
            problems.append(
                f"{group}: the job's {job_cpu}m CPU and the DaemonSets' {ds_cpu}m exceed the "
                f"{model.allocatable_cpu_millicores}m a node allocates"
            )
        if job_memory + ds_memory + model.tiered_storage_mib > model.allocatable_memory_mib:
            problems.append(
                f"{group}: the job's {job_memory}Mi, the DaemonSets' {ds_memory}Mi and tiered "
                f"storage's {model.tiered_storage_mib}Mi exceed the "
                f"{model.allocatable_memory_mib}Mi a node allocates"
            )
        for container in pod["containers"]:
            hugepages = container["resources"].get("requests", {}).get("hugepages-2Mi")
            if hugepages is not None and mebibytes(hugepages) > HUGEPAGES_2MI_MIB:
                problems.append(f"{group}: hugepages-2Mi {hugepages} exceed what nodes offer")
    return problems


def sized_jobs(result: SynthResult) -> Iterator[tuple[str, dict[str, Any]]]:
    """(description, manifest) for every team x usable accelerated group x node count from 1
    up to the team's largest job there: the renderer accepts every one (a refusal fails)."""
    config = result.config
    governance = config.governance
    assert governance is not None
    for team in governance.teams:
        for capacity in team_capacity(governance, team, config.hyperpod.instance_groups):
            if not INSTANCE_TYPES[capacity.instance_type].has_accelerators:
                continue
            for nodes in range(1, capacity.max_job_nodes + 1):
                spec = spec_for_environment(
                    config,
                    team=team.name,
                    instance_group=capacity.instance_group,
                    nodes=nodes,
                    image=IMAGE,
                    clock=lambda: datetime(2026, 11, 23, tzinfo=UTC),
                )
                yield f"{team.name} on {capacity.instance_group} x{nodes}", render_job(spec)


def test_every_rendered_job_fits_beside_the_daemonsets_on_its_node(env: SynthResult):
    platform = platform_of(env)
    jobs = dict(sized_jobs(env))
    assert jobs, f"{env.env_name} renders no job"
    problems = {where: fit_problems(job, platform, env.config) for where, job in jobs.items()}
    assert {where: found for where, found in problems.items() if found} == {}


def _one_cpu_more(job: dict[str, Any]) -> None:
    requests = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"][
        "requests"
    ]
    requests["cpu"] = f"{millicores(requests['cpu']) + 1000}m"


def test_planted_misfits_are_caught(prod: SynthResult):
    platform = platform_of(prod)
    _, job = next(sized_jobs(prod))
    assert fit_problems(job, platform, prod.config) == []

    one_cpu_more = copy.deepcopy(job)
    _one_cpu_more(one_cpu_more)
    assert any("CPU" in p for p in fit_problems(one_cpu_more, platform, prod.config))

    raised = variant_of("prod", lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=30))
    assert any("tiered" in p for p in fit_problems(job, platform, raised.config))

    added = PodRequests(name="new-agent", cpu_millicores=10, memory_mib=0, addon="vpc-cni",
                        source="planted")  # fmt: skip
    problems = fit_problems(job, platform, prod.config, addon_daemonsets=(*ADDON_DAEMONSETS, added))
    assert any("CPU" in p for p in problems)


# --------------------------------------------------------------------------- planted violations


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def plant(job: dict[str, Any]) -> None:
        target = job
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return plant


POD = ("spec", "replicaSpecs", 0, "template", "spec")
CONTAINER = (*POD, "containers", 0)
POD_LABELS = ("spec", "replicaSpecs", 0, "template", "metadata", "labels")


def _plant_managed_tier_key(job: dict[str, Any]) -> None:
    container = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["env"].append(
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "hyperpod-team", "key": "nope"}}}
    )


def _plant_unlabelled_job(job: dict[str, Any]) -> None:
    del job["spec"]["replicaSpecs"][0]["template"]["metadata"]["labels"][TRAINING_JOB_LABEL]


def _plant_other_metrics_port(job: dict[str, Any]) -> None:
    container = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["args"] = [
        "metrics.port=9999" if a.startswith("metrics.port=") else a for a in container["args"]
    ]


def _plant_fpga(job: dict[str, Any]) -> None:
    container = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["example.com/fpga"] = 1


JOB_VIOLATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "namespace": (_set(("metadata", "namespace"), "hyperpod-ns-nobody"), "created by nothing"),
    "queue": (_set(("metadata", "labels", QUEUE_LABEL), "other-localqueue"), "LocalQueue"),
    "priority": (_set(("metadata", "labels", PRIORITY_LABEL), "urgent-priority"), "priority"),
    "service account": (_set((*POD, "serviceAccountName"), "default"), "service account"),
    "claim": (
        _set((*POD, "volumes", 0, "persistentVolumeClaim", "claimName"), "scratch"),
        "claim 'scratch'",
    ),
    "config map key": (_plant_managed_tier_key, "ConfigMap key"),
    "node group": (_set((*POD, "nodeSelector", INSTANCE_GROUP_LABEL), "gpu-x"), "no instance"),
    "node label": (_set((*POD, "nodeSelector", "workload"), "other"), "node selector"),
    "toleration": (
        _set((*POD, "tolerations"), [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]),
        "matches no taint",
    ),
    "extended resource": (_plant_fpga, "no device plugin"),
    "metrics label": (_set((*POD_LABELS, METRICS_LABEL), "other"), "no collector scrapes"),
    "job label": (_plant_unlabelled_job, "training_job=''"),
    "metrics port": (_plant_other_metrics_port, "the trainer serves 9999"),
}


@pytest.mark.parametrize("violation", sorted(JOB_VIOLATIONS))
def test_planted_job_violations_are_caught(prod: SynthResult, violation: str):
    platform = platform_of(prod)
    _, job = next(rendered_jobs(prod))
    assert contract_problems(job, platform) == []
    plant, expected = JOB_VIOLATIONS[violation]
    broken = copy.deepcopy(job)
    plant(broken)
    problems = contract_problems(broken, platform)
    assert any(expected in p for p in problems), problems


def test_planted_platform_gaps_are_caught(prod: SynthResult):
    _, job = next(rendered_jobs(prod))
    group = job["spec"]["replicaSpecs"][0]["template"]["spec"]["nodeSelector"][INSTANCE_GROUP_LABEL]
    namespace = job["metadata"]["namespace"]
    gaps: dict[str, tuple[Callable[[Platform], None], str]] = {
        "untolerated taint": (
            lambda p: (
                p.groups[group]
                .setdefault("KubernetesConfig", {})
                .update({"Taints": [{"Key": "dedicated", "Value": "x", "Effect": "NoSchedule"}]})
            ),
            "is not tolerated",
        ),
        "no pod identity": (lambda p: p.pod_identities.clear(), "pod identity"),
        "namespace not awaited": (lambda p: p.awaited_namespaces.clear(), "not awaited"),
        "no training operator": (lambda p: p.addons.discard(TRAINING_OPERATOR), "add-on"),
        "claim on another volume": (
            lambda p: setattr(p, "file_system", {"Ref": "Elsewhere"}),
            "not the platform's file system",
        ),
        "claim of the whole file system": (
            lambda p: p.volume_paths.update(dict.fromkeys(p.volume_paths, "")),
            "reaches beyond its team's tree",
        ),
        "no quota": (lambda p: p.quota_teams.clear(), f"namespace {namespace}"),
        "no collector": (lambda p: p.scrape_jobs.clear(), "no managed Prometheus collector"),
        "collector keeps other pods": (
            lambda p: [
                rule.update(regex="other")
                for scrape in p.scrape_jobs
                for rule in scrape["relabel_configs"]
                if rule.get("action") == "keep"
            ],
            "no collector scrapes",
        ),
    }
    for name, (remove, expected) in gaps.items():
        platform = copy.deepcopy(platform_of(prod))
        remove(platform)
        problems = contract_problems(job, platform)
        assert any(expected in p for p in problems), (name, problems)
