"""Optional tier storage backed by HyperPod managed tiered checkpointing.

When the `amzn-sagemaker-checkpointing` package is importable (and the cluster has tiered
storage enabled), a tier with storage "managed" (or "auto", as the fast tier by default) goes
through its DCP StorageWriter/Reader: checkpoints land in cluster CPU memory and are
replicated across nodes by the service, which survives the loss of a node, unlike a plain
node-local directory. Everything else (schedule, blocking accounting, resume selection) stays
in CheckpointManager. Without the package this module is inert and "auto" means a plain
directory (tiers.ManagedStorageTier).
"""

from __future__ import annotations

import dataclasses
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
    """The library's writer and reader for one job: `namespace` must be the same on every
    restart of the job (so restarts find their checkpoints) and unique per job; `s3_path`
    is the S3 tier ("" = in-memory tier only), which gets the first managed checkpoint at
    or after every multiple of `s3_interval` steps. All come from the trainer config
    (checkpoint.managed_namespace, managed_s3_path, managed_s3_interval).

    "At or after", not "at": a multiple of the interval is often a durable step, which the
    durable tier takes instead of this one (CheckpointConfig.tier_due), so "at" could mean
    never. After a restart the first managed checkpoint goes to S3 as well."""

    def __init__(
        self, world_size: int, namespace: str, s3_path: str = "", s3_interval: int = 0
    ) -> None:
        kwargs: dict[str, Any] = {"namespace": namespace, "world_size": world_size}
        if s3_path:
            kwargs["s3_tier_base_path"] = s3_path
        self.namespace, self.s3_path, self.s3_interval = namespace, s3_path, s3_interval
        self.config = SageMakerCheckpointConfig(**kwargs)
        self._s3_window = 0  # step // s3_interval of the last checkpoint sent to S3

    def _to_s3(self, step: int) -> bool:
        """Whether the checkpoint of `step` also goes to S3 (and record it if so)."""
        if not self.s3_path or self.s3_interval <= 0:
            return False
        window = step // self.s3_interval
        if window <= self._s3_window:
            return False
        self._s3_window = window
        return True

    def writer(self, step: int) -> Any:
        """The writer for one checkpoint (called once per checkpoint, every rank alike)."""
        # The library's save_to_s3 defaults to off and is decided per checkpoint by the
        # training loop (its README: save_to_s3 = step % s3_ckpt_freq == 0). A copy per
        # writer, so a checkpoint still in flight keeps its own setting.
        config = dataclasses.replace(self.config, save_to_s3=self._to_s3(step))
        return SageMakerTieredStorageWriter(checkpoint_config=config, step=step)

    def reader(self, step: int) -> Any:
        return SageMakerTieredStorageReader(checkpoint_config=self.config, step=step)
