"""The Kubernetes versions the platform runs, with their EKS support dates: the one table.

A version is listed when SageMaker HyperPod supports it, the bundled kubectl can manage it
(platform_constructs/eks_kubectl.py) and its EKS extended support does not end within
`RETIREMENT_NOTICE` of `CALENDAR_CHECKED`. Dates are EKS's release calendar ("Understand the
Kubernetes version lifecycle on EKS", Amazon EKS User Guide): 14 months of standard support
from the EKS release, then 12 months of extended support at the extended-support price per
cluster hour, after which EKS upgrades the control plane itself.

Dropped on 2026-11-23: 1.31 (extended support ends 2026-11-26) and 1.32 (extended support
until 2027-03-23, but outside the bundled kubectl 1.34's window).

An environment on extended support is a validation error unless it sets
`eks.allow_extended_support: true` (config/schema/eks.py): the cost is then a reviewed choice
in the environment's file, not something the platform drifts into when a date passes.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, kw_only=True)
class KubernetesRelease:
    version: str
    standard_support_ends: datetime.date
    extended_support_ends: datetime.date


# When the table was last checked against the EKS calendar and the HyperPod documentation.
CALENDAR_CHECKED = datetime.date(2026, 11, 23)
# A version whose extended support ends within this is retired: EKS upgrades a cluster
# itself when extended support ends, which must never happen under a live HyperPod cluster.
RETIREMENT_NOTICE = datetime.timedelta(days=90)

_CALENDAR = (
    KubernetesRelease(
        version="1.33",
        standard_support_ends=datetime.date(2026, 7, 29),
        extended_support_ends=datetime.date(2027, 7, 29),
    ),
    KubernetesRelease(
        version="1.34",
        standard_support_ends=datetime.date(2026, 12, 2),
        extended_support_ends=datetime.date(2027, 12, 2),
    ),
    KubernetesRelease(
        version="1.35",
        standard_support_ends=datetime.date(2027, 3, 27),
        extended_support_ends=datetime.date(2028, 3, 27),
    ),
)

KUBERNETES_RELEASES: Mapping[str, KubernetesRelease] = MappingProxyType(
    {release.version: release for release in _CALENDAR}
)
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = tuple(KUBERNETES_RELEASES)
# What every environment runs: the newest version in standard support that HyperPod supports.
DEFAULT_KUBERNETES_VERSION = "1.35"


def today() -> datetime.date:
    """The date validation judges support against (tests replace it)."""
    return datetime.date.today()


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def newest_in_standard_support(on: datetime.date) -> str | None:
    """The newest listed version still in standard support on `on`, if any."""
    current = [r.version for r in _CALENDAR if on < r.standard_support_ends]
    return max(current, key=_key) if current else None


def support_problem(version: str, *, on: datetime.date, allow_extended: bool) -> str | None:
    """Why an environment may not run `version` on `on` (None: it may), worded as
    `<what is wrong>; <the fix>`. `version` must be a listed one."""
    release = KUBERNETES_RELEASES[version]
    target = newest_in_standard_support(on)
    upgrade = (
        f"upgrade to {target}, one minor version at a time"
        if target is not None
        else "add a version in standard support to config/eks_versions.py"
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
