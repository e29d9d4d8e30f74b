"""`hpctl job ...`: render HyperPodPyTorchJob manifests for an environment from a few options.

The environment's config (`--env`, config/<env>.yaml) decides everything that is a fact of
the cluster: the instance group's type and taints, the team's queue, priority classes and
quota, the service account, the FSx claim and whether checkpoints use managed tiered storage.
The user picks the team, the group, the node count, the image and the run's own settings.

Every bad input ends the same way: one line on stderr, `hpctl job render: --option: problem;
fix` (several problems joined with "; "), exit code 2, no traceback. Options are read as text
and converted by `JobSpec`, so a wrong number gets the same one-line treatment as any other
invalid value.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from config.kubernetes import PRIORITY_CLASS_SUFFIX, TOPOLOGY_LEVELS, team_namespace
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.job.environment import JobRequestError, spec_for_environment
from hpctl.job.render import render_job, to_yaml
from hpctl.options import EnvOption, load_environment_option, utc_now

# The clock a default job name is stamped with; tests replace it.
clock: Callable[[], datetime] = utc_now


app = typer.Typer(
    help="Render HyperPod training jobs.",
    add_completion=False,
    no_args_is_help=True,
)


@app.callback()
def _job() -> None:
    """Render HyperPod training jobs (HyperPodPyTorchJob manifests)."""


@app.command("render", cls=OneLineUsageErrors)
def render(
    ctx: typer.Context,
    env: EnvOption = None,
    team: Annotated[
        str | None,
        typer.Option(help=f"Task-governance team; namespace {team_namespace('<team>')}."),
    ] = None,
    instance_group: Annotated[
        str | None, typer.Option(help="HyperPod instance group of the environment.")
    ] = None,
    nodes: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Nodes the job trains on.")
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="Training image, pinned by tag or digest.")
    ] = None,
    priority: Annotated[
        str | None,
        typer.Option(
            help=f"Priority class name without '{PRIORITY_CLASS_SUFFIX}' "
            "(default: the environment's lowest-weight class)."
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(help="Job name (DNS label; default <team>-<preset>-<UTC time>)."),
    ] = None,
    spares: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Spare nodes (default 0).")
    ] = None,
    preset: Annotated[str | None, typer.Option(help="Trainer preset (default 8b).")] = None,
    steps: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Training steps (default: the preset's).")
    ] = None,
    min_tokens_per_s: Annotated[
        str | None,
        typer.Option(metavar="INTEGER", help="Flag the job SLOW below this throughput."),
    ] = None,
    topology: Annotated[
        str | None,
        typer.Option(
            metavar="MODE:LEVEL",
            help="Placement: required:LEVEL or preferred:LEVEL, LEVEL a node label of "
            f"{' '.join(level.rpartition('/')[2] for level in TOPOLOGY_LEVELS)} (under "
            f"{TOPOLOGY_LEVELS[0].rpartition('/')[0]}/); 'ultraserver' (all in one "
            "UltraServer) or 'none' (default: multi-node EFA jobs prefer one network node, "
            "or one UltraServer).",
        ),
    ] = None,
    elastic: Annotated[
        str | None,
        typer.Option(
            metavar="MIN:MAX",
            help="Elastic job: starts on MIN nodes, the operator resizes it up to MAX among "
            "the sizes the trainer runs (--nodes defaults to MIN).",
        ),
    ] = None,
    parallelism: Annotated[
        str | None,
        typer.Option(
            metavar="fsdp|hsdp",
            help="fsdp: shard over every GPU; hsdp: shard within a node, replicate across "
            "nodes (default for multi-node jobs).",
        ),
    ] = None,
    tp: Annotated[
        str | None,
        typer.Option(
            metavar="INTEGER", help="Tensor-parallel degree; divides a node's GPUs (default 1)."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write to FILE, not stdout."),
    ] = None,
) -> None:
    """Print a HyperPodPyTorchJob manifest as YAML for a team's job in an environment."""
    if nodes is None and elastic is not None:
        # An elastic job starts at its minimum; a range that is none is --elastic's problem.
        start = elastic.partition(":")[0].strip()
        nodes = start if start.isdigit() else "1"
    required = {
        "--env": env,
        "--team": team,
        "--instance-group": instance_group,
        "--nodes": nodes,
        "--image": image,
    }
    if env is None or team is None or instance_group is None or nodes is None or image is None:
        missing = [
            f"{option}: missing; pass {option}" for option, v in required.items() if v is None
        ]
        fail(ctx, "; ".join(missing), code=ExitCode.USAGE)
    config = load_environment_option(ctx, env)
    given = {
        "spares": spares,
        "preset": preset,
        "steps": steps,
        "min_tokens_per_s": min_tokens_per_s,
        "topology": topology,
        "elastic": elastic,
        "parallelism": parallelism,
        "tp": tp,
    }
    choices: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    try:
        spec = spec_for_environment(
            config,
            team=team,
            instance_group=instance_group,
            nodes=nodes,
            image=image,
            priority=priority,
            name=name,
            clock=clock,
            **choices,
        )
    except JobRequestError as error:
        fail(ctx, str(error), code=ExitCode.USAGE)
    text = to_yaml(render_job(spec))
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        fail(
            ctx,
            f"--output: cannot write {str(output)!r} ({error.strerror}); pick a writable path",
            code=ExitCode.USAGE,
        )
