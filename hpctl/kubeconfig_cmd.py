"""`hpctl kubeconfig --env NAME`: a kubeconfig for an environment's EKS cluster, and the way
to its private API endpoint.

The kubeconfig is what `aws eks update-kubeconfig` writes (server and CA from DescribeCluster,
`aws eks get-token` exec authentication with the caller's own AWS identity), in a file of its
own (`~/.kube/hpctl-<env>.yaml` unless `--output` says otherwise), never merged into another.
With `--local-port PORT` it points at `https://127.0.0.1:PORT` with the endpoint's name for
TLS, for a Session Manager port forward through the admin host; the command prints that
tunnel (and a shell on the host) with the host's instance ID, read from the network stack's
output. Failures are one line on stderr (exit 1 for AWS, 2 for options). The kubeconfig,
the guidance and the file writing are in `hpctl.kubeconfig`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
import yaml

from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.kubeconfig import (
    USABLE_STATUSES,
    admin_host_instance,
    default_output,
    guidance,
    kubeconfig_document,
    write_private,
)
from hpctl.options import EnvOption, load_environment_option, required_env

app = typer.Typer()


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
    """Write a kubeconfig for the environment's EKS cluster and say how to reach it.

    Authentication is aws eks get-token; the private endpoint is reached through the admin
    host (the command prints the tunnel and a shell there)."""
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
