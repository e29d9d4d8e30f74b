"""HyperPodPyTorchJob manifests (HyperPod training operator, `sagemaker.amazonaws.com/v1`),
rendered from a validated job, and the job lifecycle on an environment's cluster.

- `api`: the Python API every `hpctl job` command calls (docs/python-api.md): render,
  submit, list, describe, logs and cancel.
- `spec`: `JobSpec`, a validated job: what a user asked for, checked against its platform
  facts and its trainer preset. `entry_points`: a team's own module or program.
- `platform`: `JobPlatform`, what the environment decides for a job on one instance group,
  read once from its config and plan (`platform_for`).
- `plan`: `JobPlan`, what follows from the choices, the platform and the preset (parallel
  settings, elastic sizes, placement, checkpoint tiers, batch), each computed once.
- `environment`: `spec_for_environment` builds a JobSpec from an environment's config and the
  user's options, so a job can only ask for what the platform deployed.
- `render`: `render_job`, the manifest for a JobSpec; pure, so it can be diffed, reviewed and
  tested without a cluster.
- `log_rules`: the elastic agent's log-monitoring rules, matched against the trainer's lines.
- `scaling`: the trainer's parallel settings a job renders (HSDP across nodes, tensor
  parallelism within one) and an elastic job's runnable sizes and common batch.
- `kube`: the Kubernetes API calls of the lifecycle (official client, the kubeconfig
  `hpctl kubeconfig` writes) and API failures as one line with the fix.
- `lifecycle`: a job's state, admission and description from the job, its Kueue Workload,
  pods and events (pure). `watch`: its Workload, queue position and admission wait.
- `archive`: a job's log from CloudWatch Logs. `dashboard`: its per-job Grafana link.
- `cli_options`: the options of `hpctl job`, each defined once.

The commands (`hpctl job render|submit|list|describe|logs|cancel`) are `hpctl.job_cmd`, which
holds their options and printing only. The renderer belongs to `hpctl`, not to the training
image: it reads the trainer's presets (`training.presets`), never the other way round.
"""
