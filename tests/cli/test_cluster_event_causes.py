"""`hpctl cluster events` names each failure's cause (config.failures) per event, per node
and for the repeat offenders, in the table and in `--json`."""

from __future__ import annotations

import json

from tests.cli.conftest import Stubbed, hpctl
from tests.cli.test_cluster_events import event, fixed_clock, queue

__all__ = ["fixed_clock"]  # the fixture fixes the clock the window is read from
from tests.cli.test_cluster_health import node_id, table_rows

XID = "Instance failed health check: NVRM: Xid (PCI:0000:53:00): 79, GPU has fallen off the bus"
EFA = "Instance failed EFA health check and is being rebooted"
# Node 3 lost a GPU twice, node 5 had two unrelated faults, node 7 one and a routine event.
PAGE = [
    event(1, 120, "Error", XID, 3),
    event(2, 110, "Error", EFA, 5),
    event(3, 90, "Info", "Node joined the cluster", 7),
    event(4, 60, "Error", XID, 3),
    event(5, 30, "Warn", "Out of memory: Killed process 4242 (python)", 5),
    event(6, 10, "Warn", "Node failed the health check", 7),
]


def test_json_gives_every_event_node_and_repeat_offender_a_cause(sagemaker: Stubbed) -> None:
    queue(sagemaker, pages=(PAGE,))
    result = hpctl("cluster", "events", "--env", "prod", "--since", "7d", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    nodes = {n["instance_id"]: n for n in report["nodes"]}
    assert nodes[node_id(3)]["failures_by_cause"] == {"gpu": 2}
    assert nodes[node_id(5)]["failures_by_cause"] == {"efa": 1, "out_of_memory": 1}
    assert nodes[node_id(5)]["last_cause"] == "out_of_memory"
    assert nodes[node_id(7)]["failures_by_cause"] == {"unknown": 1}
    assert [e["cause"] for e in nodes[node_id(7)]["history"]] == [None, "unknown"]
    assert report["repeat_offenders"] == [node_id(3), node_id(5)]
    assert report["repeat_offenders_by_cause"] == {"gpu": [node_id(3)]}


def test_the_table_shows_the_last_cause_and_the_offenders_by_cause(sagemaker: Stubbed) -> None:
    queue(sagemaker, pages=(PAGE,))
    result = hpctl("cluster", "events", "--env", "prod", "--since", "7d")
    assert result.exit_code == 0, result.output
    assert [row[1:4] for row in table_rows(result.stdout)] == [
        [node_id(3), "2", "gpu"],
        [node_id(5), "2", "out_of_memory"],
        [node_id(7), "1", "unknown"],
    ]
    assert f"  gpu, more than once: {node_id(3)}" in result.stdout.splitlines()
