"""An environment's task governance as `hpctl teams` shows it: per team its namespace, queue,
sharing and the capacity it holds or may borrow per instance group, then the priority
classes, as plain data and as text tables. The command is in `hpctl.teams_cmd`."""

from __future__ import annotations

from typing import Any

from config.kubernetes import local_queue, priority_class, team_namespace
from config.plan import PlatformPlan
from config.plan import plan as plan_of
from config.schema import EnvironmentConfig
from config.teams import SERVICE_DEFAULT_BORROW_LIMIT_PERCENT
from hpctl.errors import InputError
from hpctl.job.environment import nodes_figure
from hpctl.options import text_table


def teams_report(config: EnvironmentConfig, plan: PlatformPlan | None = None) -> dict[str, Any]:
    """The environment's governance as plain data (the `--json` object), keys in a fixed
    order. The environment must have a governance section. `plan`: the environment's
    (config.plan), planned here when not given."""
    governance = config.governance
    if governance is None:
        name = config.environment
        raise InputError(
            f"--env: {name} has no governance section, so it has no teams or priority "
            f"classes; add one to config/{name}.yaml or use an environment with task governance"
        )
    plan = plan if plan is not None else plan_of(config)
    teams = []
    for team in governance.teams_by_name():
        capacity = plan.team_capacity[team.name]
        borrow_limit = (
            team.borrow_limit_percent or SERVICE_DEFAULT_BORROW_LIMIT_PERCENT
            if team.sharing == "LendAndBorrow"
            else None
        )
        teams.append(
            {
                "name": team.name,
                "namespace": team_namespace(team.name),
                "local_queue": local_queue(team.name),
                "sharing": team.sharing,
                "borrow_limit_percent": borrow_limit,
                "fair_share_weight": team.fair_share_weight,
                "preempt_lower_priority": team.preempt_lower_priority,
                "groups": [
                    {
                        "instance_group": c.instance_group,
                        "instance_type": c.instance_type,
                        "guaranteed_nodes": nodes_figure(c.guaranteed),
                        "borrowable_nodes": nodes_figure(c.borrowable),
                        "max_job_nodes": c.max_job_nodes,
                    }
                    for c in capacity
                    if c.guaranteed > 0 or c.borrowable > 0
                ],
            }
        )
    classes = sorted(governance.priority_classes, key=lambda c: (-c.weight, c.name))
    return {
        "environment": config.environment,
        "fair_share": governance.fair_share,
        "idle_resource_sharing": governance.idle_resource_sharing,
        "priority_classes": [
            {"name": c.name, "weight": c.weight, "kueue_class": priority_class(c.name)}
            for c in classes
        ],
        "teams": teams,
    }


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def format_report(report: dict[str, Any]) -> str:
    """`teams_report` as plain-text tables."""
    lines = [
        f"Environment {report['environment']}: fair share {_on_off(report['fair_share'])}, "
        f"idle resource sharing {_on_off(report['idle_resource_sharing'])}",
        "",
        "Teams",
    ]
    teams = report["teams"]
    lines += text_table(
        ["team", "namespace", "sharing", "borrow limit", "fair-share weight", "preempts lower"],
        [
            [
                t["name"],
                t["namespace"],
                t["sharing"],
                "-" if t["borrow_limit_percent"] is None else f"{t['borrow_limit_percent']}%",
                str(t["fair_share_weight"]),
                "yes" if t["preempt_lower_priority"] else "no",
            ]
            for t in teams
        ],
    )
    lines += ["", "Capacity per team and instance group (nodes)"]
    rows = [
        [
            t["name"],
            g["instance_group"],
            g["instance_type"],
            str(g["guaranteed_nodes"]),
            str(g["borrowable_nodes"]),
            str(g["max_job_nodes"]),
        ]
        for t in teams
        for g in t["groups"]
    ]
    rows += [[t["name"], "-", "-", "0", "0", "0"] for t in teams if not t["groups"]]
    rows.sort(key=lambda row: (row[0], row[1]))
    lines += text_table(
        ["team", "instance group", "instance type", "guaranteed", "borrowable", "max job nodes"],
        rows,
    )
    lines += ["", "Priority classes (highest first)"]
    lines += text_table(
        ["name", "weight", "kueue class"],
        [[c["name"], str(c["weight"]), c["kueue_class"]] for c in report["priority_classes"]],
    )
    return "\n".join(lines) + "\n"
