"""The Kubernetes versions the platform runs, with their EKS support dates: the one table.

A version is listed only when the SageMaker HyperPod documentation names it as supported
(each row cites where): a cluster on a version HyperPod does not support fails at HyperPod's
`CreateCluster`, after the EKS stack is already deployed. A listed version must also be one
the bundled kubectl can manage (platform_constructs/eks_kubectl.py) and whose EKS extended
support does not end within `RETIREMENT_NOTICE` of `CALENDAR_CHECKED`. EKS dates are its
release calendar ("Understand the Kubernetes version lifecycle on EKS", Amazon EKS User
Guide): 14 months of standard support from the EKS release, then 12 months of extended
support at the extended-support price per cluster hour, after which EKS upgrades the control
plane itself.

Not listed (checked 2026-11-26): 1.35 and later, which EKS offers but HyperPod does not
document; 1.31 (extended support ends 2026-11-26); 1.32 (documented by HyperPod, but outside
the bundled kubectl 1.34's window, and extended support ends 2027-03-23).

The default is the newest version HyperPod documents. 1.34 leaves EKS standard support on
2026-12-02 and HyperPod documents no later version, so the shipped environments set
`eks.allow_extended_support: true` (config/schema/eks.py): the extended-support cost is a
reviewed choice in each environment's file, not something the platform drifts into when a
date passes, and an environment without it fails validation from that day.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, kw_only=True)
class Source:
    """A document a row rests on: where it is and what it says there."""

    title: str
    url: str
    says: str


@dataclass(frozen=True, kw_only=True)
class KubernetesRelease:
    version: str
    # Where HyperPod documents its support for this version.
    hyperpod_support: Source
    standard_support_ends: datetime.date
    extended_support_ends: datetime.date
    # Where the two dates come from.
    eks_calendar: Source


# When the table was last checked against the EKS calendar and the HyperPod documentation.
CALENDAR_CHECKED = datetime.date(2026, 11, 26)
# A version whose extended support ends within this is retired: EKS upgrades a cluster
# itself when extended support ends, which must never happen under a live HyperPod cluster.
RETIREMENT_NOTICE = datetime.timedelta(days=90)

# The newest copy of HyperPod's EKS prerequisites page readable on 2026-11-26 (the Chinese
# edition, machine-translated from the English one; the English copies at hand are older and
# stop at 1.32 or 1.33).
HYPERPOD_EKS_PREREQUISITES = Source(
    title="Getting started with Amazon EKS support in SageMaker HyperPod (Amazon SageMaker AI "
    "Developer Guide), section Requirements, item Kubernetes version support",
    url="https://docs.amazonaws.cn/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.md",
    says="SageMaker HyperPod supports Kubernetes versions 1.28, 1.29, 1.30, 1.31, 1.32, 1.33 "
    "and 1.34",
)
EKS_VERSION_CALENDAR = Source(
    title="Understand the Kubernetes version lifecycle on EKS (Amazon EKS User Guide), "
    "Amazon EKS Kubernetes release calendar",
    url="https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html",
    says="end of standard support and end of extended support per version",
)

_CALENDAR = (
    KubernetesRelease(
        version="1.33",
        hyperpod_support=HYPERPOD_EKS_PREREQUISITES,
        standard_support_ends=datetime.date(2026, 7, 29),
        extended_support_ends=datetime.date(2027, 7, 29),
        eks_calendar=EKS_VERSION_CALENDAR,
    ),
    KubernetesRelease(
        version="1.34",
        hyperpod_support=HYPERPOD_EKS_PREREQUISITES,
        standard_support_ends=datetime.date(2026, 12, 2),
        extended_support_ends=datetime.date(2027, 12, 2),
        eks_calendar=EKS_VERSION_CALENDAR,
    ),
)

KUBERNETES_RELEASES: Mapping[str, KubernetesRelease] = MappingProxyType(
    {release.version: release for release in _CALENDAR}
)
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = tuple(KUBERNETES_RELEASES)


def version_key(version: str) -> tuple[int, ...]:
    """`version` ("1.34") as numbers, for ordering."""
    return tuple(int(part) for part in version.split("."))


# What every environment runs: the newest version HyperPod documents.
DEFAULT_KUBERNETES_VERSION = max(SUPPORTED_KUBERNETES_VERSIONS, key=version_key)


def today() -> datetime.date:
    """The date validation judges support against (tests replace it)."""
    return datetime.date.today()


def newest_in_standard_support(on: datetime.date) -> str | None:
    """The newest listed version still in standard support on `on`, if any."""
    current = [r.version for r in _CALENDAR if on < r.standard_support_ends]
    return max(current, key=version_key) if current else None


def support_problem(version: str, *, on: datetime.date, allow_extended: bool) -> str | None:
    """Why an environment may not run `version` on `on` (None: it may), worded as
    `<what is wrong>; <the fix>`. `version` must be a listed one."""
    release = KUBERNETES_RELEASES[version]
    target = newest_in_standard_support(on)
    upgrade = (
        f"upgrade to {target}, one minor version at a time"
        if target is not None
        else "add a version HyperPod documents that is in EKS standard support to "
        "config/eks_versions.py"
    )
    if on >= release.extended_support_ends - RETIREMENT_NOTICE:
        return (
            f"{version} leaves EKS extended support on {release.extended_support_ends}, "
            f"within {RETIREMENT_NOTICE.days} days, when EKS upgrades the control plane "
            f"itself; {upgrade}"
        )
    if on >= release.standard_support_ends and not allow_extended:
        return (
            f"{version} left EKS standard support on {release.standard_support_ends} and is "
            f"billed at the extended-support rate until {release.extended_support_ends}; "
            f"{upgrade}, or set eks.allow_extended_support: true to accept the cost"
        )
    return None
