"""HyperPodPyTorchJob manifests (HyperPod training operator, `sagemaker.amazonaws.com/v1`),
rendered from a validated job.

- `spec`: `JobSpec`, a validated job: what a user chooses plus what the cluster dictates.
- `environment`: `spec_for_environment` builds a JobSpec from an environment's config and the
  user's options, so a job can only ask for what the platform deployed.
- `render`: `render_job`, the manifest for a JobSpec; pure, so it can be diffed, reviewed and
  tested without a cluster.
- `log_rules`: the elastic agent's log-monitoring rules, matched against the trainer's lines.
- `scaling`: the trainer's parallel settings a job renders (HSDP across nodes, tensor
  parallelism within one) and an elastic job's runnable sizes and common batch.
- `kube`: the Kubernetes API calls of the lifecycle commands (official client, the kubeconfig
  `hpctl kubeconfig` writes) and API failures as one line with the fix.
- `lifecycle`: a job's state, admission and description from the job, its Kueue Workload,
  pods and events (pure).

The commands (`hpctl job render|submit|list|describe|logs|cancel`) are `hpctl.job_cmd`. The renderer belongs to `hpctl`, not to
the training image: it reads the trainer's presets (`training.config`), never the other way
round.
"""
