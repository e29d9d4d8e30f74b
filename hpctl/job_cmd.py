"""`hpctl job ...`: render HyperPodPyTorchJob manifests for an environment from a few options,
and submit, list, describe, follow and cancel jobs on its cluster.

The environment's config (`--env`, config/<env>.yaml) decides everything that is a fact of
the cluster: the instance group's type and taints, the team's queue, priority classes and
quota, the service account, the FSx claim and whether checkpoints use managed tiered storage.
The user picks the team, the group, the node count, the image and the run's own settings.

Every bad input ends the same way: one line on stderr, `hpctl job render: --option: problem;
fix` (several problems joined with "; "), exit code 2, no traceback. Options are read as text
and converted by `JobSpec`, so a wrong number gets the same one-line treatment as any other
invalid value.

`render` runs the project's trainer, or a team's own code: `--module MODULE [-- ARGS...]` or
`-- PROGRAM ARGS...`, with the same platform wiring and job environment. The lifecycle
commands talk to the cluster through the kubeconfig `hpctl kubeconfig --env` writes
(`hpctl.job.kube`); an API failure is one line naming the object and the fix (exit 1).
`describe` links the per-job Grafana dashboard where the environment has Grafana, and `logs`
reads a finished (or deleted) job's log from CloudWatch Logs; both ask AWS with credentials
of the environment's account (`hpctl.aws`), and only there.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer
import yaml

from config.container_logs import container_log_group
from config.kubernetes import (
    KUEUE_JOB_UID_LABEL,
    OPERATOR_JOB_LABEL,
    PRIORITY_CLASS_SUFFIX,
    QUEUE_LABEL,
    TEAM_NAMESPACE_PREFIX,
    TOPOLOGY_LEVELS,
    team_namespace,
)
from config.schema import EnvironmentConfig
from config.schema.observability import GRAFANA_ENDPOINT_OUTPUT
from hpctl import aws
from hpctl.container_logs import LogLine, read_job_logs
from hpctl.errors import ExitCode, OneLineUsageErrors, fail
from hpctl.job import lifecycle
from hpctl.job.environment import JobRequestError, entry_point_for, spec_for_environment
from hpctl.job.kube import Cluster, KubeError, NotFoundError, connect
from hpctl.job.render import API_VERSION, KIND, render_job, to_yaml
from hpctl.job.spec import JobSpec
from hpctl.kubeconfig_cmd import default_output as default_kubeconfig
from hpctl.options import (
    EnvOption,
    JsonListOption,
    JsonObjectOption,
    load_environment_option,
    required_environment,
    utc_now,
)
from platform_constructs.observability import JOB_DASHBOARD_UID, job_dashboard_url

# The clock a default job name is stamped with; tests replace it.
clock: Callable[[], datetime] = utc_now


app = typer.Typer(
    help="Render, submit and follow HyperPod training jobs.",
    add_completion=False,
    no_args_is_help=True,
)


@app.callback()
def _job() -> None:
    """Render, submit and follow HyperPod training jobs (HyperPodPyTorchJob)."""


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
    module: Annotated[
        str | None,
        typer.Option(
            help="Run this Python module on every rank instead of the project's trainer "
            "(e.g. torchtitan.train); its arguments follow --."
        ),
    ] = None,
    command: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[-- COMMAND...]",
            help="Arguments of --module, or without it a program and its arguments run on "
            "every rank.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write to FILE, not stdout."),
    ] = None,
) -> None:
    """Print a HyperPodPyTorchJob manifest as YAML for a team's job in an environment."""
    # Every option but --output, by its parameter name (submit takes the same options).
    options = {key: value for key, value in locals().items() if key not in ("ctx", "output")}
    _write(ctx, to_yaml(render_job(job_spec(ctx, **options))), output)


def job_spec(
    ctx: typer.Context,
    *,
    env: str | None,
    team: str | None,
    instance_group: str | None,
    nodes: str | None,
    image: str | None,
    priority: str | None,
    name: str | None,
    module: str | None,
    command: list[str] | None,
    **given: str | None,
) -> JobSpec:
    """The JobSpec `render`'s options describe; any other option is a JobSpec field of the
    same name (spares, preset, steps, ...), passed on when given."""
    elastic = given.get("elastic")
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
    choices: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    try:
        entry_point = entry_point_for(module, command or [])
        if entry_point is not None:
            choices["entry_point"] = entry_point
        return spec_for_environment(
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


def _write(ctx: typer.Context, text: str, output: Path | None) -> None:
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


# ------------------------------------------------------------------ the job lifecycle

KubeconfigOption = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        metavar="FILE",
        help="Kubeconfig for the environment's cluster (default ~/.kube/hpctl-<env>.yaml, "
        "what hpctl kubeconfig writes).",
    ),
]
TeamOption = Annotated[
    str | None,
    typer.Option(help=f"Task-governance team; namespace {team_namespace('<team>')}."),
]
NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The job's name.")]
# How long one watch request of `submit --wait` stays open before it is renewed.
WATCH_WINDOW_S = 300


def _with_render_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command` also takes every option of `render` but --output (its own parameters first),
    received through its **options: one definition of each job option for both commands."""
    own = inspect.signature(command, eval_str=True)
    render_hints = get_type_hints(render, include_extras=True)
    added = [
        parameter.replace(annotation=render_hints[name])
        for name, parameter in inspect.signature(render).parameters.items()
        if name not in ("ctx", "output")
    ]
    kept = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = own.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    return command


def _connect(
    ctx: typer.Context, env: str | None, kubeconfig: Path | None
) -> tuple[EnvironmentConfig, Cluster]:
    config = required_environment(ctx, env)
    path = (kubeconfig or default_kubeconfig(config.environment)).expanduser()
    try:
        return config, connect(config, path)
    except KubeError as error:
        fail(ctx, str(error), code=ExitCode.USAGE)


def _teams(config: EnvironmentConfig) -> list[str]:
    return sorted(team.name for team in config.governance.teams) if config.governance else []


def _team(ctx: typer.Context, config: EnvironmentConfig, team: str | None) -> str:
    """The --team of a command that works in one team's namespace."""
    known = _teams(config)
    if team is None:
        fail(ctx, f"--team: missing; pass --team (one of {', '.join(known)})", code=ExitCode.USAGE)
    if team not in known:
        fix = f"use one of {', '.join(known)}" if known else "the environment has no teams"
        fail(
            ctx,
            f"--team: unknown team {team!r} in {config.environment}; {fix}",
            code=ExitCode.USAGE,
        )
    return team


def _api(ctx: typer.Context, call: Callable[[], Any]) -> Any:
    """`call()`, with an API failure as the command's one line and exit 1."""
    try:
        return call()
    except KubeError as error:
        fail(ctx, str(error), code=ExitCode.FAILED)


def _manifest_file(
    ctx: typer.Context, config: EnvironmentConfig, file: Path
) -> tuple[dict[str, Any], str]:
    """The HyperPodPyTorchJob in `file` ("-": stdin) and its team (from its namespace)."""
    try:
        text = typer.get_text_stream("stdin").read() if str(file) == "-" else file.read_text()
        manifest = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as error:
        fail(
            ctx, f"--file: cannot read {file} ({error}); pass a YAML manifest", code=ExitCode.USAGE
        )
    kind = (
        (manifest.get("apiVersion"), manifest.get("kind")) if isinstance(manifest, dict) else None
    )
    if kind != (API_VERSION, KIND):
        fail(
            ctx,
            f"--file: {file} is not a {KIND} ({API_VERSION}); write one with hpctl job render",
            code=ExitCode.USAGE,
        )
    meta = manifest.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    team = str(namespace or "").removeprefix(TEAM_NAMESPACE_PREFIX)
    if (
        not name
        or not str(namespace or "").startswith(TEAM_NAMESPACE_PREFIX)
        or team not in _teams(config)
    ):
        fail(
            ctx,
            f"--file: metadata.namespace {namespace!r} is not a team namespace of "
            f"{config.environment} ({', '.join(team_namespace(t) for t in _teams(config))}) or "
            "metadata.name is missing; render the job for a team",
            code=ExitCode.USAGE,
        )
    return manifest, team


def _position(cluster: Cluster, job: dict[str, Any], workload: dict[str, Any] | None) -> int | None:
    """The job's 0-based place in its LocalQueue while Kueue holds it back, if known."""
    if workload is None or lifecycle.admitted(workload):
        return None
    meta = job.get("metadata") or {}
    queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
    if not queue:
        return None
    positions = cluster.pending_positions(meta["namespace"], queue)
    return positions.get((workload.get("metadata") or {}).get("name", ""))


def _wait_for_admission(
    ctx: typer.Context, cluster: Cluster, job: dict[str, Any], team: str
) -> dict[str, Any]:
    """Watch the job's Workload until Kueue admits it, printing a progress line on stderr
    each time what it says changes; the admitted Workload."""
    meta = job["metadata"]
    selector = f"{KUEUE_JOB_UID_LABEL}={meta['uid']}"
    last = ""

    def report(workload: dict[str, Any] | None) -> None:
        nonlocal last
        line = lifecycle.progress_line(meta["name"], workload, _position(cluster, job, workload))
        if line != last:
            typer.echo(line, err=True)
            last = line

    def latest() -> dict[str, Any] | None:
        found = _api(ctx, lambda: cluster.workloads(meta["namespace"], team, selector))
        return found[0] if found else None

    current = latest()
    report(current)
    while current is None or not lifecycle.admitted(current):
        try:
            for kind, workload in cluster.watch_workloads(
                meta["namespace"], team, selector, WATCH_WINDOW_S
            ):
                current = None if kind == "DELETED" else workload
                report(current)
                if lifecycle.admitted(current):
                    break
        except KubeError as error:
            fail(ctx, str(error), code=ExitCode.FAILED)
        if not lifecycle.admitted(current):
            # The watch window ended: go on from what the server has now.
            current = latest()
            report(current)
    return current


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


@app.command("submit", cls=OneLineUsageErrors)
@_with_render_options
def submit(
    ctx: typer.Context,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            metavar="FILE",
            help="Create the job in FILE (- for stdin) as written, instead of rendering one.",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until Kueue admits the job, printing progress.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
    as_json: JsonObjectOption = False,
    **options: Any,
) -> None:
    """Render a job (the options of hpctl job render) or read one (-f) and create it."""
    if file is not None:
        given = sorted(
            f"--{key.replace('_', '-')}"
            for key, value in options.items()
            if value is not None and key != "env"
        )
        if given:
            fail(
                ctx,
                f"--file: a file is submitted as written; drop {', '.join(given)} or --file",
                code=ExitCode.USAGE,
            )
        config = required_environment(ctx, options["env"])
        manifest, team = _manifest_file(ctx, config, file)
    else:
        spec = job_spec(ctx, **options)
        manifest, team = render_job(spec), spec.team
    _, cluster = _connect(ctx, options["env"], kubeconfig)
    created = _api(ctx, lambda: cluster.create_job(manifest, team))
    meta = created["metadata"]
    scope = f"--env {options['env']} --team {team}"
    if not as_json:
        typer.echo(f"Created {KIND} {meta['namespace']}/{meta['name']} (uid {meta.get('uid')}).")
        typer.echo(f"  hpctl job describe {meta['name']} {scope}")
        typer.echo(f"  hpctl job logs {meta['name']} {scope} --follow")
    workload = _wait_for_admission(ctx, cluster, created, team) if wait else None
    if as_json:
        _echo_json(
            {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "admission": lifecycle.admission(workload, None) if wait else None,
            }
        )
        return


def _rows(cluster: Cluster, namespace: str, team: str, now: datetime) -> list[lifecycle.JobRow]:
    jobs = cluster.list_jobs(namespace, team)
    if not jobs:
        return []
    workloads = cluster.workloads(namespace, team)
    pods = cluster.pods(namespace, team, OPERATOR_JOB_LABEL)
    rows = []
    for job in jobs:
        name = job["metadata"]["name"]
        workload = lifecycle.workload_of(job, workloads)
        own = [
            p for p in pods if (p["metadata"].get("labels") or {}).get(OPERATOR_JOB_LABEL) == name
        ]
        rows.append(lifecycle.job_row(job, workload, own, _position(cluster, job, workload), now))
    return rows


@app.command("list", cls=OneLineUsageErrors)
def list_jobs(
    ctx: typer.Context,
    env: EnvOption = None,
    team: Annotated[
        str | None, typer.Option(help="Only this team's jobs (default: every team's).")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    as_json: JsonListOption = False,
) -> None:
    """A team's jobs (or every team's) with state, nodes, restarts, admission and age."""
    config, cluster = _connect(ctx, env, kubeconfig)
    teams = [_team(ctx, config, team)] if team is not None else _teams(config)
    now = clock()
    rows: list[lifecycle.JobRow] = []
    for name in teams:
        rows += _api(ctx, functools.partial(_rows, cluster, team_namespace(name), name, now))
    if as_json:
        _echo_json([row.as_json() for row in rows])
        return
    if not rows:
        typer.echo(f"No jobs for {', '.join(teams) or 'any team'} in {config.environment}.")
        return
    columns = ("name", "namespace", "state", "nodes", "restarts", "admission", "age")
    table = [[str(getattr(row, c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    for line in [[c.upper() for c in columns], *table]:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _job_objects(
    ctx: typer.Context, cluster: Cluster, namespace: str, name: str, team: str
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """The job, its Workload (if Kueue made one) and its pods."""

    def fetch() -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
        job = cluster.get_job(namespace, name, team)
        pods = cluster.pods(namespace, team, f"{OPERATOR_JOB_LABEL}={name}")
        return job, _workload(cluster, job, team), pods

    result: tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]] = _api(ctx, fetch)
    return result


def _workload(cluster: Cluster, job: dict[str, Any], team: str) -> dict[str, Any] | None:
    """The job's Workload, found by the job-uid label Kueue puts on it."""
    meta = job["metadata"]
    selector = f"{KUEUE_JOB_UID_LABEL}={meta['uid']}"
    return lifecycle.workload_of(job, cluster.workloads(meta["namespace"], team, selector))


def _dashboard(config: EnvironmentConfig, job: dict[str, Any]) -> dict[str, Any]:
    """The job's per-job Grafana dashboard: its URL, from the job's creation time, on the
    environment's Grafana workspace (the observability stack's output, read with credentials
    of the environment's account), or why there is none. AWS is only asked where the
    environment has a workspace, and no failure there fails the command."""
    meta = job["metadata"]
    link: dict[str, Any] = {"uid": JOB_DASHBOARD_UID, "url": None, "unavailable": None}
    if config.observability is None or not config.observability.grafana:
        link["unavailable"] = (
            f"{config.environment} has no Grafana workspace (observability.grafana); open "
            f"dashboard {JOB_DASHBOARD_UID} on a Grafana that reads its Prometheus workspace"
        )
        return link
    stack = config.names.stack("observability")
    try:
        endpoint = aws.stack_output(aws.resolve_environment(config), stack, GRAFANA_ENDPOINT_OUTPUT)
    except aws.CredentialsError as problem:
        link["unavailable"] = problem.line
        return link
    except aws.AwsCallError as failure:
        link["unavailable"] = f"cannot read stack {stack} ({failure})"
        return link
    if endpoint is None:
        link["unavailable"] = (
            f"stack {stack} has no {GRAFANA_ENDPOINT_OUTPUT} output (deploy the observability "
            "stack)"
        )
        return link
    link["url"] = job_dashboard_url(
        endpoint,
        namespace=meta["namespace"],
        job=meta["name"],
        start=lifecycle.parse_time(meta.get("creationTimestamp")),
    )
    return link


@app.command("describe", cls=OneLineUsageErrors)
def describe(
    ctx: typer.Context,
    name: NameArgument,
    env: EnvOption = None,
    team: TeamOption = None,
    kubeconfig: KubeconfigOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """A job's conditions, restarts, Kueue admission and preemption, pods, nodes and events."""
    config, cluster = _connect(ctx, env, kubeconfig)
    team = _team(ctx, config, team)
    namespace = team_namespace(team)
    job, workload, pods = _job_objects(ctx, cluster, namespace, name, team)
    uids = [job["metadata"]["uid"]] + ([workload["metadata"]["uid"]] if workload else [])
    events = [
        e
        for uid in uids
        for e in _api(ctx, functools.partial(cluster.events, namespace, team, uid))
    ]
    position = _position(cluster, job, workload)
    report = lifecycle.description(job, workload, pods, events, position, clock())
    report["dashboard"] = _dashboard(config, job)
    if as_json:
        _echo_json(report)
        return
    for label, key in (
        ("Name", "name"),
        ("Namespace", "namespace"),
        ("State", "state"),
        ("Nodes", "nodes"),
        ("Restarts", "restarts"),
        ("Queue", "queue"),
        ("Admission", "admission"),
        ("Age", "age"),
        ("Started", "started"),
        ("Completed", "completed"),
    ):
        typer.echo(f"{label + ':':<11}{report[key] if report[key] is not None else '-'}")
    dashboard = report["dashboard"]
    link = dashboard["url"] or f"unavailable ({dashboard['unavailable']})"
    typer.echo(f"{'Dashboard:':<11}{link}")
    if report["workload"] and report["workload"]["waiting"]:
        typer.echo(f"{'Waiting:':<11}{report['workload']['waiting']}")
    _section(
        "Conditions",
        [
            f"{c['type']}={c['status']} {c['since'] or ''}"
            + (f" ({c['reason']}: {c['message']})" if c.get("message") else "")
            for c in report["conditions"]
        ],
    )
    _section(
        "Pods",
        [
            f"{pod['name']}  {pod['phase'] or '-'}  node={pod['node'] or '-'}  restarts={pod['restarts']}"
            for pod in report["pods"]
        ],
    )
    _section(
        "Events",
        [
            f"{e['time']} {e['object']} {e['type']} {e['reason']}: {e['message']}"
            + (f" (x{e['count']})" if e["count"] > 1 else "")
            for e in report["events"]
        ],
    )


def _section(heading: str, lines: list[str]) -> None:
    typer.echo(f"{heading}:")
    for line in lines or ["none"]:
        typer.echo(f"  {line.rstrip()}")


def _rank_pod(
    ctx: typer.Context, pods: list[dict[str, Any]], name: str, rank: int
) -> dict[str, Any]:
    """The pod of node rank `rank`: the operator names a job's pods <job>-pod-<index> (the
    HyperPod CLI's documentation, hyp get-logs --pod-name <job>-pod-0)."""
    wanted = f"{name}-pod-{rank}"
    for pod in pods:
        if pod["metadata"]["name"] == wanted:
            return pod
    have = ", ".join(sorted(p["metadata"]["name"] for p in pods)) or "none yet"
    fail(
        ctx,
        f"--rank: job {name} has no pod {wanted} (pods: {have}); pick a rank below its node "
        "count, or wait until Kueue admits it (hpctl job describe)",
        code=ExitCode.FAILED,
    )


# How far back `logs --archive` reads a job whose object is gone (its creation time with it).
ARCHIVE_DEFAULT_HOURS = 24


@app.command("logs", cls=OneLineUsageErrors)
def logs(
    ctx: typer.Context,
    name: NameArgument,
    env: EnvOption = None,
    team: TeamOption = None,
    rank: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Node rank whose pod to read (default 0: global rank 0, which prints the "
            "trainer's step lines).",
        ),
    ] = None,
    all_ranks: Annotated[
        bool,
        typer.Option(
            "--all-ranks", help="Every rank's archived log, in time order (with --archive)."
        ),
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the container ends.")
    ] = False,
    archive: Annotated[
        bool,
        typer.Option(
            "--archive",
            help="Read the log from CloudWatch Logs, also of a job that was deleted "
            "(automatic for a finished job without pods).",
        ),
    ] = False,
    since: Annotated[
        int | None,
        typer.Option(
            metavar="HOURS",
            min=1,
            help="Archived lines from this many hours ago (default: since the job was "
            f"created; {ARCHIVE_DEFAULT_HOURS} for a deleted job).",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per line.")
    ] = False,
) -> None:
    """The log of a job's pod (its first container), by node rank: from the pod while it
    exists, from CloudWatch Logs once the job has finished or with --archive."""
    if all_ranks and rank is not None:
        fail(ctx, "--all-ranks: reads every rank; drop --rank or --all-ranks", code=ExitCode.USAGE)
    if archive and follow:
        fail(
            ctx,
            "--follow: an archived log is read once; drop --follow or --archive",
            code=ExitCode.USAGE,
        )
    config, cluster = _connect(ctx, env, kubeconfig)
    team = _team(ctx, config, team)
    namespace = team_namespace(team)
    archived = functools.partial(
        _archived_logs, ctx, config, namespace, name, rank or 0, all_ranks, since, as_json
    )
    if archive:
        archived(_existing_job(ctx, cluster, namespace, name, team))
        return
    pods = _api(ctx, lambda: cluster.pods(namespace, team, f"{OPERATOR_JOB_LABEL}={name}"))
    if not pods:
        # Tell a finished job (its log is archived) from a queued one and from none at all.
        job = _existing_job(ctx, cluster, namespace, name, team)
        if job is None:
            fail(
                ctx,
                f"{KIND} {namespace}/{name}: not found; list the team's jobs with hpctl job "
                f"list --env {config.environment} --team {team}, or read a deleted job's log "
                "with --archive",
                code=ExitCode.FAILED,
            )
        workload = _api(ctx, lambda: _workload(cluster, job, team))
        if lifecycle.job_state(job, workload) in lifecycle.TERMINAL:
            archived(job)
            return
        fail(
            ctx,
            f"job {name} has no pods yet ({_held_back(job, workload)}); see why with "
            f"hpctl job describe {name} --env {config.environment} --team {team}",
            code=ExitCode.FAILED,
        )
    if all_ranks or since is not None:
        option = "--all-ranks" if all_ranks else "--since"
        fail(
            ctx,
            f"{option}: reads the archived log and job {name} still has pods; add --archive",
            code=ExitCode.USAGE,
        )
    pod = _rank_pod(ctx, pods, name, rank or 0)
    pod_name = pod["metadata"]["name"]
    container = pod["spec"]["containers"][0]["name"]
    try:
        for line in cluster.log_lines(namespace, pod_name, container, follow=follow, team=team):
            _print_line(pod_name, rank or 0, line, as_json=as_json)
    except KubeError as error:
        fail(ctx, str(error), code=ExitCode.FAILED)


def _print_line(
    pod: str, rank: int, line: str, *, as_json: bool, time: datetime | None = None
) -> None:
    """One log line as `logs` prints it: the text, or with --json one object (the time
    only where CloudWatch recorded it)."""
    if not as_json:
        typer.echo(line)
        return
    record: dict[str, Any] = {"pod": pod, "rank": rank, "line": line}
    if time is not None:
        record["time"] = time.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    typer.echo(json.dumps(record))


def _container(job: dict[str, Any]) -> str | None:
    """The name of the first container of the job's pods, as its manifest has it."""
    specs = (job.get("spec") or {}).get("replicaSpecs") or [{}]
    pod = (specs[0].get("template") or {}).get("spec") or {}
    return next((str(c["name"]) for c in pod.get("containers") or [] if "name" in c), None)


def _existing_job(
    ctx: typer.Context, cluster: Cluster, namespace: str, name: str, team: str
) -> dict[str, Any] | None:
    """The job, or None where it does not exist (any more)."""
    try:
        return cluster.get_job(namespace, name, team)
    except NotFoundError:
        return None
    except KubeError as error:
        fail(ctx, str(error), code=ExitCode.FAILED)


def _archived_logs(
    ctx: typer.Context,
    config: EnvironmentConfig,
    namespace: str,
    name: str,
    rank: int,
    all_ranks: bool,
    since_hours: int | None,
    as_json: bool,
    job: dict[str, Any] | None,
) -> None:
    """Print what the job's rank pod (or every rank's, in time order) wrote, from the
    cluster's application log group (hpctl.container_logs), since the job was created or
    `since_hours` ago, with credentials of the environment's account."""
    created = lifecycle.parse_time((job or {}).get("metadata", {}).get("creationTimestamp"))
    if since_hours is None and created is not None:
        since = created
    else:
        since = clock() - timedelta(hours=since_hours or ARCHIVE_DEFAULT_HOURS)
    # The operator names the pods <job>-pod-<rank> (see _rank_pod); streams of another job
    # whose name starts with this one's are left out by that name.
    rank_pod = re.compile(rf"{re.escape(name)}-pod-(\d+)")
    pods = None if all_ranks else [f"{name}-pod-{rank}"]
    # The job's container (a deleted job's is not known: every container of the pod).
    container = _container(job) if job is not None else None
    connection = aws.connect_environment(ctx, config)
    group = container_log_group(config.names.eks_cluster)
    try:
        lines: list[LogLine] = read_job_logs(
            connection.client("logs"),
            eks_cluster=config.names.eks_cluster,
            namespace=namespace,
            job=name,
            since=since,
            pods=pods,
            container=container,
        )
    except aws.AwsCallError as failure:
        grant = f"; grant {failure.action}" if failure.code in aws.ACCESS_DENIED_CODES else ""
        fail(
            ctx,
            f"cannot read the archived log of job {name} from {group}: {failure}{grant}",
            code=ExitCode.FAILED,
        )
    ranked = [(line, rank_pod.fullmatch(line.pod)) for line in lines]
    found = [(line, int(match[1])) for line, match in ranked if match is not None]
    if not found:
        wanted = f"pods {name}-pod-<rank>" if all_ranks else f"pod {name}-pod-{rank}"
        fail(
            ctx,
            f"job {name}: no archived log of {wanted} in {group} since "
            f"{since.isoformat(timespec='seconds')}; widen --since, or check the job's name "
            "and --rank",
            code=ExitCode.FAILED,
        )
    for line, line_rank in found:
        text = f"[pod/{line.pod}/{line.container}] {line.text}" if all_ranks else line.text
        _print_line(
            line.pod, line_rank, line.text if as_json else text, as_json=as_json, time=line.time
        )


def _held_back(job: dict[str, Any], workload: dict[str, Any] | None) -> str:
    return f"{lifecycle.job_state(job, workload)}, {lifecycle.admission(workload, None)}"


@app.command("cancel", cls=OneLineUsageErrors)
def cancel(
    ctx: typer.Context,
    name: NameArgument,
    env: EnvOption = None,
    team: TeamOption = None,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: the job's pods are stopped.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
    as_json: JsonObjectOption = False,
) -> None:
    """Delete a job: its pods get SIGTERM and their grace period to save (requires --yes)."""
    config, cluster = _connect(ctx, env, kubeconfig)
    team = _team(ctx, config, team)
    namespace = team_namespace(team)
    if not yes:
        fail(
            ctx,
            f"refusing to cancel {KIND} {namespace}/{name} without --yes: its pods stop; "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    _api(ctx, lambda: cluster.delete_job(namespace, name, team))
    if as_json:
        _echo_json({"name": name, "namespace": namespace, "cancelled": True})
        return
    typer.echo(
        f"Cancelled {KIND} {namespace}/{name}: its pods stop after their grace period; "
        "hpctl job list shows it Terminating until they are gone."
    )
