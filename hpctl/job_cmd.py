"""`hpctl job ...`: render HyperPodPyTorchJob manifests from a few validated options.

Every bad input ends the same way: one line on stderr, `hpctl job render: --option: problem;
fix` (several problems joined with "; "), exit code 2, no traceback. Options are read as text
and converted by `JobSpec`, so a wrong number gets the same one-line treatment as any other
invalid value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from config.errors import Location, problem_lines
from config.kubernetes import FSX_CLAIM_NAME, PRIORITY_CLASS_SUFFIX, team_namespace
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.job import JobSpec, render_job, to_yaml

# JobSpec fields that have a CLI option of another name; the rest use --field-name.
_OPTION_FOR_FIELD = {"taints": "--toleration"}
_TOLERATION = re.compile(r"^(?P<key>[^=:]+)(?:=(?P<value>[^:]*))?:(?P<effect>[^:]+)$")


app = typer.Typer(
    help="Render HyperPod training jobs.",
    add_completion=False,
    no_args_is_help=True,
)


@app.callback()
def _job() -> None:
    """Render HyperPod training jobs (HyperPodPyTorchJob manifests)."""


def option_for(loc: Location) -> str:
    """The CLI option a JobSpec error location stands for: `--nodes`, `--toleration #2`."""
    if not loc:
        return ""
    option = _OPTION_FOR_FIELD.get(str(loc[0]), "--" + str(loc[0]).replace("_", "-"))
    if len(loc) > 1 and isinstance(loc[1], int):
        option += f" #{loc[1] + 1}"
    return option


def format_errors(error: ValidationError) -> str:
    """All problems on one line: `--option: message; --option: message`."""
    return "; ".join(problem_lines(error, where=option_for, missing="missing; pass {where}"))


def _parse_toleration(ctx: typer.Context, text: str, position: int) -> dict[str, Any]:
    match = _TOLERATION.fullmatch(text)
    if not match:
        fail(
            ctx,
            f"--toleration #{position}: {text!r} is not KEY[=VALUE]:EFFECT; "
            "e.g. nvidia.com/gpu:NoSchedule or dedicated=training:NoSchedule",
            code=ExitCode.USAGE,
        )
    return {key: value for key, value in match.groupdict().items() if value is not None}


@app.command("render", cls=OneLineUsageErrors)
def render(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option(help="Job name (DNS label).")] = None,
    team: Annotated[
        str | None,
        typer.Option(help=f"Task-governance team; namespace {team_namespace('<team>')}."),
    ] = None,
    priority: Annotated[
        str | None,
        typer.Option(
            help=f"Priority class name without '{PRIORITY_CLASS_SUFFIX}' (e.g. training)."
        ),
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="Training image, pinned by tag or digest.")
    ] = None,
    instance_type: Annotated[str | None, typer.Option(help="e.g. ml.p5.48xlarge.")] = None,
    instance_group: Annotated[
        str | None, typer.Option(help="HyperPod instance group name.")
    ] = None,
    nodes: Annotated[str | None, typer.Option(metavar="INTEGER", help="Nodes (default 1).")] = None,
    spares: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Spare nodes (default 0).")
    ] = None,
    preset: Annotated[str | None, typer.Option(help="Trainer preset (default 8b).")] = None,
    steps: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Training steps (default: the preset's).")
    ] = None,
    fsx_claim: Annotated[
        str | None, typer.Option(help=f"FSx PersistentVolumeClaim (default {FSX_CLAIM_NAME}).")
    ] = None,
    min_tokens_per_s: Annotated[
        str | None,
        typer.Option(metavar="INTEGER", help="Flag the job SLOW below this throughput."),
    ] = None,
    managed_fast_tier: Annotated[
        bool,
        typer.Option(
            help="Fast checkpoints in HyperPod managed tiered storage (cluster must enable it)."
        ),
    ] = False,
    toleration: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY[=VALUE]:EFFECT", help="Tolerate a node taint (repeatable)."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write to FILE, not stdout."),
    ] = None,
) -> None:
    """Print a HyperPodPyTorchJob manifest as YAML."""
    given = {
        "name": name,
        "team": team,
        "priority": priority,
        "image": image,
        "instance_type": instance_type,
        "instance_group": instance_group,
        "nodes": nodes,
        "spares": spares,
        "preset": preset,
        "steps": steps,
        "fsx_claim": fsx_claim,
        "min_tokens_per_s": min_tokens_per_s,
    }
    fields: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    fields["managed_fast_tier"] = managed_fast_tier
    if toleration:
        fields["taints"] = [_parse_toleration(ctx, text, i) for i, text in enumerate(toleration, 1)]
    try:
        spec = JobSpec.model_validate(fields)
    except ValidationError as error:
        fail(ctx, format_errors(error), code=ExitCode.USAGE)
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
