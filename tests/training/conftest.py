"""Shared helpers for the training tests: run the local launcher and read its results."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from filelock import FileLock

from tests.training import loglines
from training.checkpoint.config import CheckpointConfig, TierConfig
from training.launch import command

REPO = Path(__file__).resolve().parents[2]
STEPS = 40
# Small, fixed schedule shared by every multi-process test (and the reference run), so that
# final parameter digests are comparable bit for bit.
BASE_OVERRIDES = [
    # Plain directories even where the managed tier's library is installed (the training
    # image): off a HyperPod cluster there is no memory service for it to write to.
    "checkpoint.fast_backend=local",
    "checkpoint.fast_interval=4",
    "checkpoint.durable_interval=10",
    "checkpoint.fast_keep=3",
    "checkpoint.durable_keep=2",
]


@dataclass
class LaunchResult:
    returncode: int
    stdout: str
    stderr: str
    out: Path

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.out / "summary.json").read_text())

    def lines(self, prefix: str) -> list[str]:
        return [ln for ln in self.stdout.splitlines() if ln.startswith(prefix)]


def step_losses(r: LaunchResult) -> dict[int, float]:
    """Loss by step from rank 0's step lines (the last attempt's, where a step was redone)."""
    return {int(s["step"]): float(s["loss"]) for s in loglines.find(loglines.STEP, r.stdout)}


def read_sample_trace(directory: Path) -> list[dict[str, Any]]:
    """Every line the ranks' SampleTrace wrote under `directory` (HPTRAIN_SAMPLE_TRACE)."""
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def launch(
    out: Path,
    *extra: str,
    steps: int = STEPS,
    overrides: list[str] | None = None,
    timeout: float = 150,
    nproc: int = 2,
    env: dict[str, str] | None = None,
) -> LaunchResult:
    cmd = command(
        out,
        "--timeout-s",
        str(timeout - 10),
        *extra,
        nproc=nproc,
        steps=steps,
        overrides=BASE_OVERRIDES + (overrides or []),
    )
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return LaunchResult(proc.returncode, proc.stdout, proc.stderr, out)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> LaunchResult:
    """One fault-free run that every fault test compares against.

    Run once per test session even under xdist: the first worker to get here runs it into
    the session's shared temporary root, the others wait on the lock and read its result.
    So the fault tests themselves spread over the workers (tests only read the run)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        # One process: nothing to share (and the parent of basetemp outlives the session).
        result = launch(tmp_path_factory.mktemp("reference_run"))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result
    # Under xdist the parent of each worker's basetemp is this session's own root.
    shared = tmp_path_factory.getbasetemp().parent
    record = shared / "reference_run.json"
    with FileLock(str(shared / "reference_run.lock")):
        if record.exists():
            fields = json.loads(record.read_text())
            result = LaunchResult(
                fields["returncode"], fields["stdout"], fields["stderr"], Path(fields["out"])
            )
        else:
            result = launch(shared / "reference_run")
            fields = {
                "returncode": result.returncode,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "out": str(result.out),
            }
            record.write_text(json.dumps(fields))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture
def world_of_one(tmp_path: Path) -> Iterator[None]:
    """A real (gloo, one rank) process group, for code that runs collectives."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def local_checkpoints(
    root: Path, tiers: tuple[TierConfig, ...] | None = None, **settings: Any
) -> CheckpointConfig:
    """`tiers` (default: the default ones) as plain directories, each at `root/<tier name>`."""
    tiers = tiers or CheckpointConfig().tiers
    return CheckpointConfig(
        tiers=tuple(replace(t, dir=str(root / t.name), storage="local") for t in tiers),
        **settings,
    )


@dataclass(frozen=True)
class S3Server:
    """An S3 endpoint on localhost (moto's server) and a bucket in it."""

    endpoint: str
    bucket: str

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def upload_dir(self, local: Path, prefix: str) -> str:
        """Copies every file of `local` under `prefix`; returns its s3:// URL."""
        from training import s3

        for path in sorted(local.iterdir()):
            if path.is_file():
                s3.client().upload_file(str(path), self.bucket, f"{prefix}/{path.name}")
        return self.url(prefix)


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 on a free local port; boto3 reaches it through AWS_ENDPOINT_URL_S3, as the
    trainer's subprocesses do (they inherit the environment)."""
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in (*S3_ENV, "AWS_ENDPOINT_URL_S3")}
    os.environ.update(S3_ENV, AWS_ENDPOINT_URL_S3=endpoint)
    from training import s3

    s3.client().create_bucket(Bucket="hptrain-test")
    try:
        yield S3Server(endpoint, "hptrain-test")
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
