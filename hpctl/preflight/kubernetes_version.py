"""kubernetes-version: eks.kubernetes_version is in EKS standard support."""

from __future__ import annotations

from config.schema.eks import SUPPORTED_KUBERNETES_VERSIONS
from hpctl.aws import AwsCallError, paginate
from hpctl.preflight.context import OK, PROBLEM, CheckContext, Row, day, failure_row

KUBERNETES_VERSION = "kubernetes-version"
_LEGACY_VERSION_STATUS = {
    "standard-support": "STANDARD_SUPPORT",
    "extended-support": "EXTENDED_SUPPORT",
    "unsupported": "UNSUPPORTED",
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


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
        key=_version_key,
    )
    upgrade = (
        f"set eks.kubernetes_version to {standard[-1]} (standard support, supported by the "
        "platform), one minor version at a time"
        if standard
        else "move the platform to a version in standard support (config/schema/eks.py)"
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
                f"standard support until {standard_end}",
            )
        ]
    if status == "EXTENDED_SUPPORT":
        detail = (
            f"in extended support since {standard_end}, until {extended_end} "
            "(billed at the extended support rate)"
        )
    else:
        detail = f"status {status} (extended support ended {extended_end})"
    return [Row(KUBERNETES_VERSION, version, PROBLEM, detail, upgrade)]
