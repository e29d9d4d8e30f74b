"""`hpctl nodes --env ENV`: what a node of each instance group offers pods.

Per group: vCPUs, threads per core, the CPUs Kubernetes sees, the kubelet's kube-reserved
and system-reserved shares and eviction threshold (as the EKS AMI sets them), HyperPod
tiered storage's memory, the DaemonSets the platform installs there, the system pods that
may share the node, and what is left for a job (what `hpctl job render` requests). Then the platform's system pods and whether they fit
on the groups without accelerators. Offline: it reads config/<env>.yaml only.
"""

from __future__ import annotations

import json

import typer

from hpctl.errors import OneLineUsageErrors
from hpctl.nodes import format_report, nodes_report
from hpctl.options import EnvOption, JsonObjectOption, required_environment

app = typer.Typer()


@app.command("nodes", cls=OneLineUsageErrors)
def nodes(
    ctx: typer.Context,
    env: EnvOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """What a node of each instance group offers pods, and what a job may request there."""
    report = nodes_report(required_environment(ctx, env))
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(format_report(report), nl=False)
