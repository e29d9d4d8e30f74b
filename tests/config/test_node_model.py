"""config.node_model: the kubelet's reservations as the EKS AMI computes them, what each
group's nodes leave a job, and whether the platform's own pods fit on the system nodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from config.addons import ADDON_DAEMONSETS, ADDONS, SYSTEM_PODS
from config.instance_types import INSTANCE_TYPES, lookup
from config.kubernetes import Taint
from config.node_model import (
    NodeModel,
    format_cpu,
    format_memory,
    group_model,
    installed_addons,
    job_fit_problem,
    kube_reserved_cpu_millicores,
    kube_reserved_memory_mib,
    max_pods,
    node_models,
    system_fit_problem,
    system_pods,
    vendored_daemonsets,
)
from config.pods import PodRequests, mebibytes, millicores, pod_requests
from config.schema import EnvironmentConfig
from tests.support import environment, variant_of

ENVIRONMENTS = ("dev", "staging", "prod")


def _system_fit(
    config: EnvironmentConfig,
    *,
    pods: tuple[PodRequests, ...] = SYSTEM_PODS,
    addon_daemonsets: tuple[PodRequests, ...] = ADDON_DAEMONSETS,
) -> tuple[str, str] | None:
    """system_fit_problem as the platform plan asks it, with `pods` for the table's
    Deployments and `addon_daemonsets` for its DaemonSets."""
    models = node_models(config, addon_daemonsets=addon_daemonsets)
    return system_fit_problem(models, system_pods(config, pods=pods))


def test_kube_reserved_matches_nodeadm_for_a_two_core_node() -> None:
    # awslabs/amazon-eks-ami nodeadm/test/e2e/cases/kubelet-config-dir/expected-kubelet-config
    # .json: maxPods 58 (an m5.xlarge: 4 ENIs x 14 + 2) and a 2-core host.
    m5 = lookup("ml.m5.xlarge")
    assert max_pods(m5) == 58
    assert kube_reserved_memory_mib(m5) == 893
    assert kube_reserved_cpu_millicores(2) == 70


@pytest.mark.parametrize(
    ("cpus", "millicores"),
    # 60 + 10 + 2 x 5 for the first four cores, 2.5 for every further one.
    [(1, 60), (2, 70), (4, 80), (24, 130), (96, 310), (192, 550)],
)
def test_kube_reserved_cpu_follows_the_bands(cpus: int, millicores: int) -> None:
    assert kube_reserved_cpu_millicores(cpus) == millicores


def test_one_thread_per_core_halves_the_cpus_kubernetes_sees() -> None:
    prod = environment("prod").config
    assert group_model(prod, "gpu-p5").cpus == 96
    two = variant_of(
        "prod", lambda d: d["hyperpod"]["instance_groups"][0].update(threads_per_core=2)
    )
    assert group_model(two.config, "gpu-p5").cpus == 192


def test_p5_job_leaves_room_for_the_kubelet_tiered_storage_and_daemonsets() -> None:
    model = group_model(environment("prod").config, "gpu-p5")
    assert model.tiered_storage_percent == 20
    assert model.tiered_storage_mib == 2048 * 1024 // 5
    names = {d.name for d in model.daemonsets}
    assert {"aws-efa-k8s-device-plugin", "health-monitoring-agent", "aws-node"} <= names
    assert "neuron-device-plugin-daemonset" not in names
    job = model.job
    # Nothing pins coredns, Kueue and the other controllers to the system group.
    assert {p.name for p in model.shared_system_pods} >= {"coredns", "kueue-controller-manager"}
    assert job.cpu_millicores == (
        model.allocatable_cpu_millicores
        - model.daemonset_cpu_millicores
        - model.shared_system_pod_cpu_millicores
    )
    assert job.memory_mib == (
        model.allocatable_memory_mib
        - model.daemonset_memory_mib
        - model.tiered_storage_mib
        - model.shared_system_pod_memory_mib
    )
    assert 0 < job.cpu_millicores < 96_000
    assert job.hugepages_2mi_mib == 0


def test_a_hard_taint_keeps_system_pods_off_an_accelerated_group() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    # Custom taints exclude deep health checks (the schema's rule).
    tainted = variant_of(
        "prod",
        lambda d: d["hyperpod"]["instance_groups"][0].update(taints=[taint], deep_health_checks=[]),
    )
    assert group_model(tainted.config, "gpu-p5").shared_system_pods == ()
    assert group_model(environment("prod").config, "system").shared_system_pods == ()


def test_tiered_storage_raised_leaves_a_job_less_memory() -> None:
    base = group_model(environment("prod").config, "gpu-p5").job
    raised = variant_of("prod", lambda d: d["hyperpod"]["tiered_storage"].update(memory_percent=40))
    assert group_model(raised.config, "gpu-p5").job.memory_mib < base.memory_mib


def test_a_daemonset_added_to_the_table_is_taken_from_every_node() -> None:
    config = environment("dev").config
    extra = PodRequests(name="x", cpu_millicores=100, memory_mib=64, addon="vpc-cni", source="t")
    before = node_models(config)
    after = node_models(config, addon_daemonsets=(*ADDON_DAEMONSETS, extra))
    for old, new in zip(before, after, strict=True):
        assert new.job.cpu_millicores == old.job.cpu_millicores - 100
        assert new.job.memory_mib == old.job.memory_mib - 64


def test_a_vendored_daemonset_without_a_placement_is_refused(tmp_path: Path) -> None:
    (tmp_path / "new.yaml").write_text(
        "kind: DaemonSet\nmetadata: {name: new-agent}\n"
        "spec: {template: {spec: {containers: []}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(KeyError, match="new-agent"):
        vendored_daemonsets(tmp_path)


def test_vendored_requests_are_read_from_the_manifests() -> None:
    requests = {d.name: (d.cpu_millicores, d.memory_mib) for d in vendored_daemonsets()}
    assert requests["health-monitoring-agent"] == (500, 512)
    assert requests["aws-efa-k8s-device-plugin"] == (10, 20)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_every_environment_runs_its_system_pods_on_its_system_nodes(env: str) -> None:
    assert _system_fit(environment(env).config) is None


def test_system_pods_that_outgrow_the_system_nodes_are_named() -> None:
    # dev's one m5.xlarge with one thread per core: 2 CPUs.
    config = environment("dev").config
    heavy = PodRequests(name="big-controller", cpu_millicores=1500, memory_mib=1024,
                        addon="coredns", source="t")  # fmt: skip
    problem = _system_fit(config, pods=(*SYSTEM_PODS, heavy))
    assert problem is not None
    field, message = problem
    assert field == "hyperpod.instance_groups[1].instance_type"
    assert "big-controller" in message
    assert "ml.m5.xlarge" in message


def test_every_counted_pod_belongs_to_an_add_on_of_the_table() -> None:
    # A renamed row would silently drop its pods from every node model.
    assert {p.addon for p in (*ADDON_DAEMONSETS, *SYSTEM_PODS)} <= set(ADDONS)


@pytest.mark.parametrize(
    ("env", "group", "cpu_millicores", "memory_mib", "kube_reserved"),
    [
        # 96 CPUs (192 vCPUs, one thread per core) - 310m kube-reserved - 1340m DaemonSets
        # - 1140m system pods; 2048 GiB less 7.5%, 1355 MiB kube-reserved, 100 MiB eviction,
        # 20% tiered storage, 1365 MiB DaemonSets, 1564 MiB system pods.
        ("prod", "gpu-p5", 93_210, 1_516_051, (310, 1_355)),
        ("dev", "gpu-g5", 21_390, 170_471, (130, 8_362)),
    ],
)
def test_the_job_figures_of_the_shipped_groups(
    env: str, group: str, cpu_millicores: int, memory_mib: int, kube_reserved: tuple[int, int]
) -> None:
    # Absolute figures, so a wrong constant anywhere in the model fails here.
    model = group_model(environment(env).config, group)
    assert (model.job.cpu_millicores, model.job.memory_mib) == (cpu_millicores, memory_mib)
    assert (model.kube_reserved_cpu_millicores, model.kube_reserved_memory_mib) == kube_reserved


def _gb200_group(threads_per_core: int) -> NodeModel:
    def mutate(data: dict[str, Any]) -> None:
        group = data["hyperpod"]["instance_groups"][0]
        del group["training_plan"]
        group.update(instance_type="ml.p6e-gb200.36xlarge", threads_per_core=threads_per_core)

    return group_model(variant_of("prod", mutate).config, "gpu-p5")


@pytest.mark.parametrize("threads_per_core", [1, 2])
def test_a_grace_node_shows_each_vcpu_as_a_core(threads_per_core: int) -> None:
    # A GB200 instance's 144 vCPUs are Arm cores of one thread: no setting doubles or halves
    # them, where an x86 type's vCPUs are two threads a core.
    assert lookup("ml.p6e-gb200.36xlarge").threads_per_core == 1
    model = _gb200_group(threads_per_core)
    assert model.cpus == 144


def test_the_job_figures_of_a_gb200_node() -> None:
    model = _gb200_group(1)
    # 144 CPUs - 430m kube-reserved (60 + 10 + 2 x 5 + 140 x 2.5) - 1340m DaemonSets - 1140m
    # system pods; 960 GiB less 7.5% = 909,312 MiB, less 2,433 MiB kube-reserved (11 x 198
    # pods + 255), 100 MiB eviction, 20% tiered storage (196,608 MiB), 1,365 MiB DaemonSets,
    # 1,564 MiB system pods.
    job = model.job
    assert (job.cpu_millicores, job.memory_mib) == (141_090, 707_242)
    assert model.kube_reserved_cpu_millicores == 430


# --- Quantities, formats and the refusals word for word -----------------------------------


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [("250m", 250), ("2", 2000), ("0.5", 500), ("1.25", 1250), (3, 3000), ("0", 0)],
)
def test_cpu_quantities_in_millicores(quantity: str | int, expected: int) -> None:
    assert millicores(quantity) == expected


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        ("2048Ki", 2),
        ("1536Ki", 1),
        ("100Mi", 100),
        ("1.5Gi", 1536),
        ("2Gi", 2048),
        ("3145728", 3),
        ("3145727", 2),
        ("0", 0),
    ],
)
def test_memory_quantities_in_mebibytes(quantity: str, expected: int) -> None:
    assert mebibytes(quantity) == expected


def test_pod_requests_add_up_every_container() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
            {"resources": {"requests": {"cpu": "0.5"}}},
            {"resources": {"requests": {"memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "4"}}},
            {"resources": None},
            {"resources": {"requests": None}},
            {},
        ]
    }
    assert pod_requests(spec) == (600, 1088)
    assert pod_requests({}) == (0, 0)
    # Memory given as a plain number of bytes.
    assert pod_requests({"containers": [{"resources": {"requests": {"memory": 2097152}}}]}) == (
        0,
        2,
    )


@pytest.mark.parametrize(
    ("mib", "text"),
    [(0, "0 MiB"), (1023, "1023 MiB"), (1024, "1.0 GiB"), (13546, "13.2 GiB"), (-5, "-5 MiB"),
     (-25805, "-25.2 GiB")],
)  # fmt: skip
def test_memory_is_shown_in_mib_below_a_gib(mib: int, text: str) -> None:
    assert format_memory(mib) == text


@pytest.mark.parametrize(("m", "text"), [(94700, "94.7"), (310, "0.31"), (2000, "2"), (0, "0")])
def test_cpus_are_shown_as_kubernetes_counts_them(m: int, text: str) -> None:
    assert format_cpu(m) == text


def test_add_ons_of_absent_sections_are_not_installed() -> None:
    config = environment("dev").config
    everything = installed_addons(config)
    assert everything == frozenset(ADDONS)
    bare = config.model_copy(update={"governance": None, "observability": None})
    assert installed_addons(bare) == frozenset(
        a.name for a in ADDONS.values() if a.stack not in ("governance", "observability")
    )
    assert installed_addons(config.model_copy(update={"governance": None})) == everything - {
        a.name for a in ADDONS.values() if a.stack == "governance"
    }
    assert installed_addons(config.model_copy(update={"observability": None})) == everything - {
        a.name for a in ADDONS.values() if a.stack == "observability"
    }
    # Their pods go with them.
    assert {p.addon for p in system_pods(bare)} <= installed_addons(bare)
    assert len(system_pods(bare)) < len(system_pods(config))


def _group(config: EnvironmentConfig, name: str, **update: Any) -> EnvironmentConfig:
    groups = [
        g.model_copy(update=update) if g.name == name else g
        for g in config.hyperpod.instance_groups
    ]
    return config.model_copy(
        update={"hyperpod": config.hyperpod.model_copy(update={"instance_groups": groups})}
    )


@pytest.mark.parametrize(
    ("effect", "takes"),
    [("NoSchedule", False), ("NoExecute", False), ("PreferNoSchedule", True)],
)
def test_only_a_hard_taint_keeps_system_pods_off(effect: str, takes: bool) -> None:
    config = environment("dev").config
    tainted = _group(config, "gpu-g5", taints=[Taint(key="example.com/x", effect=effect)])
    assert bool(group_model(tainted, "gpu-g5").shared_system_pods) is takes
    # A group without accelerators never shares them: it runs them outright.
    assert group_model(config, "system").shared_system_pods == ()


def test_daemonsets_land_by_device() -> None:
    config = environment("dev").config
    gpu = {d.name for d in group_model(config, "gpu-g5").daemonsets}
    system = {d.name for d in group_model(config, "system").daemonsets}
    assert {"nvidia-device-plugin-daemonset", "aws-efa-k8s-device-plugin"} <= gpu
    assert "nvidia-device-plugin-daemonset" not in system
    assert "aws-efa-k8s-device-plugin" not in system
    trn = _group(config, "gpu-g5", instance_type="ml.trn1.32xlarge")
    neuron = {d.name for d in group_model(trn, "gpu-g5").daemonsets}
    assert {"neuron-device-plugin-daemonset", "health-monitoring-agent-non-nvidia"} <= neuron
    assert "aws-efa-k8s-device-plugin" in neuron
    assert not {"nvidia-device-plugin-daemonset", "health-monitoring-agent"} & neuron


def test_system_pods_are_placed_largest_first() -> None:
    # dev's system node leaves 1.15 CPU: 700m first leaves room for 400m but not 500m;
    # smallest first would strand the 700m pod instead.
    config = environment("dev").config
    pods = tuple(
        PodRequests(name=name, cpu_millicores=cpu, memory_mib=10, addon="coredns", source="t")
        for name, cpu in (("pod-c", 400), ("pod-a", 700), ("pod-b", 500))
    )
    assert group_model(config, "system").free_cpu_millicores == 1150
    assert _system_fit(config, pods=pods) == (
        "hyperpod.instance_groups[1].instance_type",
        "the platform's system pods need 1.6 CPU and 30 MiB, but the groups without "
        "accelerators leave 1.15 CPU and 13.1 GiB after the kubelet's reservations, tiered "
        "storage and DaemonSets (pod-b would not fit); use a larger type than ml.m5.xlarge, "
        "more nodes, or threads_per_core: 2",
    )
    # Memory decides too: a pod that fits the CPU but not the memory stays unplaced.
    hungry = PodRequests(name="hungry", cpu_millicores=1, memory_mib=20000, addon="coredns",
                         source="t")  # fmt: skip
    problem = _system_fit(config, pods=(hungry,))
    assert problem is not None and "(hungry would not fit)" in problem[1]
    # Replicas count one by one.
    twice = PodRequests(name="twice", cpu_millicores=800, memory_mib=10, addon="coredns",
                        source="t", replicas=2)  # fmt: skip
    problem = _system_fit(config, pods=(twice,))
    assert problem is not None
    assert "need 1.6 CPU and 20 MiB" in problem[1] and "(twice would not fit)" in problem[1]
    # Pods of add-ons the environment does not install are not counted.
    other = PodRequests(name="other", cpu_millicores=5000, memory_mib=10, addon="nope",
                        source="t")  # fmt: skip
    assert _system_fit(config, pods=(other,)) is None


def test_system_pods_that_fit_exactly_are_placed() -> None:
    config = environment("dev").config
    free = group_model(config, "system")
    exact = PodRequests(name="exact", cpu_millicores=free.free_cpu_millicores,
                        memory_mib=free.free_memory_mib, addon="coredns", source="t")  # fmt: skip
    assert _system_fit(config, pods=(exact,)) is None


def test_without_groups_free_of_accelerators_system_pods_share_the_others() -> None:
    config = environment("dev").config
    groups = [g for g in config.hyperpod.instance_groups if g.name == "gpu-g5"]
    only_gpu = config.model_copy(
        update={"hyperpod": config.hyperpod.model_copy(update={"instance_groups": groups})}
    )
    heavy = PodRequests(name="heavy", cpu_millicores=10**6, memory_mib=1, addon="coredns",
                        source="t")  # fmt: skip
    assert _system_fit(only_gpu, pods=(heavy,)) is None


def test_tiered_storage_that_leaves_jobs_no_memory_is_named() -> None:
    config = environment("dev").config
    tiered = config.hyperpod.tiered_storage.model_copy(
        update={"enabled": True, "memory_percent": 100}
    )
    full = config.model_copy(
        update={"hyperpod": config.hyperpod.model_copy(update={"tiered_storage": tiered})}
    )
    assert job_fit_problem(node_models(full)) == (
        "hyperpod.tiered_storage.memory_percent",
        "100% of gpu-g5's memory for tiered storage leaves its jobs -25.5 GiB after the "
        "kubelet's reservations and DaemonSets; use a lower percentage",
    )
    assert job_fit_problem(node_models(config)) is None


@pytest.mark.parametrize(("vcpus", "memory_gib"), [(2, 192), (48, 2)])
def test_a_type_that_leaves_a_job_nothing_is_named(
    monkeypatch: pytest.MonkeyPatch, vcpus: int, memory_gib: int
) -> None:
    tiny = dataclasses.replace(
        lookup("ml.g5.12xlarge"), name="ml.g5.tiny", vcpus=vcpus, memory_gib=memory_gib
    )
    monkeypatch.setitem(INSTANCE_TYPES, tiny.name, tiny)
    config = _group(environment("dev").config, "gpu-g5", instance_type=tiny.name)
    problem = job_fit_problem(node_models(config))
    assert problem is not None
    field, message = problem
    assert field == "hyperpod.instance_groups[0].instance_type"
    job = group_model(config, "gpu-g5").job
    assert job.cpu_millicores <= 0 or job.memory_mib <= 0
    assert message == (
        f"ml.g5.tiny leaves a job {format_cpu(job.cpu_millicores)} CPU and "
        f"{format_memory(job.memory_mib)} after the kubelet's reservations and DaemonSets; "
        "use a larger type"
    )


@pytest.mark.parametrize(("cpus", "expected"), [(3, 75), (5, 82), (400, 1070)])
def test_kube_reserved_cpu_rounds_down_to_whole_millicores(cpus: int, expected: int) -> None:
    # 2.5m per further core: 5 cores reserve 82m, not 82.5m; 400 cores reach a whole one.
    reserved = kube_reserved_cpu_millicores(cpus)
    assert reserved == expected and type(reserved) is int


def test_a_model_is_named_after_its_group() -> None:
    assert [m.group for m in node_models(environment("dev").config)] == ["gpu-g5", "system"]


def test_every_unplaced_system_pod_is_named() -> None:
    # 1.15 CPU: a (700m) leaves 450m, b (500m) and d (480m) do not fit, c (400m) does.
    config = environment("dev").config
    pods = tuple(
        PodRequests(name=name, cpu_millicores=cpu, memory_mib=10, addon="coredns", source="t")
        for name, cpu in (("pod-a", 700), ("pod-b", 500), ("pod-c", 400), ("pod-d", 480))
    )
    problem = _system_fit(config, pods=pods)
    assert problem is not None and "(pod-b, pod-d would not fit)" in problem[1]


def test_system_pods_use_up_the_memory_they_are_placed_in() -> None:
    # 13393 MiB free: the first 8000 MiB pod fits, the second no longer does.
    config = environment("dev").config
    pods = tuple(
        PodRequests(
            name=f"fat-{i}", cpu_millicores=10, memory_mib=8000, addon="coredns", source="t"
        )
        for i in (1, 2)
    )
    problem = _system_fit(config, pods=pods)
    assert problem is not None and "(fat-2 would not fit)" in problem[1]


def test_system_nodes_left_with_nothing_show_nothing_left() -> None:
    # A DaemonSet larger than the system node: the free figures are negative, shown as 0.
    config = environment("dev").config
    huge = PodRequests(name="huge", cpu_millicores=10**5, memory_mib=10**6, addon="vpc-cni",
                       source="t")  # fmt: skip
    problem = _system_fit(config, addon_daemonsets=(*ADDON_DAEMONSETS, huge))
    assert problem is not None
    assert "the groups without accelerators leave 0 CPU and 0 MiB after" in problem[1]


def _padded_job(*, cpu: int, memory: int, tiered: bool = False) -> tuple[str, str] | None:
    """job_fit_problem for dev with a DaemonSet that leaves gpu-g5's job exactly `cpu`
    millicores and `memory` MiB."""
    config = environment("dev").config
    if tiered:
        storage = config.hyperpod.tiered_storage.model_copy(
            update={"enabled": True, "memory_percent": 10}
        )
        config = config.model_copy(
            update={"hyperpod": config.hyperpod.model_copy(update={"tiered_storage": storage})}
        )
    job = group_model(config, "gpu-g5").job
    pad = PodRequests(name="pad", addon="vpc-cni", source="t",
                      cpu_millicores=job.cpu_millicores - cpu,
                      memory_mib=job.memory_mib - memory)  # fmt: skip
    return job_fit_problem(node_models(config, addon_daemonsets=(*ADDON_DAEMONSETS, pad)))


@pytest.mark.parametrize(
    ("cpu", "memory", "tiered", "field"),
    [
        (1, 1, False, None),
        (0, 1, False, "hyperpod.instance_groups[0].instance_type"),
        (1, 0, False, "hyperpod.instance_groups[0].instance_type"),
        (1, 0, True, "hyperpod.tiered_storage.memory_percent"),
        (0, 1, True, "hyperpod.instance_groups[0].instance_type"),
    ],
)
def test_a_job_needs_at_least_a_millicore_and_a_mib(
    cpu: int, memory: int, tiered: bool, field: str | None
) -> None:
    problem = _padded_job(cpu=cpu, memory=memory, tiered=tiered)
    assert (problem[0] if problem else None) == field


def test_every_accelerated_group_is_checked_whatever_the_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tiny = dataclasses.replace(lookup("ml.g5.12xlarge"), name="ml.g5.tiny", vcpus=2)
    monkeypatch.setitem(INSTANCE_TYPES, tiny.name, tiny)
    config = environment("dev").config
    gpu, system = config.hyperpod.instance_groups
    small = gpu.model_copy(update={"name": "gpu-small", "instance_type": tiny.name})
    # A group without accelerators first, then one that fits, then the one that does not.
    ordered = config.model_copy(
        update={
            "hyperpod": config.hyperpod.model_copy(update={"instance_groups": [system, gpu, small]})
        }
    )
    problem = job_fit_problem(node_models(ordered))
    assert problem is not None and problem[0] == "hyperpod.instance_groups[2].instance_type"


def test_node_model_takes_the_nvidia_device_plugins_figures_from_its_manifest() -> None:
    plugin = next(d for d in vendored_daemonsets() if d.name == "nvidia-device-plugin-daemonset")
    assert (plugin.cpu_millicores, plugin.memory_mib) == (50, 64)
    assert plugin.placement == "nvidia"
