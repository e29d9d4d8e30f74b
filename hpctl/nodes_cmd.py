"""`hpctl node-model --env ENV`: what a node of each instance group offers pods.

Per group: vCPUs, threads per core, the CPUs Kubernetes sees, the kubelet's kube-reserved
and system-reserved shares and eviction threshold (as the EKS AMI sets them), HyperPod
tiered storage's memory, the DaemonSets the platform installs there, the system pods that
may share the node, and what is left for a job (what `hpctl job render` requests). Then the
platform's system pods and whether they fit on the groups without accelerators. Offline: it
reads config/<env>.yaml only (the report is built in `hpctl.nodes`).

The command was `hpctl nodes`, which read as the cluster's live nodes (those are
`hpctl cluster nodes`); that name still works for one release, hidden, with a deprecation line.
"""

from __future__ import annotations

import json

import typer

from hpctl.errors import OneLineUsageErrors, deprecated
from hpctl.nodes import format_report, nodes_report
from hpctl.options import (
    DEPRECATED_COMMANDS,
    EnvOption,
    JsonObjectOption,
    loaded_environment_option,
    required_env,
)

app = typer.Typer()


@app.command("node-model", cls=OneLineUsageErrors)
def node_model(
    ctx: typer.Context,
    env: EnvOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """What a node of each instance group offers pods, and what a job may request there.

    Offline, from the environment's config; the cluster's own nodes are hpctl cluster nodes."""
    loaded = loaded_environment_option(ctx, required_env(ctx, env))
    report = nodes_report(loaded.config, loaded.plan)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        typer.echo(format_report(report), nl=False)


@app.command("nodes", cls=OneLineUsageErrors, hidden=True)
def nodes(
    ctx: typer.Context,
    env: EnvOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """The previous name of node-model."""
    deprecated(ctx, "this name", f"hpctl {DEPRECATED_COMMANDS['nodes']}")
    node_model(ctx, env=env, as_json=as_json)
