"""The `observability` section: the HyperPod observability add-on's metric levels, the
managed Prometheus workspace, CloudWatch alarms and who hears about them.

Metric categories and their allowed levels follow AWS's HyperPod observability setup
(CloudFormation template in aws/sagemaker-hyperpod-cluster-setup; the add-on's
`metricsProvider` keys): training, cluster, node and accelerated-compute metrics are BASIC or
ADVANCED; network (EFA), task-governance (Kueue) and scaling metrics are DISABLED or ADVANCED.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from config.model import Strict
from config.schema.base import Email

BasicOrAdvanced = Literal["BASIC", "ADVANCED"]
DisabledOrAdvanced = Literal["DISABLED", "ADVANCED"]

# Regions with Amazon Managed Grafana (AWS General Reference, Amazon Managed Grafana
# endpoints, checked 2026-11).
GRAFANA_REGIONS = frozenset(
    {
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "eu-central-1",
        "eu-west-1",
        "eu-west-2",
        "us-east-1",
        "us-east-2",
        "us-west-2",
    }
)


# The observability stack's output holding the Grafana workspace's endpoint (`hpctl job
# describe` links the per-job dashboard with it; defined here so that hpctl never imports CDK).
GRAFANA_ENDPOINT_OUTPUT = "GrafanaEndpoint"


class MetricLevels(Strict):
    training: BasicOrAdvanced = "BASIC"
    cluster: BasicOrAdvanced = "BASIC"
    node: BasicOrAdvanced = "BASIC"
    accelerated_compute: BasicOrAdvanced = Field(
        default="BASIC", description="DCGM GPU metrics (ADVANCED: the full DCGM set)."
    )
    network: DisabledOrAdvanced = Field(default="DISABLED", description="EFA metrics.")
    task_governance: DisabledOrAdvanced = Field(
        default="DISABLED", description="Kueue metrics: queueing and admissions per team."
    )
    scaling: DisabledOrAdvanced = "DISABLED"


# The shortest interval AMP managed collectors accept (AMP User Guide, scraper limitations).
MIN_SCRAPE_INTERVAL_S = 30


class ObservabilityConfig(Strict):
    metrics: MetricLevels = Field(default_factory=MetricLevels)
    scrape_interval_s: int = Field(
        default=30,
        le=300,
        description="How often the add-on's collectors and the trainer-metrics collector "
        "scrape; managed collectors accept 30 s or more.",
    )
    prometheus_retention_days: int = Field(
        default=150, ge=1, le=1095, description="How long the workspace keeps samples."
    )
    grafana: bool = Field(
        default=False,
        description="An Amazon Managed Grafana workspace reading the Prometheus workspace.",
    )
    alarm_emails: list[Email] = Field(
        default_factory=list, description="Subscribed to the alarm topic (they must confirm)."
    )
    fsx_free_capacity_percent: int = Field(
        default=10, ge=1, le=50, description="Alarm when FSx free capacity falls below this."
    )

    @field_validator("scrape_interval_s")
    @classmethod
    def _scrape_interval(cls, value: int) -> int:
        if value < MIN_SCRAPE_INTERVAL_S:
            raise ValueError(
                f"{value} s is shorter than Amazon Managed Service for Prometheus managed "
                f"collectors accept; use {MIN_SCRAPE_INTERVAL_S} or more"
            )
        return value
