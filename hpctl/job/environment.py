"""`spec_for_environment`: a JobSpec from an environment's config and a user's options.

The team, its priority classes and its quota (`config.teams`), the instance group's type and
taints, what its nodes leave a job (`config.node_model`), and whether the cluster has managed
tiered checkpointing all come from the config, so
a job can only ask for what the platform deployed. Every option that does not fit is one
`--option: problem; fix` line (`JobRequestError`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from config.errors import Location, problem_lines
from config.kubernetes import (
    DNS_LABEL_MAX,
    PRIORITY_CLASS_SUFFIX,
    TEAM_NAMESPACE_PREFIX,
)
from config.plan import PlatformPlan
from config.plan import plan as plan_of
from config.schema import EnvironmentConfig
from config.schema.governance import TeamConfig
from config.schema.hyperpod import InstanceGroupConfig
from config.teams import GroupCapacity
from hpctl.job.entry_points import CommandEntryPoint, EntryPoint, ModuleEntryPoint
from hpctl.job.platform import PLATFORM_FIELDS, platform_for
from hpctl.job.spec import JobSpec, NonNegativeInt, PositiveInt
from hpctl.options import utc_now

# What the environment decides (the JobPlatform's fields, and the platform itself);
# `spec_for_environment` refuses them as choices.
DERIVED_FIELDS: Final = PLATFORM_FIELDS | {"platform"}
# The facts of the instance group are fixed through --instance-group, the rest only through
# the environment's config; any other JobSpec field maps to --field-name.
_GROUP_FACTS: Final = frozenset({"instance_type", "taints", "allocation"})


class JobRequestError(ValueError):
    """Options that do not make a job in the environment: one `--option: problem; fix` line
    per problem (`problems`); `str()` joins them with "; "."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def option_for(loc: Location) -> str:
    """The CLI option a JobSpec error location stands for: `--nodes`, `--instance-group`."""
    if not loc:
        return ""
    if loc[0] == "entry_point":
        return "--module"
    if loc[0] == "platform":
        return "--instance-group" if loc[1:2] and loc[1] in _GROUP_FACTS else "--env"
    return "--" + str(loc[0]).replace("_", "-")


def entry_point_for(module: str | None, command: list[str]) -> EntryPoint | None:
    """The code `--module` and the words after `--` name: a module run with those words as
    its arguments, the words as a command, or None (neither: the project's trainer)."""
    if module is None and not command:
        return None
    option = "--module" if module is not None else "COMMAND"
    try:
        if module is not None:
            return ModuleEntryPoint(module=module, args=tuple(command))
        return CommandEntryPoint(command=tuple(command))
    except ValidationError as error:
        raise JobRequestError(
            [f"{option}: {item['msg'].removeprefix('Value error, ')}" for item in error.errors()]
        ) from None


def nodes_figure(value: Fraction) -> int | float:
    """A node count for people: whole numbers as they are, fractions to 2 decimals."""
    return int(value) if value.denominator == 1 else round(float(value), 2)


def default_priority(config: EnvironmentConfig) -> str:
    """The environment's lowest-weight priority class (ties: the first by name)."""
    if config.governance is None:
        raise JobRequestError([_no_governance(config)])
    return min(config.governance.priority_classes, key=lambda c: (c.weight, c.name)).name


def default_job_name(team: str, preset: str, now: datetime) -> str:
    """`<team>-<preset>-<UTC YYYYmmdd-HHMMSS>`, the team cut short to fit 63 characters.
    A naive `now` is taken as UTC."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    stamp = now.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    # The preset is validated on its own; only its shape matters here.
    tag = re.sub(r"[^a-z0-9]+", "-", preset.lower()).strip("-")[:16].strip("-") or "job"
    suffix = f"-{tag}-{stamp}"
    stem = team if team[:1].isalpha() else f"job-{team}"  # job names start with a letter
    return stem[: DNS_LABEL_MAX - len(suffix)].rstrip("-") + suffix


def _no_governance(config: EnvironmentConfig) -> str:
    env = config.environment
    return (
        f"--env: {env} has no governance section, so it has no teams, queues or priority "
        f"classes for jobs; add one to config/{env}.yaml or use an environment with task "
        "governance"
    )


def _unknown(option: str, what: str, value: str, known: list[str], env: str, hint: str) -> str:
    fix = f"use {hint!r}" if hint in known else f"use one of {', '.join(known)}"
    return f"{option}: unknown {what} {value!r} in {env}; {fix}"


def _accelerated(plan: PlatformPlan, group: str) -> bool:
    return plan.node_model(group).instance.has_accelerators


def _quota_problem(
    team: str,
    capacity: GroupCapacity,
    usable: list[str],
    nodes: int,
    spares: int,
    option: str = "--nodes",
) -> str | None:
    """Why `nodes` + `spares` on the group do not fit `team`'s capacity there, if they don't."""
    asked, limit = nodes + spares, capacity.max_job_nodes
    if asked <= limit:
        return None
    group = capacity.instance_group
    elsewhere = (
        f"use a group where it has one ({', '.join(usable)})"
        if usable
        else "ask the platform team for a quota"
    )
    if capacity.guaranteed == 0 and capacity.borrowable == 0:
        return (
            f"--instance-group: team {team} has no quota on {group} ({capacity.instance_type}); "
            f"{elsewhere}"
        )
    total = capacity.guaranteed + capacity.borrowable
    figures = (
        f"{nodes_figure(capacity.guaranteed)} guaranteed + "
        f"{nodes_figure(capacity.borrowable)} borrowable = {nodes_figure(total)}"
    )
    if capacity.group_nodes < total:
        figures += f", and the group has {capacity.group_nodes} nodes"
    if limit == 0:
        return (
            f"--instance-group: team {team} may use less than one node on {group}: {figures}; "
            f"{elsewhere}"
        )
    fix = f"ask for at most {limit}" + (" nodes and spares together" if spares else "")
    return (
        f"{option}: {nodes} nodes (+{spares} spares) exceed what team {team} may use on "
        f"{group}: {figures}; {fix}"
    )


_NODES = TypeAdapter(PositiveInt)
_SPARES = TypeAdapter(NonNegativeInt)


def _counts(nodes: object, spares: object) -> tuple[int, int] | None:
    """Nodes and spares as JobSpec reads them, or None where JobSpec will reject them."""
    try:
        return _NODES.validate_python(nodes), _SPARES.validate_python(spares)
    except ValidationError:
        return None


def _elastic_top(elastic: object) -> int | None:
    """The top of an `--elastic MIN:MAX` range, or None where JobSpec will reject it."""
    match = re.fullmatch(r"\s*\d+:(\d+)\s*", elastic) if isinstance(elastic, str) else None
    return int(match[1]) if match else None


def _lines(error: ValidationError) -> list[str]:
    return problem_lines(error, where=option_for, missing="missing; pass {where}")


def spec_for_environment(
    config: EnvironmentConfig,
    *,
    team: str,
    instance_group: str,
    nodes: int | str,
    image: str,
    priority: str | None = None,
    name: str | None = None,
    clock: Callable[[], datetime] = utc_now,
    plan: PlatformPlan | None = None,
    **choices: Any,
) -> JobSpec:
    """The JobSpec for a job of `team` on `instance_group` of the environment `config`.

    From the config, once (`platform_for`, from the environment's `plan` where given): the
    group's instance type, taints (tolerations) and what its nodes leave a job, whether the cluster has tiered storage (managed tiered
    checkpointing for the tiers whose storage is "auto") and what its add-ons offer; the
    team's queue and priority classes. `priority` defaults to the lowest-weight class, `name`
    to `<team>-<preset>-<UTC time from clock>` (the entry point's `name_tag` for a team's own
    code). `choices` are the other JobSpec fields a user picks (preset, steps, spares,
    min_tokens_per_s, ...), as values or text.

    Raises JobRequestError (one `--option: problem; fix` line per problem) for an environment
    without governance, an unknown team, group or priority class, a group without
    accelerators, an invalid choice, or more nodes (spares included) than the team may use on
    the group; TypeError when `choices` name a field the config decides.
    """
    derived = sorted(DERIVED_FIELDS & choices.keys())
    if derived:
        raise TypeError(f"{', '.join(derived)}: decided by the environment's config, not a choice")
    plan = plan if plan is not None else plan_of(config)
    chosen_team, group, priority = _placement(config, plan, team, instance_group, priority)
    preset = choices.get("preset", JobSpec.model_fields["preset"].default)
    entry_point = choices.get("entry_point")
    tag = entry_point.name_tag if entry_point is not None else str(preset)
    fields: dict[str, Any] = {
        **choices,
        "platform": platform_for(config, group, plan),
        "name": name if name is not None else default_job_name(team, tag, clock()),
        "team": team,
        "priority": priority,
        "image": image,
        "instance_group": group.name,
        "nodes": nodes,
    }
    # The quota first: a job the team may not run at all needs another size before anything
    # else about it matters (a size the preset cannot split is a --nodes problem as well).
    quota = _quota_problems(config, plan, chosen_team, group, nodes, choices)
    try:
        spec = JobSpec.model_validate(fields)
    except ValidationError as error:
        if quota:  # the quota's line stands for every other problem of the job's size
            error_lines = [
                line
                for item, line in zip(error.errors(), _lines(error), strict=True)
                if item["loc"][:1] not in (("nodes",), ("spares",), ("elastic",))
            ]
            raise JobRequestError(quota + error_lines) from None
        raise JobRequestError(_lines(error)) from None
    if quota:
        raise JobRequestError(quota)
    return spec


def _placement(
    config: EnvironmentConfig,
    plan: PlatformPlan,
    team: str,
    instance_group: str,
    priority: str | None,
) -> tuple[TeamConfig, InstanceGroupConfig, str]:
    """The team, the accelerated instance group and the priority class (default: the
    lowest-weight one) a job asks for, or JobRequestError naming each that is not there."""
    governance, env = config.governance, config.environment
    if governance is None:
        raise JobRequestError([_no_governance(config)])
    problems: list[str] = []
    teams = {t.name: t for t in governance.teams}
    chosen_team = teams.get(team)
    if chosen_team is None:
        hint = team.removeprefix(TEAM_NAMESPACE_PREFIX)
        problems.append(_unknown("--team", "team", team, sorted(teams), env, hint))
    groups = {g.name: g for g in config.hyperpod.instance_groups}
    group = groups.get(instance_group)
    if group is None:
        problems.append(
            _unknown("--instance-group", "instance group", instance_group, sorted(groups), env, "")
        )
    elif not _accelerated(plan, group.name):
        accelerated = sorted(n for n in groups if _accelerated(plan, n))
        fix = (
            f"use a GPU or Trainium group ({', '.join(accelerated)})"
            if accelerated
            else f"add a GPU or Trainium group to config/{env}.yaml"
        )
        problems.append(
            f"--instance-group: group {group.name} is {group.instance_type}, and "
            f"{group.instance_type} has no accelerators; {fix}"
        )
    if priority is None:
        priority = default_priority(config)
    else:
        classes = sorted(governance.priority_classes, key=lambda c: (-c.weight, c.name))
        known = [c.name for c in classes]
        if priority not in known:
            hint = priority.removesuffix(PRIORITY_CLASS_SUFFIX)
            problems.append(_unknown("--priority", "priority class", priority, known, env, hint))
    if problems or chosen_team is None or group is None:
        raise JobRequestError(problems)
    return chosen_team, group, priority


def _quota_problems(
    config: EnvironmentConfig,
    plan: PlatformPlan,
    team: TeamConfig,
    group: InstanceGroupConfig,
    nodes: object,
    choices: dict[str, Any],
) -> list[str]:
    """The line saying the job's size (its elastic top included) does not fit the team's
    capacity on `group`, if it does not; none where JobSpec will reject the counts."""
    counts = _counts(nodes, choices.get("spares", JobSpec.model_fields["spares"].default))
    if counts is None or config.governance is None:
        return []
    capacity = plan.team_capacity[team.name]
    usable = [
        c.instance_group
        for c in capacity
        if c.max_job_nodes > 0 and _accelerated(plan, c.instance_group)
    ]
    (on_group,) = (c for c in capacity if c.instance_group == group.name)
    problem = _quota_problem(team.name, on_group, usable, *counts)
    top = _elastic_top(choices.get("elastic"))
    if problem is None and top is not None and top > counts[0]:
        # An elastic job grows to its top: a size the team may never use is no size.
        problem = _quota_problem(team.name, on_group, usable, top, counts[1], "--elastic")
    return [] if problem is None else [problem]
