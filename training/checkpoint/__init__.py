"""Checkpoints: CheckpointManager (manager.py) and the parts it puts together, listed there.

The tiers themselves are data (``checkpoint.tiers``, training.config); tiers.py registers the
storage a tier can use, managed.py is HyperPod managed tiered checkpointing's writer and reader.
"""
