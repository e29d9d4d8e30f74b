"""A kubeconfig for an environment's EKS cluster, as `aws eks update-kubeconfig` writes it
(server and CA from DescribeCluster, `aws eks get-token` exec authentication), optionally
for a Session Manager tunnel to the private endpoint, the commands that reach the
endpoint through the admin host (its instance ID from the network stack's output), and the
file it goes to. The command is in `hpctl.kubeconfig_cmd`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from config.schema import EnvironmentConfig
from config.schema.network import ADMIN_HOST_OUTPUT
from hpctl import aws

# What `aws eks update-kubeconfig` writes and `aws eks get-token` answers.
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"


# The Session Manager document that forwards a local port to a host the instance can reach.
PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"


SUGGESTED_LOCAL_PORT = 8443


# Cluster states DescribeCluster reports in which the endpoint answers (as the AWS CLI).
USABLE_STATUSES = ("ACTIVE", "UPDATING")


def default_output(env: str) -> Path:
    return Path("~/.kube") / f"hpctl-{env}.yaml"


def admin_host_instance(
    config: EnvironmentConfig, connection: aws.Connection
) -> tuple[str | None, str]:
    """(instance ID, "") from the network stack's output, or (None, why not)."""
    stack = config.names.stack("network")
    if not config.network.admin_host.enabled:
        return None, "network.admin_host is disabled in this environment"
    try:
        instance = aws.stack_output(connection, stack, ADMIN_HOST_OUTPUT)
    except aws.AwsCallError as failure:
        return None, f"cannot read stack {stack} ({failure})"
    if instance is None:
        return None, f"stack {stack} has no {ADMIN_HOST_OUTPUT} output (deploy the network stack)"
    return instance, ""


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` (mode 0600) through a temporary file in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
    ) as partial:
        partial.write(text)
    os.chmod(partial.name, 0o600)
    os.replace(partial.name, path)


def endpoint_host(endpoint: str) -> str:
    """The API endpoint's host name as EKS gives it (its certificate's name)."""
    return urlparse(endpoint).netloc.rsplit(":", 1)[0]


def kubeconfig_document(
    cluster: dict[str, Any], *, region: str, local_port: int | None, profile: str | None
) -> dict[str, Any]:
    """The kubeconfig for DescribeCluster's `cluster`: one cluster, user and context, named
    by the cluster ARN (with the local port for a tunnel)."""
    name = cluster["arn"] if local_port is None else f"{cluster['arn']}/127.0.0.1:{local_port}"
    endpoint: str = cluster["endpoint"]
    entry: dict[str, Any] = {"certificate-authority-data": cluster["certificateAuthority"]["data"]}
    if local_port is None:
        entry["server"] = endpoint
    else:
        # The tunnel ends on 127.0.0.1; the API server's certificate names the endpoint.
        entry["server"] = f"https://127.0.0.1:{local_port}"
        entry["tls-server-name"] = endpoint_host(endpoint)
    credentials: dict[str, Any] = {
        "apiVersion": EXEC_API_VERSION,
        "command": "aws",
        "args": ["--region", region, "eks", "get-token", "--cluster-name", cluster["name"]],
    }
    if profile:
        credentials["env"] = [{"name": "AWS_PROFILE", "value": profile}]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": entry}],
        "users": [{"name": name, "user": {"exec": credentials}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }


def guidance(
    config: EnvironmentConfig,
    cluster: dict[str, Any],
    *,
    local_port: int | None,
    instance: str | None,
    missing: str,
) -> list[str]:
    """How to reach the endpoint this kubeconfig names: the tunnel or a shell on the admin
    host, as commands to paste."""
    region = config.region
    host = endpoint_host(cluster["endpoint"])
    vpc = cluster.get("resourcesVpcConfig", {})
    target = instance or "<admin host instance ID>"
    tunnel = (
        f"aws ssm start-session --region {region} --target {target} "
        f"--document-name {PORT_FORWARD_DOCUMENT} --parameters "
        f"host={host},portNumber=443,localPortNumber={local_port or SUGGESTED_LOCAL_PORT}"
    )
    shell = f"aws ssm start-session --region {region} --target {target}"
    lines: list[str] = []
    if local_port is not None:
        lines += [
            f"It points at 127.0.0.1:{local_port}; keep this tunnel through the admin host "
            "open while you use it:",
            f"  {tunnel}",
        ]
    elif vpc.get("endpointPublicAccess"):
        cidrs = ", ".join(vpc.get("publicAccessCidrs", [])) or "no CIDR"
        lines.append(
            f"The API endpoint is public for {cidrs} and private inside the VPC; from "
            f"anywhere else use --local-port {SUGGESTED_LOCAL_PORT} and the tunnel it prints."
        )
    else:
        lines += [
            "The API endpoint is private: this kubeconfig works inside the VPC (the admin "
            "host) or from a connected network. From this machine, write one for a tunnel:",
            f"  hpctl kubeconfig --env {config.environment} --local-port {SUGGESTED_LOCAL_PORT}",
        ]
    if instance is None:
        lines.append(f"Admin host: {missing}.")
        if not config.network.admin_host.enabled:
            return lines
    access = config.network.admin_host.kubernetes_access
    role = (
        "its role has no Kubernetes access (kubernetes_access: none); use the tunnel"
        if access == "none"
        else f"kubectl installed; it acts as the host's role, kubernetes_access: {access}"
    )
    lines += [f"A shell on the admin host ({role}):", f"  {shell}"]
    return lines


def context_cluster_arn(document: object) -> str | None:
    """The EKS cluster ARN the current context of a kubeconfig `kubeconfig_document` wrote
    names (its cluster entry is the ARN, with `/127.0.0.1:PORT` for a tunnel); None when the
    document has no current context or its cluster entry is not named that way."""
    if not isinstance(document, dict):
        return None
    current = document.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in document.get("contexts") or []}
    cluster = (contexts.get(current) or {}).get("cluster")
    if not isinstance(cluster, str) or not cluster.startswith("arn:"):
        return None
    return cluster.split("/127.0.0.1:", 1)[0]


def kubeconfig_cluster_problem(document: object, config: EnvironmentConfig) -> str | None:
    """Why a kubeconfig does not reach `config`'s EKS cluster (its current context names
    another cluster, Region or none), or None when it does."""
    arn = context_cluster_arn(document)
    want = f"{config.names.eks_cluster} in {config.region}, account {config.account}"
    if arn is None:
        return f"has no current context naming an EKS cluster ARN (want {want})"
    parts = arn.split(":")
    name = arn.rsplit("cluster/", 1)[-1]
    region, account = (parts[3], parts[4]) if len(parts) > 4 else ("", "")
    if (name, region, account) != (config.names.eks_cluster, config.region, config.account):
        return (
            f"is for cluster {name} in {region}, account {account}, not "
            f"{config.environment}'s {want}"
        )
    return None
