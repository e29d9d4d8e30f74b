"""kubernetes-version: what EKS offers this account for eks.kubernetes_version (offered at
all, standard or extended support, until when), and which newer versions EKS offers that the
platform's table (config/eks_versions.py) lacks because HyperPod does not document them."""

from __future__ import annotations

from config.eks_versions import SUPPORTED_KUBERNETES_VERSIONS, version_key
from hpctl.aws import AwsCallError, paginate
from hpctl.preflight.context import OK, PROBLEM, CheckContext, Row, day, failure_row

KUBERNETES_VERSION = "kubernetes-version"
_LEGACY_VERSION_STATUS = {
    "standard-support": "STANDARD_SUPPORT",
    "extended-support": "EXTENDED_SUPPORT",
    "unsupported": "UNSUPPORTED",
}


def _newer_than_the_table(status_of: dict[str, str]) -> list[str]:
    """The versions EKS offers (not yet unsupported) beyond the newest in the table."""
    newest = version_key(max(SUPPORTED_KUBERNETES_VERSIONS, key=version_key))
    offered = [
        v
        for v, status in status_of.items()
        if status != "UNSUPPORTED" and v.replace(".", "").isdigit() and v.count(".") == 1
    ]
    return sorted((v for v in offered if version_key(v) > newest), key=version_key)


def kubernetes_version_rows(context: CheckContext) -> list[Row]:
    config = context.config
    version = config.eks.kubernetes_version
    try:
        versions = paginate(
            context.client("eks"), "describe_cluster_versions", "clusterVersions", includeAll=True
        )
    except AwsCallError as failure:
        return [failure_row(failure, KUBERNETES_VERSION, version)]
    status_of = {
        v["clusterVersion"]: v.get("versionStatus")
        or _LEGACY_VERSION_STATUS.get(str(v.get("status")), "UNKNOWN")
        for v in versions
        if "clusterVersion" in v
    }
    standard = sorted(
        (v for v in SUPPORTED_KUBERNETES_VERSIONS if status_of.get(v) == "STANDARD_SUPPORT"),
        key=version_key,
    )
    newer = _newer_than_the_table(status_of)
    undocumented = (
        f"; EKS also offers {', '.join(newer)}, which HyperPod does not document "
        "(config/eks_versions.py)"
        if newer
        else ""
    )
    upgrade = (
        f"set eks.kubernetes_version to {standard[-1]} (standard support, documented by "
        "HyperPod), one minor version at a time"
        if standard
        else "add a version HyperPod documents that is in EKS standard support to "
        "config/eks_versions.py"
    )
    info = next((v for v in versions if v.get("clusterVersion") == version), None)
    if info is None:
        return [
            Row(
                KUBERNETES_VERSION,
                version,
                PROBLEM,
                f"EKS in {config.region} does not list Kubernetes {version}",
                upgrade,
            )
        ]
    status = status_of[version]
    standard_end = day(info.get("endOfStandardSupportDate"))
    extended_end = day(info.get("endOfExtendedSupportDate"))
    if status == "STANDARD_SUPPORT":
        return [
            Row(
                KUBERNETES_VERSION,
                version,
                OK,
                f"standard support until {standard_end}{undocumented}",
            )
        ]
    if status == "EXTENDED_SUPPORT":
        detail = (
            f"in extended support since {standard_end}, until {extended_end} "
            "(billed at the extended support rate)"
        )
    else:
        detail = f"status {status} (extended support ended {extended_end})"
    return [Row(KUBERNETES_VERSION, version, PROBLEM, detail + undocumented, upgrade)]
