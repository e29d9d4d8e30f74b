"""Experiment tracking in MLflow (tracking.mlflow_uri), from rank 0.

One MLflow run per training job: its id is kept in the run directory, so every restart of the
job (a new attempt) logs into the same run. Logged: the resolved config as parameters (at
creation; a resume that changes a value records the new one as a tag ``hptrain.changed.<key>``,
since MLflow parameters cannot change), the run identity and attempt as tags, step metrics, checkpoint events, evaluations
and the summary. Nothing is written as an artifact: the jobs' identities need no access to the
artifact store.

A SageMaker managed tracking server is named by its ARN; the `sagemaker-mlflow` plugin (in
the image) signs the requests with the job's AWS credentials. Tracking never stops training: a
failing server is reported once per kind of call and the run goes on.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from training.config import JobConfig
from training.run_identity import RunIdentity

# Kept in the run directory: the MLflow run every attempt of this job logs into.
RUN_ID_FILE = "mlflow_run_id"
# Step metrics are sent in batches of this many steps (one request each), asynchronously.
FLUSH_EVERY_STEPS = 10
TAG_PREFIX = "hptrain."


def _flatten(config: dict[str, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}
    for section, fields in config.items():
        if isinstance(fields, dict):
            for name, value in fields.items():
                flat[f"{section}.{name}"] = str(value)
        else:
            flat[section] = str(fields)
    return flat


class Tracker:
    """rank 0's MLflow client for one job; every method is safe to call when it is off."""

    def __init__(
        self, cfg: JobConfig, uri: str, out: Path, identity: RunIdentity, attempt: int
    ) -> None:
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self._warned: set[str] = set()
        self._pending: list[Any] = []
        experiment = cfg.tracking.experiment or out.resolve().name
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = (
            found.experiment_id if found is not None else self.client.create_experiment(experiment)
        )
        id_file = out / RUN_ID_FILE
        params = _flatten(cfg.to_dict())
        if id_file.exists():
            self.run_id = id_file.read_text().strip()
            logged = self.client.get_run(self.run_id).data.params
            changed = {k: v for k, v in params.items() if k in logged and logged[k] != v}
            for key, value in changed.items():
                self.client.set_tag(self.run_id, f"{TAG_PREFIX}changed.{key}", value)
        else:
            run = self.client.create_run(experiment_id, run_name=out.resolve().name)
            self.run_id = run.info.run_id
            from mlflow.entities import Param

            batch = [Param(k, v) for k, v in params.items()]
            for i in range(0, len(batch), 100):  # MLflow's limit of params per request
                self.client.log_batch(self.run_id, params=batch[i : i + 100])
            tmp = id_file.with_name(id_file.name + ".part")
            tmp.write_text(self.run_id + "\n")
            os.replace(tmp, id_file)
        tags = {
            "config_digest": identity.config_digest,
            "preset": identity.preset,
            "world_size": str(identity.world_size),
            "attempt": str(attempt),
            "run_dir": str(out.resolve()),
        }
        for key, value in tags.items():
            self.client.set_tag(self.run_id, f"{TAG_PREFIX}{key}", value)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - tracking must not stop training
            if what not in self._warned:
                self._warned.add(what)
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                sys.stderr.write(f"hptrain: mlflow {what} failed (training goes on): {first}\n")

    def log_metrics(self, step: int, values: dict[str, float], *, flush: bool = True) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending += [Metric(k, float(v), now, step) for k, v in values.items()]
        if flush:
            self.flush()

    def log_step(self, step: int, values: dict[str, float]) -> None:
        self.log_metrics(step, values, flush=step % FLUSH_EVERY_STEPS == 0)

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), 1000):  # MLflow's limit of metrics per request
            self._call(
                "log_batch", self.client.log_batch, self.run_id, metrics=pending[i : i + 1000]
            )

    def checkpoint(self, step: int, tier: str, blocking_s: float) -> None:
        self.log_metrics(
            step,
            {
                f"checkpoint.{tier}.committed_step": step,
                f"checkpoint.{tier}.blocking_s": blocking_s,
            },
        )

    def finish(self, summary: dict[str, Any]) -> None:
        numbers = {
            f"summary.{k}": float(v)
            for k, v in summary.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        self.log_metrics(int(summary.get("steps", 0)), numbers)
        self._call(
            "set_tag",
            self.client.set_tag,
            self.run_id,
            f"{TAG_PREFIX}exit_reason",
            summary.get("exit_reason", ""),
        )
        status = "FINISHED" if summary.get("exit_reason") == "completed" else "KILLED"
        if not summary.get("final_checkpoint_committed", True):
            status = "FAILED"
        self._call("set_terminated", self.client.set_terminated, self.run_id, status)


def start(cfg: JobConfig, out: Path, identity: RunIdentity, attempt: int) -> Tracker | None:
    """The tracker when a tracking URI is in effect (JobConfig.tracking_uri; call on rank 0
    only), else None."""
    uri = cfg.tracking_uri(os.environ)
    if not uri:
        return None
    try:
        return Tracker(cfg, uri, out, identity, attempt)
    except Exception as e:  # noqa: BLE001 - an unreachable server must not stop training
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        sys.stderr.write(
            f"hptrain: mlflow tracking at {uri} unavailable, training without it: {first}\n"
        )
        return None
