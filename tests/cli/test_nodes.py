"""`hpctl node-model --env ENV` (once `hpctl nodes`): per instance group what a node has, what
the kubelet, tiered storage and the DaemonSets take and what a job may request, as text or one
JSON object."""

from __future__ import annotations

import json

from hpctl.errors import ExitCode
from hpctl.job.render import render_job
from hpctl.nodes import format_report, nodes_report
from tests.cli.conftest import expect_failure, hpctl
from tests.job.conftest import env_spec
from tests.support import variant_of

PREFIX = "hpctl node-model: "


def _ok(*args: str) -> str:
    result = hpctl("node-model", *args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def _group(report: dict, name: str) -> dict:
    (group,) = (g for g in report["groups"] if g["instance_group"] == name)
    return group


def test_prod_p5_figures() -> None:
    report = json.loads(_ok("--env", "prod", "--json"))
    p5 = _group(report, "gpu-p5")
    assert (p5["vcpus"], p5["threads_per_core"], p5["cpus"]) == (192, 1, 96)
    # nodeadm: 6% + 1% + 2 x 0.5% + 92 x 0.25% of a core; 11 MiB x 100 pods + 255 MiB.
    assert p5["kube_reserved"] == {"cpu_millicores": 310, "memory_mib": 1355}
    assert p5["system_reserved"] == {"cpu_millicores": 0, "memory_mib": 0}
    assert p5["eviction_memory_mib"] == 100
    assert p5["tiered_storage_mib"] == 2048 * 1024 * 20 // 100
    assert "health-monitoring-agent" in {d["name"] for d in p5["daemonsets"]}
    assert report["system_pods_fit"] is None


def test_the_job_column_is_what_the_renderer_requests() -> None:
    report = json.loads(_ok("--env", "prod", "--json"))
    job = _group(report, "gpu-p5")["job"]
    pod = render_job(env_spec("prod"))["spec"]["replicaSpecs"][0]["template"]["spec"]
    requests = pod["containers"][0]["resources"]["requests"]
    assert requests["cpu"] == f"{job['cpu_millicores']}m"
    assert requests["memory"] == f"{job['memory_mib']}Mi"


def test_dev_text_names_every_column_and_the_system_fit() -> None:
    text = _ok("--env", "dev")
    lines = text.splitlines()
    assert lines[0] == "Environment dev: one node of each instance group"
    header = lines[2].split()
    for column in ("vCPUs", "threads/core", "CPUs", "kube-reserved", "system-reserved",
                   "eviction", "DaemonSets", "job"):  # fmt: skip
        assert column in header, header
    system = next(line for line in lines if line.startswith("system "))  # the first table
    # dev's m5.xlarge with one thread per core: 2 CPUs, 70m kube-reserved.
    assert system.split()[2:6] == ["4", "1", "2", "0.07"]
    assert lines[-1] == "System pods fit on system: yes"


def test_without_a_system_group_the_report_says_where_system_pods_run() -> None:
    report = nodes_report(variant_of("dev", _accelerated_only).config)
    assert report["system_groups"] == []
    assert format_report(report).splitlines()[-1] == (
        "No group without accelerators: system pods share the accelerated nodes"
    )


def _accelerated_only(data: dict) -> None:
    groups = data["hyperpod"]["instance_groups"]
    data["hyperpod"]["instance_groups"] = [g for g in groups if g["name"] != "system"]


def test_unknown_environment_is_one_usage_line() -> None:
    expect_failure("node-model", "--env", "nope", code=ExitCode.USAGE, starts_with=PREFIX)


def test_the_old_name_still_prints_the_report_with_one_deprecation_line() -> None:
    old = hpctl("nodes", "--env", "prod", "--json")
    assert old.exit_code == 0, old.stderr
    assert json.loads(old.stdout) == json.loads(_ok("--env", "prod", "--json"))
    assert old.stderr == (
        "hpctl nodes: this name is deprecated and goes in the next release; use hpctl node-model\n"
    )
