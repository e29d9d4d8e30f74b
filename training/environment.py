"""The platform's job environment, a contract with `hpctl job render`: the variables it sets
in the container of every job, whatever code the job runs (README, "Job environment"), and
the trainer setting each one stands for. The trainer takes them as defaults that its command
line (`--out`, `--set`) overrides (training/train.py)."""

from __future__ import annotations

from training.checkpoint.config import CheckpointConfig, tier_key

RUN_DIR_ENV = "HPTRAIN_RUN_DIR"
CHECKPOINT_DIR_ENV = "HPTRAIN_CHECKPOINT_DIR"
NODE_CHECKPOINT_DIR_ENV = "HPTRAIN_NODE_CHECKPOINT_DIR"
MANAGED_S3_PATH_ENV = "HPTRAIN_MANAGED_S3_PATH"
METRICS_PORT_ENV = "HPTRAIN_METRICS_PORT"
JOB_NAME_ENV = "HPTRAIN_JOB_NAME"
# The platform's MLflow tracking server, set in jobs from the team ConfigMap
# (hpctl/job/render.py): what an empty tracking.mlflow_uri means (JobConfig.tracking_uri).
MLFLOW_TRACKING_URI_ENV = "HPTRAIN_MLFLOW_TRACKING_URI"
# A node-local directory for compiled code (parallel.compile_cache_dir), which a restarted
# rank on the same node finds: its first step then loads rather than compiles.
COMPILE_CACHE_DIR_ENV = "HPTRAIN_COMPILE_CACHE_DIR"


def environment_tiers(c: CheckpointConfig) -> dict[str, str]:
    """The tier whose directory each checkpoint variable names: the shared directory is the
    last (most durable) tier's, the node directory the first per-node tier's."""
    tiers = {CHECKPOINT_DIR_ENV: c.tiers[-1].name}
    node = next((t.name for t in c.tiers if t.per_node), None)
    if node is not None and node != tiers[CHECKPOINT_DIR_ENV]:
        tiers[NODE_CHECKPOINT_DIR_ENV] = node
    return tiers


def environment_keys(c: CheckpointConfig) -> dict[str, str]:
    """The ``--set`` key each variable stands for, but the run directory (``--out``); the
    managed tier's namespace is the job's name."""
    return {
        METRICS_PORT_ENV: "metrics.port",
        MANAGED_S3_PATH_ENV: "checkpoint.managed_s3_path",
        JOB_NAME_ENV: "checkpoint.managed_namespace",
        COMPILE_CACHE_DIR_ENV: "parallel.compile_cache_dir",
        **{env: tier_key(tier, "dir") for env, tier in environment_tiers(c).items()},
    }
