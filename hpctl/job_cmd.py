"""`hpctl job ...`: render HyperPodPyTorchJob manifests for an environment from a few options,
and submit, list, describe, follow and cancel jobs on its cluster.

Each command holds its options and its printing only; what it does is the job API
(`hpctl.job.api`, documented in docs/python-api.md), which a notebook calls the same way.
The environment's config (`--env`, config/<env>.yaml) decides everything that is a fact of
the cluster: the instance group's type and taints, the team's queue, priority classes and
quota, the service account, the FSx claim and whether checkpoints use managed tiered storage.
The user picks the team, the group, the node count, the image and the run's own settings.

Every bad input ends the same way: one line on stderr, `hpctl job render: --option: problem;
fix` (several problems joined with "; "), exit code 2, no traceback. Options are read as text
and converted by `JobSpec`, so a wrong number gets the same one-line treatment as any other
invalid value. A call that fails (the API server, CloudWatch Logs) is one line naming the
object and the fix, exit code 1.

`render` runs the project's trainer, or a team's own code: `--module MODULE [-- ARGS...]` or
`-- PROGRAM ARGS...`, with the same platform wiring and job environment. The lifecycle
commands talk to the cluster through the kubeconfig `hpctl kubeconfig --env` writes.
`describe` links the per-job Grafana dashboard where the environment has Grafana, and `logs`
reads a finished (or deleted) job's log from CloudWatch Logs; both ask AWS with credentials
of the environment's account, and only there.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

from config.kubernetes import team_namespace
from config.loader import LoadedEnvironment
from hpctl import aws
from hpctl.errors import ExitCode, OneLineUsageErrors, fail, report
from hpctl.job import api, lifecycle
from hpctl.job.api import JobOperationError, JobRequestError, LogRecord
from hpctl.job.cli_options import (
    CommandArgument,
    ElasticOption,
    GroupOption,
    ImageOption,
    JobNameOption,
    KubeconfigOption,
    MinTokensOption,
    ModuleOption,
    NameArgument,
    NodesOption,
    OutputOption,
    ParallelismOption,
    PresetOption,
    PriorityOption,
    SparesOption,
    StepsOption,
    TeamOption,
    TopologyOption,
    TpOption,
)
from hpctl.job.render import KIND, to_yaml
from hpctl.job.spec import JobSpec
from hpctl.options import (
    DurationError,
    EnvOption,
    JsonListOption,
    JsonObjectOption,
    bare_number_deprecation,
    loaded_environment_option,
    parse_duration,
    required_env,
)

app = typer.Typer(
    help="Render, submit and follow HyperPod training jobs.",
    add_completion=False,
    no_args_is_help=True,
)


@app.callback()
def _job() -> None:
    """Render, submit and follow HyperPod training jobs (HyperPodPyTorchJob)."""


@contextmanager
def _reported(ctx: typer.Context) -> Iterator[None]:
    """What the job API raises inside, as the command's one line: bad input exit 2, a call
    that failed exit 1, credentials as `hpctl.aws` grades them."""
    try:
        yield
    except JobRequestError as error:
        fail(ctx, str(error), code=ExitCode.USAGE)
    except JobOperationError as error:
        fail(ctx, str(error), code=ExitCode.FAILED)
    except aws.CredentialsError as problem:
        fail(ctx, problem.line, code=problem.code)


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2))


# ------------------------------------------------------------------ render


@app.command("render", cls=OneLineUsageErrors)
def render(
    ctx: typer.Context,
    env: EnvOption = None,
    team: TeamOption = None,
    instance_group: GroupOption = None,
    nodes: NodesOption = None,
    image: ImageOption = None,
    priority: PriorityOption = None,
    name: JobNameOption = None,
    spares: SparesOption = None,
    preset: PresetOption = None,
    steps: StepsOption = None,
    min_tokens_per_s: MinTokensOption = None,
    topology: TopologyOption = None,
    elastic: ElasticOption = None,
    parallelism: ParallelismOption = None,
    tp: TpOption = None,
    module: ModuleOption = None,
    command: CommandArgument = None,
    output: OutputOption = None,
) -> None:
    """Print a HyperPodPyTorchJob manifest as YAML for a team's job in an environment."""
    # Every option but --output, by its parameter name (submit takes the same options).
    options = {key: value for key, value in locals().items() if key not in ("ctx", "output")}
    _, spec = job_spec(ctx, **options)
    _write(ctx, to_yaml(api.render(spec)), output)


def job_spec(
    ctx: typer.Context,
    *,
    env: str | None,
    team: str | None,
    instance_group: str | None,
    nodes: str | None,
    image: str | None,
    command: list[str] | None,
    **given: str | None,
) -> tuple[LoadedEnvironment, JobSpec]:
    """The environment and the JobSpec `render`'s options describe (`api.spec`); any other
    option is a JobSpec field of the same name (spares, preset, steps, ...), passed on when
    given."""
    # An elastic job starts at its minimum: --elastic stands in for --nodes.
    starts = nodes if nodes is not None else given.get("elastic")
    required = {
        "--env": env,
        "--team": team,
        "--instance-group": instance_group,
        "--nodes": starts,
        "--image": image,
    }
    if env is None or team is None or instance_group is None or starts is None or image is None:
        missing = [
            f"{option}: missing; pass {option}" for option, v in required.items() if v is None
        ]
        fail(ctx, "; ".join(missing), code=ExitCode.USAGE)
    loaded = loaded_environment_option(ctx, env)
    choices: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
    with _reported(ctx):
        spec = api.spec(
            loaded,
            team=team,
            instance_group=instance_group,
            nodes=nodes,
            image=image,
            command=command or [],
            **choices,
        )
    return loaded, spec


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


def _environment(ctx: typer.Context, env: str | None) -> LoadedEnvironment:
    return loaded_environment_option(ctx, required_env(ctx, env))


def _connect(ctx: typer.Context, env: LoadedEnvironment, kubeconfig: Path | None) -> api.Jobs:
    with _reported(ctx):
        jobs = api.connect(env, kubeconfig)
    return jobs


FileOption = Annotated[
    Path | None,
    typer.Option(
        "--file",
        metavar="FILE",
        help="Create the job in FILE (- for stdin) as written, instead of rendering one.",
    ),
]
# `-f` was --file's short spelling; it means --follow everywhere now (hpctl job logs).
OldFileOption = Annotated[Path | None, typer.Option("-f", metavar="FILE", hidden=True)]


def _file(ctx: typer.Context, file: Path | None, old: Path | None) -> Path | None:
    if old is None:
        return file
    report(ctx, "-f is deprecated and goes in the next release; use --file")
    return file if file is not None else old


def _manifest(
    ctx: typer.Context, file: Path, options: dict[str, Any]
) -> tuple[LoadedEnvironment, dict[str, Any]]:
    """The environment and the manifest in `file` (- for stdin), given with no render
    option but --env."""
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
    loaded = _environment(ctx, options["env"])
    text = typer.get_text_stream("stdin").read() if str(file) == "-" else None
    with _reported(ctx):
        manifest, _ = api.read_manifest(loaded.config, file, text)
    return loaded, manifest


@app.command("submit", cls=OneLineUsageErrors)
@_with_render_options
def submit(
    ctx: typer.Context,
    file: FileOption = None,
    old_file: OldFileOption = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait until Kueue admits the job, printing progress.")
    ] = False,
    kubeconfig: KubeconfigOption = None,
    as_json: JsonObjectOption = False,
    **options: Any,
) -> None:
    """Render a job (the options of hpctl job render) or read one (--file) and create it."""
    file = _file(ctx, file, old_file)
    job: JobSpec | dict[str, Any]
    if file is not None:
        loaded, job = _manifest(ctx, file, options)
    else:
        loaded, job = job_spec(ctx, **options)
    jobs = _connect(ctx, loaded, kubeconfig)
    with _reported(ctx):
        created = jobs.submit(job)
    meta = created["metadata"]
    team = meta["namespace"].removeprefix(team_namespace(""))
    scope = f"--env {options['env']} --team {team}"
    if not as_json:
        typer.echo(f"Created {KIND} {meta['namespace']}/{meta['name']} (uid {meta.get('uid')}).")
        typer.echo(f"  hpctl job describe {meta['name']} {scope}")
        typer.echo(f"  hpctl job logs {meta['name']} {scope} --follow")
    admission = None
    if wait:
        with _reported(ctx):
            workload = jobs.wait_for_admission(created, lambda line: typer.echo(line, err=True))
        admission = lifecycle.admission(workload, None)
    if as_json:
        _echo_json(
            {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "admission": admission,
            }
        )


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
    jobs = _connect(ctx, _environment(ctx, env), kubeconfig)
    with _reported(ctx):
        rows = jobs.list_jobs(team)
    if as_json:
        _echo_json([row.as_json() for row in rows])
        return
    if not rows:
        teams = [team] if team is not None else api.teams(jobs.config)
        typer.echo(f"No jobs for {', '.join(teams) or 'any team'} in {jobs.config.environment}.")
        return
    columns = ("name", "namespace", "state", "nodes", "restarts", "admission", "age")
    table = [[str(getattr(row, c)) for c in columns] for row in rows]
    # Every cell whole, the name first: a table is never cut (pipe it to less -S).
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    for line in [[c.upper() for c in columns], *table]:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


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
    jobs = _connect(ctx, _environment(ctx, env), kubeconfig)
    with _reported(ctx):
        description = jobs.describe(name, team)
    if as_json:
        _echo_json(description)
        return
    _print_description(description)


_DESCRIPTION_FIELDS = (
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
)


def _print_description(report: dict[str, Any]) -> None:
    for label, key in _DESCRIPTION_FIELDS:
        typer.echo(f"{label + ':':<11}{report[key] if report[key] is not None else '-'}")
    dashboard = report["dashboard"]
    link = dashboard["url"] or f"unavailable ({dashboard['unavailable']})"
    typer.echo(f"{'Dashboard:':<11}{link}")
    if report["workload"] and report["workload"]["waiting"]:
        typer.echo(f"{'Waiting:':<11}{report['workload']['waiting']}")
    failure = report["last_failure"]
    if failure:
        retry = "a restart may help" if failure["restart_helps"] else "a restart cannot help"
        typer.echo(
            f"{'Failure:':<11}{failure['cause']} ({retry}): {failure['pod']} on "
            f"{failure['node'] or '-'} exited {failure['exit_code']} at {failure['time'] or '-'}"
            + (f"; {failure['evidence']}" if failure["evidence"] else "")
        )
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


def _since(ctx: typer.Context, text: str | None) -> timedelta | None:
    """--since as a duration; a bare number is read in hours for one more release."""
    if text is None:
        return None
    try:
        since = parse_duration("--since", text, bare_unit="h")
    except DurationError as error:
        fail(ctx, str(error), code=ExitCode.USAGE)
    if since <= timedelta(0):
        fail(
            ctx,
            f"--since: {text!r} reads nothing; use a duration above 0, e.g. 30m",
            code=ExitCode.USAGE,
        )
    warning = bare_number_deprecation("--since", text, "h")
    if warning is not None:
        report(ctx, warning)
    return since


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
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Archived lines from this long ago: 30m, 6h, 2d (default: since the job was "
            "created; 24h for a deleted job).",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per line.")
    ] = False,
) -> None:
    """The log of a job's pod (its first container), by node rank: from the pod while it
    exists, from CloudWatch Logs once the job has finished or with --archive."""
    since_ago = _since(ctx, since)
    with _reported(ctx):
        api.check_log_options(rank, all_ranks, archive, follow)
    jobs = _connect(ctx, _environment(ctx, env), kubeconfig)
    with _reported(ctx):
        records = jobs.logs(
            name,
            team,
            rank=rank,
            all_ranks=all_ranks,
            follow=follow,
            archive=archive,
            since=since_ago,
        )
        for record in records:
            _print_record(record, all_ranks=all_ranks, as_json=as_json)


def _print_record(record: LogRecord, *, all_ranks: bool, as_json: bool) -> None:
    """One log line as `logs` prints it: the text (every rank's marked with its pod and
    container), or with --json one object."""
    if as_json:
        typer.echo(json.dumps(record.as_json()))
    elif all_ranks:
        typer.echo(f"[pod/{record.pod}/{record.container}] {record.line}")
    else:
        typer.echo(record.line)


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
    jobs = _connect(ctx, _environment(ctx, env), kubeconfig)
    with _reported(ctx):
        team = api.team_of(jobs.config, team)
    namespace = team_namespace(team)
    if not yes:
        fail(
            ctx,
            f"refusing to cancel {KIND} {namespace}/{name} without --yes: its pods stop; "
            "re-run with --yes",
            code=ExitCode.FAILED,
        )
    with _reported(ctx):
        cancelled = jobs.cancel(name, team)
    if as_json:
        _echo_json(cancelled)
        return
    typer.echo(
        f"Cancelled {KIND} {namespace}/{name}: its pods stop after their grace period; "
        "hpctl job list shows it Terminating until they are gone."
    )
