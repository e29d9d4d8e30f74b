"""The options of `hpctl job`, each defined once: every command that takes one takes this
definition (its name, help and metavar), and `submit` takes all of `render`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from config.kubernetes import PRIORITY_CLASS_SUFFIX, TOPOLOGY_LEVELS, team_namespace

TeamOption = Annotated[
    str | None,
    typer.Option(help=f"Task-governance team; namespace {team_namespace('<team>')}."),
]
NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The job's name.")]
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Kubeconfig for the environment's cluster (default ~/.kube/hpctl-<env>.yaml, "
        "what hpctl kubeconfig writes).",
    ),
]
GroupOption = Annotated[
    str | None, typer.Option(help="HyperPod instance group of the environment.")
]
NodesOption = Annotated[
    str | None, typer.Option(metavar="INTEGER", help="Nodes the job trains on.")
]
ImageOption = Annotated[str | None, typer.Option(help="Training image, pinned by tag or digest.")]
PriorityOption = Annotated[
    str | None,
    typer.Option(
        help=f"Priority class name without '{PRIORITY_CLASS_SUFFIX}' "
        "(default: the environment's lowest-weight class)."
    ),
]
JobNameOption = Annotated[
    str | None,
    typer.Option(help="Job name (DNS label; default <team>-<preset>-<UTC time>)."),
]
SparesOption = Annotated[
    str | None, typer.Option(metavar="INTEGER", help="Spare nodes (default 0).")
]
PresetOption = Annotated[str | None, typer.Option(help="Trainer preset (default 8b).")]
StepsOption = Annotated[
    str | None, typer.Option(metavar="INTEGER", help="Training steps (default: the preset's).")
]
MinTokensOption = Annotated[
    str | None,
    typer.Option(metavar="INTEGER", help="Flag the job SLOW below this throughput."),
]
TopologyOption = Annotated[
    str | None,
    typer.Option(
        metavar="MODE:LEVEL",
        help="Placement: required:LEVEL or preferred:LEVEL, LEVEL a node label of "
        f"{' '.join(level.rpartition('/')[2] for level in TOPOLOGY_LEVELS)} (under "
        f"{TOPOLOGY_LEVELS[0].rpartition('/')[0]}/); 'ultraserver' (all in one "
        "UltraServer) or 'none' (default: multi-node EFA jobs prefer one network node, "
        "or one UltraServer).",
    ),
]
ElasticOption = Annotated[
    str | None,
    typer.Option(
        metavar="MIN:MAX",
        help="Elastic job: starts on MIN nodes, the operator resizes it up to MAX among "
        "the sizes the trainer runs (--nodes defaults to MIN).",
    ),
]
ParallelismOption = Annotated[
    str | None,
    typer.Option(
        metavar="fsdp|hsdp",
        help="fsdp: shard over every GPU; hsdp: shard within a node, replicate across "
        "nodes (default for multi-node jobs).",
    ),
]
TpOption = Annotated[
    str | None,
    typer.Option(
        metavar="INTEGER", help="Tensor-parallel degree; divides a node's GPUs (default 1)."
    ),
]
ModuleOption = Annotated[
    str | None,
    typer.Option(
        help="Run this Python module on every rank instead of the project's trainer "
        "(e.g. torchtitan.train); its arguments follow --."
    ),
]
CommandArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[-- COMMAND...]",
        help="Arguments of --module, or without it a program and its arguments run on every rank.",
        show_default=False,
    ),
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write to FILE, not stdout."),
]
