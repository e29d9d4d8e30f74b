"""Run tracking in MLflow (a local file store) and the held-out evaluation of durable
checkpoints, through real 2-rank training runs, and how a job gets its tracking URI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.conftest import LaunchResult, launch
from training import tracking
from training.environment import MLFLOW_TRACKING_URI_ENV
from training.evaluation import EVAL_LOG, eval_source
from training.export_hf import load_dcp_model
from training.model import Transformer
from training.presets import build_config
from training.run_identity import RunIdentity

# The module's tracked run is shared: keep its tests on one xdist worker.
pytestmark = pytest.mark.xdist_group("tracking")

STEPS = 12
# Durable checkpoints at steps 5 (it fails to commit: a full disk) and 10, the final one at 12;
# the second attempt's final one at 15.
COMMITTED = [10, 12, 15]
OVERRIDES = [
    "checkpoint.durable_interval=5",
    "checkpoint.durable_keep=4",
    "checkpoint.fast_interval=0",
    "eval.batches=2",
]
EXPERIMENT = "pretraining-test"


@pytest.fixture(scope="module")
def tracked(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[LaunchResult, LaunchResult, str]:
    """A run that takes its tracking URI from the environment (as a job does), whose durable
    checkpoint of step 5 fails to commit, then a second attempt of the same job, resumed and
    run longer with another learning rate."""
    root = tmp_path_factory.mktemp("tracked")
    uri = f"file://{root / 'mlruns'}"
    mp = pytest.MonkeyPatch()
    # The file store is in maintenance mode in MLflow 3; this opts in explicitly.
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mp.setenv(MLFLOW_TRACKING_URI_ENV, uri)
    try:
        out = root / "run"
        extra = [*OVERRIDES, f"tracking.experiment={EXPERIMENT}"]
        first = launch(out, "--disk-full-at-checkpoint", "5", steps=STEPS, overrides=extra)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        (out / "summary.json").rename(out / "summary-1.json")
        second = launch(out, steps=STEPS + 3, overrides=[*extra, "optim.lr=0.001"])
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    finally:
        mp.undo()
    return first, second, uri


def client(uri: str) -> Any:
    import os

    from mlflow import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    return MlflowClient(tracking_uri=uri)


def the_run(uri: str) -> Any:
    c = client(uri)
    experiment = c.get_experiment_by_name(EXPERIMENT)
    (run,) = c.search_runs([experiment.experiment_id])
    return run


def history(uri: str, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client(uri).get_metric_history(run_id, key)}


def test_both_attempts_log_into_one_run_that_ends_finished(tracked: Any) -> None:
    _, _, uri = tracked
    run = the_run(uri)
    assert run.info.status == "FINISHED"
    # The tag follows the ledger: the attempt record the second launch wrote last.
    records = [json.loads(p.read_text()) for p in (tracked[1].out / "attempts").glob("*.json")]
    latest = max(records, key=lambda r: r["started_unix"])
    assert run.data.tags["hptrain.attempt"] == str(latest["attempt"])
    assert run.data.tags["hptrain.exit_reason"] == "completed"
    assert run.data.metrics["summary.steps"] == STEPS + 3


def test_the_config_is_logged_and_a_resumed_change_is_recorded_as_a_tag(tracked: Any) -> None:
    _, _, uri = tracked
    run = the_run(uri)
    params = run.data.params
    assert params["training.steps"] == str(STEPS)  # the first attempt's, as created
    assert params["optim.lr"] == str(build_config("tiny").optim.lr)
    assert params["model.dim"] == "64"
    assert run.data.tags["hptrain.changed.optim.lr"] == "0.001"
    assert run.data.tags["hptrain.changed.training.steps"] == str(STEPS + 3)


def test_the_run_identity_is_the_checkpoints(tracked: Any) -> None:
    first, _, uri = tracked
    run = the_run(uri)
    manifest = json.loads(
        # The last attempt's tags: its identity, as its checkpoints record it.
        (first.out / "ckpt" / "durable" / "step_00000015" / "manifest.json").read_text()
    )
    assert (
        run.data.tags["hptrain.config_digest"]
        == RunIdentity.from_json(manifest["run"]).config_digest
    )
    assert run.data.tags["hptrain.world_size"] == "2"
    assert run.data.tags["hptrain.run_dir"] == str(first.out.resolve())


def test_every_step_loss_is_logged_as_printed(tracked: Any) -> None:
    first, second, uri = tracked
    printed = {
        int(m[1]): float(m[2])
        for r in (first, second)
        for m in (re.match(r"HPTRAIN step=(\d+) loss=([\d.]+)", ln) for ln in r.stdout.splitlines())
        if m
    }
    logged = history(uri, the_run(uri).info.run_id, "loss")
    assert sorted(logged) == list(range(1, STEPS + 4))
    for step, loss in printed.items():
        assert logged[step] == pytest.approx(loss, abs=5e-5)


def test_committed_checkpoints_are_logged(tracked: Any) -> None:
    _, _, uri = tracked
    committed = history(uri, the_run(uri).info.run_id, "checkpoint.durable.committed_step")
    assert sorted(committed) == COMMITTED
    assert all(committed[s] == s for s in committed)


def test_each_durable_checkpoint_gets_an_evaluation_in_the_log_the_file_and_mlflow(
    tracked: Any,
) -> None:
    first, second, uri = tracked
    records = [json.loads(ln) for ln in (first.out / EVAL_LOG).read_text().splitlines()]
    assert [r["step"] for r in records] == COMMITTED
    assert {r["tier"] for r in records} == {"durable"} and {r["batches"] for r in records} == {2}
    lines = first.lines("HPTRAIN eval ") + second.lines("HPTRAIN eval ")
    assert len(lines) == len(COMMITTED)
    logged = history(uri, the_run(uri).info.run_id, "eval.loss")
    assert logged == pytest.approx({r["step"]: r["loss"] for r in records})


def test_an_evaluation_is_the_held_out_loss_of_the_checkpoints_weights(tracked: Any) -> None:
    first, _, _ = tracked
    records = {
        r["step"]: r["loss"]
        for r in map(json.loads, (first.out / EVAL_LOG).read_text().splitlines())
    }
    state, model_cfg = load_dcp_model(first.out / "ckpt" / "durable" / "step_00000010")
    cfg = build_config("tiny", OVERRIDES)
    model = Transformer(model_cfg, max_seq_len=cfg.training.seq_len)
    model.load_state_dict(state)
    source = eval_source(cfg)
    # The held-out samples: past the training epoch, never trained on.
    assert source.num_samples == 2 * cfg.training.global_batch_size
    rows = torch.stack([torch.from_numpy(source.sample(i)) for i in range(source.num_samples)])
    with torch.no_grad():
        logits = model(rows[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten())
    assert records[10] == pytest.approx(loss.item(), abs=1e-4)


def test_the_tracking_uri_comes_from_the_config_else_the_environment() -> None:
    cfg = build_config("tiny")
    env = {
        MLFLOW_TRACKING_URI_ENV: "arn:aws:sagemaker:us-east-1:111111111111:mlflow-tracking-server/x"
    }
    assert cfg.tracking_uri({}) == ""
    assert cfg.tracking_uri(env) == env[MLFLOW_TRACKING_URI_ENV]
    assert build_config("tiny", ["tracking.mlflow_uri=file:///m"]).tracking_uri(env) == "file:///m"
    assert build_config("tiny", ["tracking.mlflow_uri=off"]).tracking_uri(env) == ""


def test_an_unreachable_server_leaves_training_untracked_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    cfg = build_config("tiny", ["tracking.mlflow_uri=http://127.0.0.1:9"])
    assert tracking.start(cfg, tmp_path, RunIdentity.of(cfg, 1), 1) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(
        "hptrain: mlflow tracking at http://127.0.0.1:9 unavailable, training without it: "
    )


def test_rendered_jobs_read_the_tracking_uri_from_the_team_config_map() -> None:
    from config.teams import MLFLOW_TRACKING_URI_KEY, TEAM_CONFIG_MAP
    from hpctl.job.render import render_job
    from tests.job.conftest import env_spec

    manifest = render_job(env_spec("prod"))
    (container,) = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env[MLFLOW_TRACKING_URI_ENV]["valueFrom"] == {
        "configMapKeyRef": {
            "name": TEAM_CONFIG_MAP,
            "key": MLFLOW_TRACKING_URI_KEY,
            "optional": True,
        }
    }


def test_a_checkpoint_that_fails_to_commit_records_no_evaluation(tracked: Any) -> None:
    first, _, uri = tracked
    assert first.lines("HPTRAIN checkpoint step=5 tier=durable")[-1].endswith("status=failed")
    records = [json.loads(ln) for ln in (first.out / EVAL_LOG).read_text().splitlines()]
    assert 5 not in [r["step"] for r in records]
    assert 5 not in history(uri, the_run(uri).info.run_id, "eval.loss")
