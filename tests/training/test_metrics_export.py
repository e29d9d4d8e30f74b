"""The trainer's Prometheus endpoint: the catalogue's names over real HTTP, who serves and who
reports, a port that cannot be bound, the config switch, and a CPU run scraped mid-training."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from config.observability_metrics import METRICS as CATALOGUE
from config.observability_metrics import TRAINER
from tests.training.conftest import REPO
from training.badput import CAUSES
from training.config_parsing import ConfigError
from training.faults import ENV_VAR as FAULTS_ENV
from training.metrics_export import METRICS, RECOVERY_PHASE_SECONDS, TrainingMetrics, start
from training.presets import build_config

LOCALHOST = "127.0.0.1"
TRAINER_ROWS = {name: m for name, m in CATALOGUE.items() if m.source is TRAINER}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, tuple[str, float]]:
    """Sample name -> (family type, value) of one GET of the endpoint."""
    with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        _series(sample.name, sample.labels): (family.type, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _series(name: str, labels: dict[str, str]) -> str:
    """`name`, or `name{label="value"}` for a labelled sample (the exporter sets one label)."""
    return name + "".join(f'{{{key}="{value}"}}' for key, value in labels.items())


def _badput(**seconds: float) -> dict[str, tuple[str, float]]:
    """The badput counter's series: every cause, at 0 unless given."""
    return {
        _series("hptrain_badput_seconds_total", {"cause": cause}): (
            "counter",
            seconds.get(cause, 0.0),
        )
        for cause in CAUSES
    }


@pytest.fixture
def served() -> Iterator[TrainingMetrics]:
    exporter = TrainingMetrics(publish=True)
    assert exporter.serve(0, LOCALHOST)  # an ephemeral port
    yield exporter
    exporter.close()


def test_exported_names_and_kinds_are_the_catalogues_trainer_rows() -> None:
    # One list in the image (training/ only), one in the platform: held equal here.
    assert {m.name: m.kind for m in METRICS} == {
        name: row.kind.value for name, row in TRAINER_ROWS.items()
    }
    assert all(m.help for m in METRICS)


def test_serves_the_catalogue_series_over_http(served: TrainingMetrics) -> None:
    served.record_step(0.25, 32768.0, 0.875)
    served.record_checkpoint(1.5, committed=True)
    served.record_checkpoint(2.5, committed=False)
    served.record_checkpoint(0.5, committed=True)
    served.record_recovery({"detect": 9.0, "abort": 9.0, "rendezvous": 9.0})
    # The last recovery's phases replace the one before's, a phase it lacks included.
    served.record_recovery(
        {"detect": 2.0, "abort": 0.25, "state_transfer": 1.5, "first_step": 0.75}
    )
    served.record_badput({"startup": 4.0, "recomputed_steps": 3.0})
    # A cause's estimate that went down leaves its counter where it was.
    served.record_badput({"startup": 4.0, "recomputed_steps": 2.5, "data_wait": 0.5})
    assert served.port is not None
    samples = _scrape(served.port)
    names = {name.split("{")[0] for name in samples}
    assert names == {s for row in TRAINER_ROWS.values() for s in row.series()} - {
        "hptrain_recovery_rendezvous_seconds"
    }
    assert samples == {
        **_badput(startup=4.0, recomputed_steps=3.0, data_wait=0.5),
        "hptrain_step_seconds": ("gauge", 0.25),
        "hptrain_tokens_per_second": ("gauge", 32768.0),
        "hptrain_goodput_ratio": ("gauge", 0.875),
        "hptrain_checkpoint_blocking_seconds": ("gauge", 0.5),  # the last checkpoint's
        "hptrain_checkpoints_committed_total": ("counter", 2.0),
        "hptrain_checkpoints_failed_total": ("counter", 1.0),
        "hptrain_recovery_detect_seconds": ("gauge", 2.0),
        "hptrain_recovery_abort_seconds": ("gauge", 0.25),
        "hptrain_recovery_state_transfer_seconds": ("gauge", 1.5),
        "hptrain_recovery_first_step_seconds": ("gauge", 0.75),
    }


def test_gauges_appear_once_measured_counters_from_zero(served: TrainingMetrics) -> None:
    assert served.port is not None
    assert _scrape(served.port) == {
        "hptrain_checkpoints_committed_total": ("counter", 0.0),
        "hptrain_checkpoints_failed_total": ("counter", 0.0),
        **_badput(),
    }


def test_port_zero_serves_nothing_and_reports_nothing() -> None:
    exporter = start(0, rank=0, local_rank=0)
    assert (exporter.server, exporter.port, exporter.publish) == (None, None, False)
    exporter.record_step(1.0, 1.0, 1.0)
    exporter.record_checkpoint(1.0, committed=True)
    assert list(exporter.registry.collect()) == []
    exporter.close()


def test_only_local_rank_zero_listens() -> None:
    port = _free_port()
    exporter = start(port, rank=1, local_rank=1)
    assert exporter.server is None
    with socket.socket() as probe:
        assert probe.connect_ex((LOCALHOST, port)) != 0  # nothing listens there
    exporter.close()


def test_other_nodes_serve_an_empty_page() -> None:
    # Local rank 0 of node 2: it answers the collector, but only global rank 0 reports, so a
    # job has one series per metric whatever its node count.
    exporter = start(_free_port(), rank=16, local_rank=0, addr=LOCALHOST)
    try:
        exporter.record_step(1.0, 2.0, 0.5)
        exporter.record_checkpoint(3.0, committed=True)
        assert exporter.port is not None
        assert _scrape(exporter.port) == {}
    finally:
        exporter.close()


def test_a_port_in_use_is_one_line_and_training_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind((LOCALHOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        exporter = start(port, rank=0, local_rank=0, addr=LOCALHOST)
    err = capsys.readouterr().err
    assert exporter.server is None
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.fullmatch(
        rf"hptrain: metrics port {port} unavailable \(.+\); "
        r"training continues without the metrics endpoint\n",
        err,
    ), err
    exporter.record_step(1.0, 1.0, 1.0)  # still safe to call
    exporter.close()


@pytest.mark.parametrize("port", [-1, 1, 80, 1023, 65536])
def test_metrics_port_outside_the_range_is_one_config_error(port: int) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config("tiny", [f"metrics.port={port}"])
    assert str(caught.value) == f"metrics.port must be 0 (off) or 1024-65535, got {port}"


@pytest.mark.parametrize("port", [0, 1024, 9410, 65535])
def test_metrics_port_in_range_is_accepted(port: int) -> None:
    assert build_config("tiny", [f"metrics.port={port}"]).metrics.port == port
    assert build_config("tiny").metrics.port == 0  # off unless asked


def test_client_library_is_pinned_alike_in_the_image_and_the_project() -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["training"]
    image = (REPO / "training" / "requirements-container.txt").read_text().splitlines()
    pins = [line for line in extra if line.startswith("prometheus-client==")]
    assert len(pins) == 1 and pins[0] in image


@pytest.mark.slow
def test_a_cpu_run_is_scraped_while_it_trains(tmp_path: Path) -> None:
    port = _free_port()
    # Rank 0 stops before step 12 (a real hang: the main thread sleeps), so the endpoint stays
    # up, with the fast checkpoint of step 5 committed, however slow the machine is.
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        **{FAULTS_ENV: json.dumps({"hang_rank": 0, "hang_at_step": 12})},
    )
    cmd = [
        sys.executable,
        "-m",
        "training.train",
        "--preset",
        "tiny",
        "--out",
        str(tmp_path / "run"),
        "--set",
        f"metrics.port={port}",
        "--set",
        "checkpoint.fast_interval=5",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    samples: dict[str, tuple[str, float]] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                samples = _scrape(port)
            except OSError:
                samples = {}
            if samples.get("hptrain_checkpoints_committed_total", ("", 0.0))[1] >= 1 and (
                "hptrain_goodput_ratio" in samples
            ):
                break
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    # Every series of the catalogue but the recovery phases, which appear after a recovery.
    recovery = {spec.name for spec in RECOVERY_PHASE_SECONDS.values()}
    expected = {s for row in TRAINER_ROWS.values() for s in row.series()} - recovery
    assert {name.split("{")[0] for name in samples} == expected, out[-2000:] + err[-2000:]
    assert 0 < samples["hptrain_goodput_ratio"][1] <= 1
    # Start-up (imports, process group, model) took time; nothing was lost to a recovery.
    badput = {name: value for name, (_, value) in samples.items() if name.startswith("hptrain_bad")}
    assert set(badput) == set(_badput())
    assert badput[_series("hptrain_badput_seconds_total", {"cause": "startup"})] > 0
    assert badput[_series("hptrain_badput_seconds_total", {"cause": "restart"})] == 0
    assert samples["hptrain_step_seconds"][1] > 0
    assert samples["hptrain_tokens_per_second"][1] > 0
    assert samples["hptrain_checkpoints_failed_total"][1] == 0
    # The fixed log lines go on as before.
    assert re.search(r"^HPTRAIN step=\d+ loss=", out, re.M), out[-2000:]
