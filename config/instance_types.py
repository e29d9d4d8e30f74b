"""Known HyperPod instance types and the network figures the capacity plan needs.

Figures come from the EC2 instance-type network tables (network cards, maximum EFA
interfaces, IPv4 addresses per ENI). A HyperPod node has one ENI for the node and its pods,
so the per-ENI IPv4 limit also bounds pods per node under EKS. What a node offers pods
(kubelet reservations, DaemonSets) is in `config.node_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AcceleratorKind = Literal["nvidia", "neuron", "none"]
InterfaceType = Literal["efa", "efa-only"]
INTERFACE_TYPES: tuple[InterfaceType, ...] = ("efa", "efa-only")


@dataclass(frozen=True, kw_only=True)
class InstanceType:
    name: str
    vcpus: int
    memory_gib: int
    accelerator: AcceleratorKind
    accelerator_count: int
    # Network cards; each EFA interface sits on its own card.
    network_cards: int
    # Maximum EFA interfaces (0: the type has no EFA).
    efa_interfaces: int
    ipv4_per_eni: int
    # Interfaces EC2 allows on the default network card (DescribeInstanceTypes
    # MaximumNetworkInterfaces of card 0): what the EKS AMI computes a node's max pods from,
    # whatever ENIs HyperPod attaches (awslabs/amazon-eks-ami
    # nodeadm/internal/kubelet/instance-info.jsonl, `defaultMaxENIs`).
    default_enis: int
    # Hardware threads per core: the table's vCPUs are cores x this. Two on x86 (SMT); one
    # on Arm, where a vCPU is a core (the Grace CPUs of GB200).
    threads_per_core: int = 2
    # HyperPod labels the type's nodes with EC2's network topology, so Kueue can place a job
    # by it (config.kubernetes.TOPOLOGY_LEVELS): the instance types the task-governance guide
    # lists for topology-aware scheduling.
    network_topology: bool = False
    # Instances whose GPUs share one NVLink domain: 1, except UltraServer instances (one
    # UltraServer, `ULTRASERVER_TYPES`, is the domain).
    nvlink_domain_instances: int = 1

    @property
    def has_accelerators(self) -> bool:
        """GPUs or Trainium chips: what a training job needs."""
        return self.accelerator != "none" and self.accelerator_count > 0

    @property
    def supports_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def supports_efa_only(self) -> bool:
        # EC2 offers EFA-only interfaces (no IP address) on every EFA-capable type; they are
        # secondary interfaces, the primary keeps its ENA and address.
        return self.supports_efa

    @property
    def family(self) -> str:
        return self.name.split(".")[1]

    def supports_interface(self, interface: InterfaceType) -> bool:
        if interface == "efa":
            return self.supports_efa
        return self.supports_efa_only

    @property
    def supported_interfaces(self) -> tuple[InterfaceType, ...]:
        return tuple(i for i in INTERFACE_TYPES if self.supports_interface(i))

    @property
    def default_interface(self) -> InterfaceType | None:
        """The interface a group gets when its config names none: efa where the type has it."""
        return "efa" if self.supports_efa else None


def _gpu(name: str, **kw: object) -> InstanceType:
    return InstanceType(name=name, accelerator="nvidia", **kw)  # type: ignore[arg-type]


def _topology_gpu(name: str, **kw: object) -> InstanceType:
    return _gpu(name, network_topology=True, **kw)


# fmt: off
_TABLE: tuple[InstanceType, ...] = (
    # NVIDIA training instances
    _topology_gpu("ml.p4d.24xlarge", vcpus=96, memory_gib=1152, accelerator_count=8,
                  network_cards=4, efa_interfaces=4, ipv4_per_eni=50, default_enis=15),
    _topology_gpu("ml.p4de.24xlarge", vcpus=96, memory_gib=1152, accelerator_count=8,
                  network_cards=4, efa_interfaces=4, ipv4_per_eni=50, default_enis=15),
    _topology_gpu("ml.p5.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
                  network_cards=32, efa_interfaces=32, ipv4_per_eni=50, default_enis=2),
    _topology_gpu("ml.p5e.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
                  network_cards=32, efa_interfaces=32, ipv4_per_eni=50, default_enis=2),
    _topology_gpu("ml.p5en.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
                  network_cards=16, efa_interfaces=16, ipv4_per_eni=50, default_enis=4),
    _gpu("ml.p6-b200.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
         network_cards=8, efa_interfaces=8, ipv4_per_eni=50, default_enis=4),
    # GB200 UltraServer instances: 2 Grace CPUs (Arm, one thread a core) and 4 Blackwell GPUs
    # each; up to 18 share one NVLink domain (the HyperPod guide's "Using topology-aware
    # scheduling in Amazon SageMaker HyperPod": "An UltraServer contains up to 18
    # p6e-gb200.36xlarge instances, with 4 GPUs on each instance"). vCPUs and memory from
    # AWS's P6e-GB200 launch (144 vCPUs, 960 GiB, 1600 Gbps EFAv4). Network cards and EFA:
    # eight, an EFA interface on each (AWS ParallelCluster's launch template for GB200 puts
    # an EFA on every even card and an EFA-only on every odd one, aws-parallelcluster#6930;
    # the FSx for Lustre EFA client guide binds all 8). IPv4 per ENI and default-card ENIs
    # the larger of p5's and p6-b200's (4 default-card ENIs), so the address plan reserves
    # at least what the node can take; the EKS AMI's instance table (instance-info.jsonl)
    # has no row for this type yet, so nodeadm reads them from EC2 at boot.
    _topology_gpu("ml.p6e-gb200.36xlarge", vcpus=144, memory_gib=960, accelerator_count=4,
                  network_cards=8, efa_interfaces=8, ipv4_per_eni=50, default_enis=4,
                  threads_per_core=1, nvlink_domain_instances=18),
    # NVIDIA development / inference-class instances
    _gpu("ml.g5.8xlarge", vcpus=32, memory_gib=128, accelerator_count=1,
         network_cards=1, efa_interfaces=1, ipv4_per_eni=30, default_enis=8),
    _gpu("ml.g5.12xlarge", vcpus=48, memory_gib=192, accelerator_count=4,
         network_cards=1, efa_interfaces=1, ipv4_per_eni=50, default_enis=15),
    _gpu("ml.g5.24xlarge", vcpus=96, memory_gib=384, accelerator_count=4,
         network_cards=1, efa_interfaces=1, ipv4_per_eni=50, default_enis=15),
    _gpu("ml.g5.48xlarge", vcpus=192, memory_gib=768, accelerator_count=8,
         network_cards=1, efa_interfaces=1, ipv4_per_eni=50, default_enis=7),
    _gpu("ml.g6e.48xlarge", vcpus=192, memory_gib=1536, accelerator_count=8,
         network_cards=4, efa_interfaces=4, ipv4_per_eni=50, default_enis=10),
    # AWS Trainium
    InstanceType(name="ml.trn1.32xlarge", vcpus=128, memory_gib=512, accelerator="neuron",
                 accelerator_count=16, network_cards=8, efa_interfaces=8, ipv4_per_eni=50,
                 default_enis=5, network_topology=True),
    InstanceType(name="ml.trn1n.32xlarge", vcpus=128, memory_gib=512, accelerator="neuron",
                 accelerator_count=16, network_cards=16, efa_interfaces=16, ipv4_per_eni=50,
                 default_enis=5, network_topology=True),
    InstanceType(name="ml.trn2.48xlarge", vcpus=192, memory_gib=2048, accelerator="neuron",
                 accelerator_count=16, network_cards=16, efa_interfaces=16, ipv4_per_eni=50,
                 default_enis=2, network_topology=True),
    # CPU instances for system pods, controllers and data preparation
    InstanceType(name="ml.m5.xlarge", vcpus=4, memory_gib=16, accelerator="none",
                 accelerator_count=0, network_cards=1, efa_interfaces=0, ipv4_per_eni=15,
                 default_enis=4),
    InstanceType(name="ml.m5.2xlarge", vcpus=8, memory_gib=32, accelerator="none",
                 accelerator_count=0, network_cards=1, efa_interfaces=0, ipv4_per_eni=15,
                 default_enis=4),
    InstanceType(name="ml.m5.4xlarge", vcpus=16, memory_gib=64, accelerator="none",
                 accelerator_count=0, network_cards=1, efa_interfaces=0, ipv4_per_eni=30,
                 default_enis=8),
    InstanceType(name="ml.m5.12xlarge", vcpus=48, memory_gib=192, accelerator="none",
                 accelerator_count=0, network_cards=1, efa_interfaces=0, ipv4_per_eni=30,
                 default_enis=8),
    InstanceType(name="ml.c5.4xlarge", vcpus=16, memory_gib=32, accelerator="none",
                 accelerator_count=0, network_cards=1, efa_interfaces=0, ipv4_per_eni=30,
                 default_enis=8),
    InstanceType(name="ml.c5n.18xlarge", vcpus=72, memory_gib=192, accelerator="none",
                 accelerator_count=0, network_cards=1, efa_interfaces=1, ipv4_per_eni=50,
                 default_enis=15),
)
# fmt: on

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _TABLE}


@dataclass(frozen=True, kw_only=True)
class UltraServerType:
    """A SageMaker UltraServer type: `instances` of `instance_type` in one NVLink domain, bought
    whole with a training plan (SearchTrainingPlanOfferings UltraServerType/UltraServerCount)."""

    name: str
    instance_type: str
    instances: int

    @property
    def accelerators(self) -> int:
        return self.instances * INSTANCE_TYPES[self.instance_type].accelerator_count


# The GB200 UltraServers: 72 GPUs on 18 instances, or 36 on 9 (SageMaker's UltraServer API
# reference names ml.u-p6e-gb200x72; EC2 Capacity Blocks sell u-p6e-gb200x72 and
# u-p6e-gb200x36, aws-sdk-go-v2 service/ec2 CHANGELOG).
ULTRASERVER_TYPES: dict[str, UltraServerType] = {
    u.name: u
    for u in (
        UltraServerType(name="ml.u-p6e-gb200x72", instance_type="ml.p6e-gb200.36xlarge",
                        instances=18),
        UltraServerType(name="ml.u-p6e-gb200x36", instance_type="ml.p6e-gb200.36xlarge",
                        instances=9),
    )
}  # fmt: skip


def known_instance_types() -> list[str]:
    return sorted(INSTANCE_TYPES)


def unknown_instance_type(name: str) -> str:
    """The one message for an instance type the table does not know."""
    return f"unknown instance type {name!r}; known types: {', '.join(known_instance_types())}"


def lookup(name: str) -> InstanceType:
    """Return the figures for `name`; KeyError carries `unknown_instance_type(name)`."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        raise KeyError(unknown_instance_type(name)) from None


def topology_instance_types() -> list[str]:
    """The types whose nodes HyperPod labels with their network topology."""
    return sorted(t.name for t in _TABLE if t.network_topology)
