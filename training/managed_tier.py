"""Optional fast tier backed by HyperPod managed tiered checkpointing.

When the `amzn-sagemaker-checkpointing` package is importable (and the cluster has tiered
storage enabled), the fast tier goes through its DCP StorageWriter/Reader: checkpoints land
in cluster CPU memory and are replicated across nodes by the service, which survives the
loss of a node, unlike a plain node-local directory. Everything else (schedule, blocking
accounting, resume selection) stays in CheckpointManager. Without the package this module is
inert and the fast tier is a plain directory.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

BACKEND_NAME = "sagemaker-tiered"

try:  # guarded: the package only exists in images built for managed tiered checkpointing
    from amzn_sagemaker_checkpointing.checkpointing.filesystem.filesystem import (  # type: ignore[import-not-found]  # optional, not installed here
        SageMakerTieredStorageReader,
        SageMakerTieredStorageWriter,
    )
    from amzn_sagemaker_checkpointing.config.sagemaker_checkpoint_config import (  # type: ignore[import-not-found]  # optional, not installed here
        SageMakerCheckpointConfig,
    )

    AVAILABLE = True
except ImportError:
    AVAILABLE = False


class ManagedTier:
    def __init__(self, world_size: int) -> None:
        kwargs: dict[str, Any] = {
            # One namespace per training job so restarts find their own checkpoints.
            "namespace": os.environ.get("HPTRAIN_JOB_NAME")
            or os.environ.get("JOB_NAME")
            or f"hptrain-{int(time.time())}",
            "world_size": world_size,
        }
        s3 = os.environ.get("HPTRAIN_MANAGED_S3_PATH")
        if s3:
            kwargs["s3_tier_base_path"] = s3
        self.config = SageMakerCheckpointConfig(**kwargs)

    def writer(self, step: int) -> Any:
        return SageMakerTieredStorageWriter(checkpoint_config=self.config, step=step)

    def reader(self, step: int) -> Any:
        return SageMakerTieredStorageReader(checkpoint_config=self.config, step=step)


def open_if_enabled(backend: str, *, world_size: int) -> ManagedTier | None:
    if backend == "local" or (backend == "auto" and not AVAILABLE):
        return None
    if not AVAILABLE:
        raise RuntimeError(
            "checkpoint.fast_backend=managed but amzn-sagemaker-checkpointing is not installed"
        )
    return ManagedTier(world_size)


def is_managed(path: Path) -> bool:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(manifest.get("backend") == BACKEND_NAME)
