"""`hpctl kubeconfig --env NAME`: a kubeconfig for an environment's EKS cluster, and the way
to its private API endpoint.

The kubeconfig is what `aws eks update-kubeconfig` writes (server and CA from DescribeCluster,
`aws eks get-token` exec authentication with the caller's own AWS identity), in a file of its
own (`~/.kube/hpctl-<env>.yaml` unless `--output` says otherwise), never merged into another.
With `--local-port PORT` it points at `https://127.0.0.1:PORT` with the endpoint's name for
TLS, for a Session Manager port forward through the admin host; the command prints that
tunnel (and a shell on the host) with the host's instance ID, read from the network stack's
output. Failures are one line on stderr (exit 1 for AWS, 2 for options).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import typer
import yaml

from config.schema import EnvironmentConfig
from config.schema.network import ADMIN_HOST_OUTPUT
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.options import EnvOption, load_environment_option, required_env

# What `aws eks update-kubeconfig` writes and `aws eks get-token` answers.
EXEC_API_VERSION = "client.authentication.k8s.io/v1beta1"
# Cluster states DescribeCluster reports in which the endpoint answers (as the AWS CLI).
USABLE_STATUSES = ("ACTIVE", "UPDATING")
# The Session Manager document that forwards a local port to a host the instance can reach.
PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
SUGGESTED_LOCAL_PORT = 8443

app = typer.Typer()


def default_output(env: str) -> Path:
    return Path("~/.kube") / f"hpctl-{env}.yaml"


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


def admin_host_instance(
    config: EnvironmentConfig, connection: aws.Connection
) -> tuple[str | None, str]:
    """(instance ID, "") from the network stack's output, or (None, why not)."""
    stack = config.names.stack("network")
    if not config.network.admin_host.enabled:
        return None, "network.admin_host is disabled in this environment"
    try:
        cloudformation = connection.client("cloudformation")
        stacks = aws.call(cloudformation, "describe_stacks", StackName=stack)["Stacks"]
    except aws.AwsCallError as failure:
        return None, f"cannot read stack {stack} ({failure})"
    for output in stacks[0].get("Outputs", []) if stacks else []:
        if output.get("OutputKey") == ADMIN_HOST_OUTPUT:
            return str(output["OutputValue"]), ""
    return None, f"stack {stack} has no {ADMIN_HOST_OUTPUT} output (deploy the network stack)"


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` (mode 0600) through a temporary file in the same directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
    ) as partial:
        partial.write(text)
    os.chmod(partial.name, 0o600)
    os.replace(partial.name, path)


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


@app.command("kubeconfig", cls=OneLineUsageErrors)
def kubeconfig(
    ctx: typer.Context,
    env: EnvOption = None,
    output: Annotated[
        str | None,
        typer.Option(help="File to write (default ~/.kube/hpctl-<env>.yaml); - for stdout."),
    ] = None,
    local_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Point at https://127.0.0.1:PORT, for a Session Manager port forward through "
            "the admin host (the command prints it).",
        ),
    ] = None,
) -> None:
    """Write a kubeconfig for the environment's EKS cluster (aws eks get-token auth) and
    print how to reach its private endpoint through the admin host."""
    env = required_env(ctx, env)
    config = load_environment_option(ctx, env)
    connection = aws.connect_environment(ctx, config)
    name = config.names.eks_cluster
    with aws.reported_errors(ctx):
        cluster = aws.call(connection.client("eks"), "describe_cluster", name=name)["cluster"]
    status = cluster.get("status")
    if status not in USABLE_STATUSES:
        fail(
            ctx,
            f"{name}: the cluster is {status}; wait until it is ACTIVE, then run this again",
            code=ExitCode.FAILED,
        )
    document = kubeconfig_document(
        cluster,
        region=config.region,
        local_port=local_port,
        profile=os.environ.get("AWS_PROFILE"),
    )
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    instance, missing = admin_host_instance(config, connection)
    lines = guidance(config, cluster, local_port=local_port, instance=instance, missing=missing)
    if output == "-":
        typer.echo(text, nl=False)
        for line in lines:
            typer.echo(line, err=True)
        return
    path = Path(output) if output is not None else default_output(env)
    target = path.expanduser()
    try:
        write_private(target, text)
    except OSError as error:
        fail(ctx, f"--output: cannot write {path}: {error.strerror}", code=ExitCode.FAILED)
    typer.echo(f"Wrote {target} (cluster {name}, {config.region}). Use it with:")
    typer.echo(f"  export KUBECONFIG={target}")
    for line in lines:
        typer.echo(line)
