"""Kubernetes manifests vendored from AWS (the HyperPod dependency components: device
plugins, the health monitoring agent, their RBAC), as published, with images pinned at render
time from config/images.py. Facts: the node model reads their DaemonSets' requests
(config/node_model.py) and platform_constructs/hyperpod_dependencies.py applies them."""

from pathlib import Path

MANIFEST_DIR = Path(__file__).resolve().parent
