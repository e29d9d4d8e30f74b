"""What a team's GPU-hours cost: an estimate, with the source of its rate on every line.

A GPU-hour is priced at the rate of the instance type the team's quota is on, per GPU (the
instance's rate over its GPUs):

- a type an instance group runs on a training plan: the plan's `UpfrontFee` (SageMaker
  DescribeTrainingPlan, in its `CurrencyCode`) spread over the plan's instance-hours (its
  `DurationHours` and `DurationMinutes` times its instances of the type). The fee is paid
  whether the GPUs are used or not; this prices the hours that were used at the plan's
  average rate.
- any other type: `governance.on_demand_usd_per_hour` of the environment's config, an
  operator's copy of the SageMaker pricing page (no rate is built in: the published prices
  are per Region and change).

A team whose quota spans types of different rates is priced at the highest (an upper bound);
a team with no priced type gets no figure, and the line says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from config.instance_types import lookup

CONFIG_RATE_SOURCE = "governance.on_demand_usd_per_hour"


@dataclass(frozen=True)
class Rate:
    """A price per GPU-hour of one instance type, in `currency`, and where it comes from."""

    instance_type: str
    per_gpu_hour: float
    currency: str
    source: str


def plan_rate(plan: Mapping[str, Any]) -> Rate | None:
    """The rate per GPU-hour of a DescribeTrainingPlan response: its upfront fee over its
    instance-hours. None for a plan without a fee, a duration or an NVIDIA instance type."""
    fee = float(plan.get("UpfrontFee") or 0)
    hours = (plan.get("DurationHours") or 0) + (plan.get("DurationMinutes") or 0) / 60
    summaries = plan.get("ReservedCapacitySummaries") or []
    types = {s.get("InstanceType") for s in summaries if s.get("InstanceType")}
    if fee <= 0 or hours <= 0 or len(types) != 1:
        return None
    instance_type = str(types.pop())
    instance = lookup(instance_type)
    instances = sum(s.get("TotalInstanceCount") or 0 for s in summaries)
    if instance.accelerator != "nvidia" or instances <= 0:
        return None
    gpu_hours = hours * instances * instance.accelerator_count
    return Rate(
        instance_type,
        fee / gpu_hours,
        str(plan.get("CurrencyCode") or "USD"),
        f"training plan {plan.get('TrainingPlanName')}: upfront fee {fee:.2f} over "
        f"{hours:g} h x {instances} instances",
    )


def on_demand_rates(usd_per_instance_hour: Mapping[str, float]) -> dict[str, Rate]:
    """Instance type -> its configured on-demand rate per GPU-hour (NVIDIA types only)."""
    rates = {}
    for name, usd in usd_per_instance_hour.items():
        instance = lookup(name)
        if instance.accelerator == "nvidia":
            per_gpu = usd / instance.accelerator_count
            rates[name] = Rate(name, per_gpu, "USD", f"{CONFIG_RATE_SOURCE}[{name}]")
    return rates


@dataclass(frozen=True)
class TeamCost:
    """One team's GPU-hours over a window and what they cost (None: no rate)."""

    team: str
    gpu_hours: float
    cost: float | None
    currency: str | None
    source: str


def team_cost(
    team: str, gpu_hours: float, instance_types: Sequence[str], rates: Mapping[str, Rate]
) -> TeamCost:
    """`gpu_hours` of a team whose quota is on `instance_types`, at the highest of their
    rates (`rates`: plan rates over configured on-demand ones)."""
    priced = [rates[t] for t in instance_types if t in rates]
    missing = [t for t in instance_types if t not in rates]
    if not priced:
        why = f"no rate for {', '.join(missing)}" if missing else "no NVIDIA GPU quota"
        return TeamCost(team, gpu_hours, None, None, f"{why}; set {CONFIG_RATE_SOURCE}")
    rate = max(priced, key=lambda r: r.per_gpu_hour)
    currencies = {r.currency for r in priced}
    source = rate.source
    if len(priced) > 1 or missing:
        source += " (the highest rate of the team's instance types: an upper bound)"
    if len(currencies) > 1:
        source += f" (rates in {', '.join(sorted(currencies))})"
    return TeamCost(team, gpu_hours, gpu_hours * rate.per_gpu_hour, rate.currency, source)
