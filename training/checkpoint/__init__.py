"""Checkpoints: the manager (schedule, background save and commit, resume) and its parts.

* manager: CheckpointManager, which puts the parts below together;
* format: one tier's on-disk layout, manifest (with the run identity), commit, validation;
* tiers: the storage kinds a tier can use (a directory, managed tiered checkpointing);
* planning: node-local save planning and the files a load reads;
* staging: the run-long staging buffers (pinned on GPU hosts);
* managed: HyperPod managed tiered checkpointing's writer and reader.

The tiers themselves are data: ``checkpoint.tiers`` in training.config.
"""
