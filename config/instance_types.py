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


# fmt: off
_TABLE: tuple[InstanceType, ...] = (
    # NVIDIA training instances
    _gpu("ml.p4d.24xlarge", vcpus=96, memory_gib=1152, accelerator_count=8,
         network_cards=4, efa_interfaces=4, ipv4_per_eni=50, default_enis=15),
    _gpu("ml.p4de.24xlarge", vcpus=96, memory_gib=1152, accelerator_count=8,
         network_cards=4, efa_interfaces=4, ipv4_per_eni=50, default_enis=15),
    _gpu("ml.p5.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
         network_cards=32, efa_interfaces=32, ipv4_per_eni=50, default_enis=2),
    _gpu("ml.p5e.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
         network_cards=32, efa_interfaces=32, ipv4_per_eni=50, default_enis=2),
    _gpu("ml.p5en.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
         network_cards=16, efa_interfaces=16, ipv4_per_eni=50, default_enis=4),
    _gpu("ml.p6-b200.48xlarge", vcpus=192, memory_gib=2048, accelerator_count=8,
         network_cards=8, efa_interfaces=8, ipv4_per_eni=50, default_enis=4),
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
                 default_enis=5),
    InstanceType(name="ml.trn1n.32xlarge", vcpus=128, memory_gib=512, accelerator="neuron",
                 accelerator_count=16, network_cards=16, efa_interfaces=16, ipv4_per_eni=50,
                 default_enis=5),
    InstanceType(name="ml.trn2.48xlarge", vcpus=192, memory_gib=2048, accelerator="neuron",
                 accelerator_count=16, network_cards=16, efa_interfaces=16, ipv4_per_eni=50,
                 default_enis=2),
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
