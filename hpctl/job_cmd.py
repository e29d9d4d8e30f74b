"""`hpctl job ...`: render HyperPodPyTorchJob manifests from a few validated options.

Every bad input ends the same way: one line on stderr naming the option and the fix, exit
code 2, no traceback. Options are read as text and converted by `JobSpec`, so a wrong number
gets the same one-line treatment as any other invalid value.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from typer.core import TyperCommand

from training.job import JobSpec, render_job, to_yaml

USAGE_EXIT_CODE = 2

# JobSpec fields that have a CLI option of another name; the rest use --field-name.
_OPTION_FOR_FIELD = {"taints": "--toleration"}
_TOLERATION = re.compile(r"^(?P<key>[^=:]+)(?:=(?P<value>[^:]*))?:(?P<effect>[^:]+)$")


class _OneLineUsageErrors(TyperCommand):
    """Reports parse errors (unknown option, missing value) as one line instead of a usage box."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except typer.TyperException as error:
            _fail(" ".join(error.format_message().split()))


app = typer.Typer(
    help="Render HyperPod training jobs.",
    add_completion=False,
    no_args_is_help=True,
)


@app.callback()
def _job() -> None:
    """Render HyperPod training jobs (HyperPodPyTorchJob manifests)."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(USAGE_EXIT_CODE)


def _option(field: str) -> str:
    return _OPTION_FOR_FIELD.get(field, "--" + field.replace("_", "-"))


def _format_errors(error: ValidationError) -> str:
    """All problems on one line: `--option: message; --option: message`."""
    parts = []
    for item in error.errors(include_url=False):
        loc = item["loc"]
        where = _option(str(loc[0])) if loc else "(input)"
        if len(loc) > 1 and isinstance(loc[1], int):
            where += f" #{loc[1] + 1}"
        kind, ctx = item["type"], item.get("ctx") or {}
        if kind == "missing":
            message = f"missing; pass {where}"
        elif kind == "extra_forbidden":
            message = "is not a known setting; remove it"
        elif kind == "int_parsing":
            message = f"{item['input']!r} is not a whole number; pass one"
        elif kind == "greater_than_equal":
            message = f"{item['input']} is too small; use {ctx['ge']} or more"
        elif kind == "less_than_equal":
            message = f"{item['input']} is too large; use {ctx['le']} or less"
        else:
            message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def _parse_toleration(text: str, position: int) -> dict[str, Any]:
    match = _TOLERATION.match(text)
    if not match:
        _fail(
            f"--toleration #{position}: {text!r} is not KEY[=VALUE]:EFFECT; "
            "e.g. nvidia.com/gpu:NoSchedule or dedicated=training:NoSchedule"
        )
    return {key: value for key, value in match.groupdict().items() if value is not None}


@app.command("render", cls=_OneLineUsageErrors)
def render(
    name: Annotated[str | None, typer.Option(help="Job name (DNS label).")] = None,
    team: Annotated[
        str | None, typer.Option(help="Task-governance team; namespace hyperpod-ns-<team>.")
    ] = None,
    priority: Annotated[
        str | None, typer.Option(help="Priority class name without '-priority' (e.g. training).")
    ] = None,
    image: Annotated[str | None, typer.Option(help="Training image, pinned by tag or digest.")] = None,
    instance_type: Annotated[str | None, typer.Option(help="e.g. ml.p5.48xlarge.")] = None,
    instance_group: Annotated[str | None, typer.Option(help="HyperPod instance group name.")] = None,
    nodes: Annotated[str | None, typer.Option(metavar="INTEGER", help="Nodes (default 1).")] = None,
    spares: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Spare nodes (default 0).")
    ] = None,
    preset: Annotated[str | None, typer.Option(help="Trainer preset (default 8b).")] = None,
    steps: Annotated[
        str | None, typer.Option(metavar="INTEGER", help="Training steps (default: the preset's).")
    ] = None,
    fsx_claim: Annotated[
        str | None, typer.Option(help="FSx PersistentVolumeClaim (default fsx-claim).")
    ] = None,
    min_tokens_per_s: Annotated[
        str | None,
        typer.Option(metavar="INTEGER", help="Flag the job SLOW below this throughput."),
    ] = None,
    managed_fast_tier: Annotated[
        bool,
        typer.Option(help="Fast checkpoints in HyperPod managed tiered storage (cluster must enable it)."),
    ] = False,
    toleration: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY[=VALUE]:EFFECT", help="Tolerate a node taint (repeatable)."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write to FILE, not stdout.")
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
        fields["taints"] = [_parse_toleration(text, i) for i, text in enumerate(toleration, 1)]
    try:
        spec = JobSpec.model_validate(fields)
    except ValidationError as error:
        _fail(_format_errors(error))
    text = to_yaml(render_job(spec))
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        _fail(f"--output: cannot write {str(output)!r} ({error.strerror}); pick a writable path")
