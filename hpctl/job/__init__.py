"""HyperPodPyTorchJob manifests (HyperPod training operator, `sagemaker.amazonaws.com/v1`),
rendered from a validated job. The command (`hpctl job render`) is `hpctl.job_cmd`."""
