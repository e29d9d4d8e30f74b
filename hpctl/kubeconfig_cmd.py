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
from typing import Annotated

import typer
import yaml

from config.schema import EnvironmentConfig
from config.schema.network import ADMIN_HOST_OUTPUT
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.kubeconfig import guidance, kubeconfig_document
from hpctl.options import EnvOption, load_environment_option, required_env

# Cluster states DescribeCluster reports in which the endpoint answers (as the AWS CLI).
USABLE_STATUSES = ("ACTIVE", "UPDATING")

app = typer.Typer()


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
