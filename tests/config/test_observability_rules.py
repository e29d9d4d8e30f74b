"""The `observability` section: one test per rule, each a planted violation that must come
back as exactly one line naming the field."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support import environment, one_error_on


def test_every_environment_is_observed_and_prod_collects_gpu_efa_and_kueue_metrics():
    for name in ("dev", "staging", "prod"):
        assert environment(name).config.observability is not None, name
    metrics = environment("prod").config.observability.metrics
    assert (metrics.accelerated_compute, metrics.network, metrics.task_governance) == (
        "ADVANCED",
        "ADVANCED",
        "ADVANCED",
    )


def test_remote_write_needs_the_prometheus_endpoint():
    def no_endpoint(d: dict[str, Any]) -> None:
        endpoints = environment("dev").config.network.interface_endpoints
        d["network"]["interface_endpoints"] = [e for e in endpoints if e != "aps-workspaces"]

    line = one_error_on("network.interface_endpoints", no_endpoint)
    assert "add aps-workspaces" in line


def test_kueue_metrics_need_task_governance():
    def no_governance(d: dict[str, Any]) -> None:
        del d["governance"]

    line = one_error_on("observability.metrics.task_governance", no_governance)
    assert "DISABLED" in line


def test_levels_are_the_add_ons_values():
    def network_basic(d: dict[str, Any]) -> None:
        d["observability"]["metrics"]["network"] = "BASIC"

    line = one_error_on("observability.metrics.network", network_basic)
    assert "DISABLED" in line and "ADVANCED" in line


def test_grafana_only_where_managed_grafana_is_offered():
    def mumbai_with_grafana(d: dict[str, Any]) -> None:
        moved = yaml.safe_load(yaml.safe_dump(d).replace("us-east-1", "ap-south-1"))
        moved["observability"]["grafana"] = True
        d.clear()
        d.update(moved)

    line = one_error_on("observability.grafana", mumbai_with_grafana)
    assert "ap-south-1" in line and "grafana: false" in line


def test_alarm_addresses_are_emails():
    def not_email(d: dict[str, Any]) -> None:
        d["observability"]["alarm_emails"] = ["oncall"]

    one_error_on("observability.alarm_emails[0]", not_email)


def test_fsx_alarm_percent_is_bounded():
    def zero(d: dict[str, Any]) -> None:
        d["observability"]["fsx_free_capacity_percent"] = 0

    one_error_on("observability.fsx_free_capacity_percent", zero)


def test_rule_scrape_interval_is_one_managed_collectors_accept():
    line = one_error_on(
        "observability.scrape_interval_s",
        lambda d: d["observability"].update(scrape_interval_s=15),
    )
    assert line.endswith("managed collectors accept; use 30 or more")
