"""The Python API of `hpctl job`: render a HyperPod training job for an environment, and
submit, list, describe, read the logs of and cancel jobs on its cluster. Every `hpctl job`
command is a thin face over these calls, so a notebook gets what the command line gets:

    from hpctl.job import api

    dev = api.environment("dev")  # config/dev.yaml, validated and planned
    spec = api.spec(dev, team="sandbox", instance_group="gpu-g5", nodes=1, image=IMAGE)
    manifest = api.render(spec)  # the HyperPodPyTorchJob, a plain dict
    world = api.plan(spec).world_size  # what the render derived: mesh, tiers, batch
    jobs = api.connect(dev)  # through the kubeconfig `hpctl kubeconfig --env dev` wrote
    created = jobs.submit(spec)
    jobs.wait_for_admission(created, progress=print)
    rows = jobs.list_jobs(team="sandbox")  # lifecycle.JobRow: state, nodes, admission, age
    report = jobs.describe(spec.name, team="sandbox")
    for record in jobs.logs(spec.name, team="sandbox", follow=True):
        print(record.line)
    jobs.cancel(spec.name, team="sandbox")

Bad input raises `JobRequestError` (one line per problem, naming the option as `hpctl job`
spells it: `--nodes` is the `nodes` argument); a call that ran and failed raises
`JobOperationError` (`KubeError` for the API server), one line with the fix; the archive and the
dashboard need AWS credentials of the environment's account (`aws.CredentialsError`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from config.kubernetes import OPERATOR_JOB_LABEL, TEAM_NAMESPACE_PREFIX, team_namespace
from config.loader import CONFIG_DIR, LoadedEnvironment, load_environment
from config.schema import EnvironmentConfig
from hpctl.job import lifecycle, watch
from hpctl.job.archive import ArchiveQuery, LogRecord, archived_logs, rank_pod
from hpctl.job.dashboard import dashboard_link
from hpctl.job.environment import JobRequestError, entry_point_for, spec_for_environment
from hpctl.job.failures import JobOperationError
from hpctl.job.kube import Cluster, KubeError, NotFoundError
from hpctl.job.kube import connect as connect_cluster
from hpctl.job.last_failure import last_failure
from hpctl.job.plan import JobPlan
from hpctl.job.render import API_VERSION, KIND, render_job, to_yaml
from hpctl.job.spec import JobSpec
from hpctl.kubeconfig import default_output as default_kubeconfig
from hpctl.options import utc_now

__all__ = [
    "JobOperationError",
    "JobRequestError",
    "Jobs",
    "LogRecord",
    "connect",
    "environment",
    "read_manifest",
    "render",
    "spec",
    "to_yaml",
]

# The clock default job names and ages are read from; tests replace it.
clock: Callable[[], datetime] = utc_now


def environment(name: str, config_dir: Path = CONFIG_DIR) -> LoadedEnvironment:
    """config/<name>.yaml, validated and planned (`config.loader`); ConfigError if not."""
    return load_environment(name, config_dir=config_dir)


def spec(
    env: LoadedEnvironment,
    *,
    team: str,
    instance_group: str,
    image: str,
    nodes: int | str | None = None,
    priority: str | None = None,
    name: str | None = None,
    module: str | None = None,
    command: tuple[str, ...] | list[str] = (),
    **choices: Any,
) -> JobSpec:
    """The validated job `team` asks for on `instance_group` of `env`: the trainer's (its
    preset, steps, ... in `choices`), or with `module` a team's Python module and its
    `command` arguments, or a team's program (`command` alone). `nodes` defaults to the
    bottom of an `elastic="MIN:MAX"` range; the rest as `hpctl job render` takes it."""
    elastic = choices.get("elastic")
    if nodes is None and elastic is not None:
        # An elastic job starts at its minimum; a range that is none is --elastic's problem.
        start = str(elastic).partition(":")[0].strip()
        nodes = start if start.isdigit() else "1"
    if nodes is None:
        raise JobRequestError(["--nodes: missing; pass --nodes"])
    entry_point = entry_point_for(module, list(command))
    if entry_point is not None:
        choices["entry_point"] = entry_point
    return spec_for_environment(
        env.config,
        plan=env.plan,
        team=team,
        instance_group=instance_group,
        nodes=nodes,
        image=image,
        priority=priority,
        name=name,
        clock=clock,
        **choices,
    )


def plan(job: JobSpec) -> JobPlan:
    """What follows from `job`'s choices, its platform and its preset: parallel settings,
    placement, checkpoint tiers, world size and batch (what `render` writes)."""
    return JobPlan(job)


def render(job: JobSpec) -> dict[str, Any]:
    """The HyperPodPyTorchJob manifest of `job` (`to_yaml` writes it as `hpctl job render`)."""
    return render_job(job)


def teams(config: EnvironmentConfig) -> list[str]:
    """The environment's task-governance teams, by name."""
    return sorted(team.name for team in config.governance.teams) if config.governance else []


def team_of(config: EnvironmentConfig, team: str | None) -> str:
    """`team`, checked against the environment's teams."""
    known = teams(config)
    if team is None:
        raise JobRequestError([f"--team: missing; pass --team (one of {', '.join(known)})"])
    if team not in known:
        fix = f"use one of {', '.join(known)}" if known else "the environment has no teams"
        raise JobRequestError([f"--team: unknown team {team!r} in {config.environment}; {fix}"])
    return team


def manifest_team(config: EnvironmentConfig, manifest: object, source: str) -> str:
    """The team whose namespace the HyperPodPyTorchJob `manifest` (read from `source`) is
    in; JobRequestError naming --file where it is no such job of a team."""
    kind = (
        (manifest.get("apiVersion"), manifest.get("kind")) if isinstance(manifest, dict) else None
    )
    if not isinstance(manifest, dict) or kind != (API_VERSION, KIND):
        raise JobRequestError(
            [f"--file: {source} is not a {KIND} ({API_VERSION}); write one with hpctl job render"]
        )
    meta = manifest.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    team = str(namespace or "").removeprefix(TEAM_NAMESPACE_PREFIX)
    known = teams(config)
    if not name or not str(namespace or "").startswith(TEAM_NAMESPACE_PREFIX) or team not in known:
        raise JobRequestError(
            [
                f"--file: metadata.namespace {namespace!r} is not a team namespace of "
                f"{config.environment} ({', '.join(team_namespace(t) for t in known)}) or "
                "metadata.name is missing; render the job for a team"
            ]
        )
    return team


def read_manifest(
    config: EnvironmentConfig, source: Path, text: str | None = None
) -> tuple[dict[str, Any], str]:
    """The HyperPodPyTorchJob in the file `source` (or `text` read from it elsewhere, such as
    stdin) and its team, from its namespace."""
    try:
        manifest = yaml.safe_load(source.read_text() if text is None else text)
    except (OSError, yaml.YAMLError) as error:
        raise JobRequestError(
            [f"--file: cannot read {source} ({error}); pass a YAML manifest"]
        ) from None
    team = manifest_team(config, manifest, str(source))
    return manifest, team


def connect(env: LoadedEnvironment | EnvironmentConfig, kubeconfig: Path | None = None) -> Jobs:
    """The jobs of `env`'s cluster, through `kubeconfig` (default: the file `hpctl
    kubeconfig --env` writes), which must name that cluster."""
    config = env.config if isinstance(env, LoadedEnvironment) else env
    path = (kubeconfig or default_kubeconfig(config.environment)).expanduser()
    try:
        return Jobs(config, connect_cluster(config, path))
    except KubeError as error:
        raise JobRequestError([str(error)]) from None


def check_log_options(rank: int | None, all_ranks: bool, archive: bool, follow: bool) -> None:
    """JobRequestError for `logs` options that contradict each other."""
    if all_ranks and rank is not None:
        raise JobRequestError(["--all-ranks: reads every rank; drop --rank or --all-ranks"])
    if archive and follow:
        raise JobRequestError(
            ["--follow: an archived log is read once; drop --follow or --archive"]
        )


@dataclass
class Jobs:
    """The training jobs on one environment's cluster."""

    config: EnvironmentConfig
    cluster: Cluster

    def submit(self, job: JobSpec | dict[str, Any]) -> dict[str, Any]:
        """Create `job` (a JobSpec, rendered here, or a manifest as written); the job as the
        API server stored it."""
        if isinstance(job, JobSpec):
            manifest, team = render_job(job), job.team
        else:
            manifest, team = job, manifest_team(self.config, job, "the manifest")
        created: dict[str, Any] = self.cluster.create_job(manifest, team)
        return created

    def wait_for_admission(
        self, job: dict[str, Any], progress: Callable[[str], None] = lambda line: None
    ) -> dict[str, Any]:
        """Wait until Kueue admits `job` (as `submit` returned it), calling `progress` with
        each new progress line; its admitted Workload."""
        team = job["metadata"]["namespace"].removeprefix(TEAM_NAMESPACE_PREFIX)
        return watch.wait_for_admission(self.cluster, job, team, progress)

    def list_jobs(self, team: str | None = None) -> list[lifecycle.JobRow]:
        """`team`'s jobs (default: every team's) with state, nodes, restarts, admission, age."""
        chosen = [team_of(self.config, team)] if team is not None else teams(self.config)
        now = clock()
        return [row for name in chosen for row in self._rows(name, now)]

    def _rows(self, team: str, now: datetime) -> list[lifecycle.JobRow]:
        cluster, namespace = self.cluster, team_namespace(team)
        jobs = cluster.list_jobs(namespace, team)
        if not jobs:
            return []
        workloads = cluster.workloads(namespace, team)
        pods = cluster.pods(namespace, team, OPERATOR_JOB_LABEL)
        rows = []
        for job in jobs:
            name = job["metadata"]["name"]
            held = lifecycle.workload_of(job, workloads)
            own = [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get(OPERATOR_JOB_LABEL) == name
            ]
            place = watch.position(cluster, job, held)
            rows.append(lifecycle.job_row(job, held, own, place, now))
        return rows

    def describe(self, name: str, team: str | None) -> dict[str, Any]:
        """Job `name`'s conditions, restarts, Kueue admission and preemption, pods, nodes,
        events and per-job dashboard link (`lifecycle.description`)."""
        team = team_of(self.config, team)
        cluster, namespace = self.cluster, team_namespace(team)
        job = cluster.get_job(namespace, name, team)
        pods = cluster.pods(namespace, team, f"{OPERATOR_JOB_LABEL}={name}")
        held = watch.workload(cluster, job, team)
        uids = [job["metadata"]["uid"]] + ([held["metadata"]["uid"]] if held else [])
        events = [event for uid in uids for event in cluster.events(namespace, team, uid)]
        place = watch.position(cluster, job, held)
        report = lifecycle.description(job, held, pods, events, place, clock())
        report["dashboard"] = dashboard_link(self.config, job)
        report["last_failure"] = last_failure(pods)
        return report

    def logs(
        self,
        name: str,
        team: str | None,
        *,
        rank: int | None = None,
        all_ranks: bool = False,
        follow: bool = False,
        archive: bool = False,
        since: timedelta | None = None,
    ) -> Iterator[LogRecord]:
        """The log of job `name`'s pod of node `rank` (default 0), by line: from the pod while
        it exists (`follow`: until its container ends), from CloudWatch Logs once the job has
        finished or with `archive` (`all_ranks`: every rank's, in time order; `since`: from
        that long ago, default since the job was created)."""
        check_log_options(rank, all_ranks, archive, follow)
        team = team_of(self.config, team)
        namespace = team_namespace(team)
        query = ArchiveQuery(namespace, name, rank or 0, all_ranks, since)
        if archive:
            found = self._existing(namespace, name, team)
            return iter(archived_logs(self.config, dataclasses.replace(query, job=found), clock()))
        pods = self.cluster.pods(namespace, team, f"{OPERATOR_JOB_LABEL}={name}")
        if not pods:
            job = self._finished(namespace, name, team)
            return iter(archived_logs(self.config, dataclasses.replace(query, job=job), clock()))
        if all_ranks or since is not None:
            option = "--all-ranks" if all_ranks else "--since"
            raise JobRequestError(
                [f"{option}: reads the archived log and job {name} still has pods; add --archive"]
            )
        return self._live(pods, name, team, rank or 0, follow)

    def _finished(self, namespace: str, name: str, team: str) -> dict[str, Any]:
        """Job `name`, which has no pods, where it has finished (its log is archived);
        JobOperationError for a job that is gone or not yet admitted."""
        env = self.config.environment
        job = self._existing(namespace, name, team)
        if job is None:
            raise JobOperationError(
                f"{KIND} {namespace}/{name}: not found; list the team's jobs with hpctl job "
                f"list --env {env} --team {team}, or read a deleted job's log with --archive"
            )
        held = watch.workload(self.cluster, job, team)
        state = lifecycle.job_state(job, held)
        if state in lifecycle.TERMINAL:
            return job
        raise JobOperationError(
            f"job {name} has no pods yet ({state}, {lifecycle.admission(held, None)}); see why "
            f"with hpctl job describe {name} --env {env} --team {team}"
        )

    def _live(
        self, pods: list[dict[str, Any]], name: str, team: str, rank: int, follow: bool
    ) -> Iterator[LogRecord]:
        wanted = rank_pod(name, rank)
        pod = next((p for p in pods if p["metadata"]["name"] == wanted), None)
        if pod is None:
            have = ", ".join(sorted(p["metadata"]["name"] for p in pods)) or "none yet"
            raise JobOperationError(
                f"--rank: job {name} has no pod {wanted} (pods: {have}); pick a rank below its "
                "node count, or wait until Kueue admits it (hpctl job describe)"
            )
        container = pod["spec"]["containers"][0]["name"]
        namespace = pod["metadata"].get("namespace") or team_namespace(team)
        lines = self.cluster.log_lines(namespace, wanted, container, follow=follow, team=team)
        return (LogRecord(wanted, rank, line, container) for line in lines)

    def _existing(self, namespace: str, name: str, team: str) -> dict[str, Any] | None:
        """Job `name`, or None where it does not exist (any more)."""
        try:
            return self.cluster.get_job(namespace, name, team)
        except NotFoundError:
            return None

    def cancel(self, name: str, team: str | None) -> dict[str, Any]:
        """Delete job `name`: its pods get SIGTERM and their grace period to save."""
        team = team_of(self.config, team)
        namespace = team_namespace(team)
        self.cluster.delete_job(namespace, name, team)
        return {"name": name, "namespace": namespace, "cancelled": True}
