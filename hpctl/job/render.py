"""`render_job`: the HyperPodPyTorchJob manifest (HyperPod training operator,
`sagemaker.amazonaws.com/v1`) for a JobSpec.

Pure: the same spec always gives the same manifest, so it can be diffed, reviewed and tested
without a cluster. Kubernetes and task-governance names (labels, namespace, queue, priority
class, service account, the team ConfigMap) come from `config.kubernetes` and `config.teams`,
the names the stacks create.
"""

from __future__ import annotations

from typing import Any

import yaml

from config.kubernetes import (
    EFA_RESOURCE,
    ELASTIC_AGENT_PORT,
    GPU_RESOURCE,
    HYPERPOD_JOB_GROUP,
    HYPERPOD_JOB_KIND,
    HYPERPOD_JOB_VERSION,
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    NEURON_RESOURCE,
    NODE_HEALTH_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TRAINING_JOB_LABEL,
    local_queue,
    priority_class,
)
from config.team_groups import team_gid, team_uid
from config.teams import (
    DATA_MOUNT,
    HOME_MOUNT,
    MANAGED_TIER_PATH_KEY,
    MLFLOW_TRACKING_URI_KEY,
    TEAM_CONFIG_MAP,
    team_directory,
)
from hpctl.job.entry_points import CommandEntryPoint
from hpctl.job.log_rules import log_rules
from hpctl.job.plan import JobPlan
from hpctl.job.spec import SHM_MOUNT, JobSpec
from training.checkpoint.config import AUTO_STORAGE, tier_key
from training.environment import (
    CHECKPOINT_DIR_ENV,
    COMPILE_CACHE_DIR_ENV,
    JOB_NAME_ENV,
    MANAGED_S3_PATH_ENV,
    METRICS_PORT_ENV,
    MLFLOW_TRACKING_URI_ENV,
    NODE_CHECKPOINT_DIR_ENV,
    RUN_DIR_ENV,
)

API_VERSION = f"{HYPERPOD_JOB_GROUP}/{HYPERPOD_JOB_VERSION}"
KIND = HYPERPOD_JOB_KIND

AGENT_PORT = ELASTIC_AGENT_PORT  # the operator talks to the elastic agent on this port
# The elastic agent only monitors logs that torchrun writes to files, so workers must tee.
AGENT_LOG_DIR = "/tmp/hyperpod"  # noqa: S108 - inside the pod, the agent reads it
TRAINER_MODULE = "training.train"
CONTAINER_NAME = "trainer"
REPLICA_NAME = "worker"
# The job environment every container gets (training.config, README "Job environment").
# The S3 tier of managed tiered checkpointing comes from the team's ConfigMap (the bucket is
# named at deploy time) into MANAGED_S3_PATH_ENV, which Kubernetes also expands into the
# trainer's `--set checkpoint.managed_s3_path=$(HPTRAIN_MANAGED_S3_PATH)` argument.
JOB_ENVIRONMENT = (
    RUN_DIR_ENV,
    CHECKPOINT_DIR_ENV,
    NODE_CHECKPOINT_DIR_ENV,
    COMPILE_CACHE_DIR_ENV,
    METRICS_PORT_ENV,
    JOB_NAME_ENV,
    MANAGED_S3_PATH_ENV,
)
# Under $HOME, an emptyDir on the node's disk that lives as long as the pod.
COMPILE_CACHE_DIR = f"{HOME_MOUNT}/.cache/compile"

HUGEPAGES_2MI_RESOURCE = "hugepages-2Mi"

# Families whose EFA supports GPUDirect RDMA (p4d and newer, Trainium). g5/g6e EFA has no RDMA
# read, so FI_EFA_USE_DEVICE_RDMA=1 would make libfabric fail there.
RDMA_FAMILIES = frozenset(
    {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6e-gb200", "trn1", "trn1n", "trn2"}
)
# Elastic jobs: the HyperPod agent's own rendezvous, through which the operator resizes the
# job (AWS's elastic training example launches `hyperpodrun --rdzv-backend=hyperpod`).
ELASTIC_RDZV_BACKEND = "--rdzv-backend=hyperpod"
# Seconds the operator waits after it sees room before it scales up, and for a faulty pod to
# recover before it scales down: the values of AWS's elastic training example ("Adaptive
# infrastructure for foundation model training with elastic training on SageMaker
# HyperPod"), long enough to ride out a transient, short enough to use idle capacity.
ELASTIC_SCALING_TIMEOUT_S = 60
ELASTIC_FAULTY_SCALE_DOWN_TIMEOUT_S = 30


def _env(plan: JobPlan) -> list[dict[str, Any]]:
    instance = plan.instance
    env = {
        # Workers write to files the agent tails; unbuffered output keeps the hang clock honest.
        "PYTHONUNBUFFERED": "1",
        # WARN prints NCCL's own warnings (including timeouts) to stdout, where rules see them.
        "NCCL_DEBUG": "WARN",
        # Bootstrap over the pod's interface, never loopback or a bridge.
        "NCCL_SOCKET_IFNAME": "^lo,docker",
    }
    if instance.supports_efa:
        env["FI_PROVIDER"] = "efa"
        # Data loader workers fork after EFA memory is registered.
        env["FI_EFA_FORK_SAFE"] = "1"
        if instance.family in RDMA_FAMILIES:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    # Where the platform's paths and ports reach the job's code, whatever it is.
    env.update(
        {
            RUN_DIR_ENV: plan.out_dir,
            CHECKPOINT_DIR_ENV: plan.checkpoint_dir,
            NODE_CHECKPOINT_DIR_ENV: plan.node_checkpoint_dir,
            # Compiled code on the node's disk for the pod's life: a worker the agent
            # restarts in place loads its graphs instead of compiling them again.
            COMPILE_CACHE_DIR_ENV: COMPILE_CACHE_DIR,
            METRICS_PORT_ENV: str(METRICS_PORT),
            JOB_NAME_ENV: plan.spec.name,
        }
    )
    items: list[dict[str, Any]] = [{"name": key, "value": value} for key, value in env.items()]
    # The environment's MLflow server, which the trainer logs to (training/config.py
    # tracking_uri); optional: absent where the platform runs none, and the pod starts.
    items.append(
        {
            "name": MLFLOW_TRACKING_URI_ENV,
            "valueFrom": {
                "configMapKeyRef": {
                    "name": TEAM_CONFIG_MAP,
                    "key": MLFLOW_TRACKING_URI_KEY,
                    "optional": True,
                }
            },
        }
    )
    if plan.managed_storage:
        # The team's S3 tier: the platform writes it into a ConfigMap in every team namespace.
        # Not optional: a pod without the path fails to start rather than checkpoint elsewhere.
        items.append(
            {
                "name": MANAGED_S3_PATH_ENV,
                "valueFrom": {
                    "configMapKeyRef": {"name": TEAM_CONFIG_MAP, "key": MANAGED_TIER_PATH_KEY}
                },
            }
        )
    return items


def _resources(plan: JobPlan) -> dict[str, dict[str, int | str]]:
    """Every device of the node, and the CPU and memory its node model leaves a job once the
    kubelet, tiered storage and the platform's DaemonSets have theirs (its `allocation`)."""
    instance, allocation = plan.instance, plan.spec.platform.allocation
    accelerator = GPU_RESOURCE if instance.accelerator == "nvidia" else NEURON_RESOURCE
    devices: dict[str, int | str] = {accelerator: instance.accelerator_count}
    if instance.supports_efa:
        devices[EFA_RESOURCE] = instance.efa_interfaces
    if allocation.hugepages_2mi_mib:
        # Kubernetes requires a hugepages limit equal to its request.
        devices[HUGEPAGES_2MI_RESOURCE] = f"{allocation.hugepages_2mi_mib}Mi"
    memory = f"{allocation.memory_mib}Mi"
    return {
        "requests": {**devices, "cpu": f"{allocation.cpu_millicores}m", "memory": memory},
        # A memory limit keeps a runaway trainer from starving the node's health agents; no CPU
        # limit, so data loading is never throttled.
        "limits": {**devices, "memory": memory},
    }


def _command(plan: JobPlan) -> list[str]:
    """hyperpodrun, which starts one process per accelerator, with what each runs: the
    project's trainer module, a team's module (`-m`) or a team's program (`--no-python`,
    torchrun's flag for a program that is not a Python script)."""
    entry = plan.spec.entry_point
    if entry is None:
        program = ["-m", TRAINER_MODULE]
    elif isinstance(entry, CommandEntryPoint):
        program = ["--no-python", entry.command[0]]
    else:
        program = ["-m", entry.module]
    return [*_launcher(plan), *program]


def _args(plan: JobPlan) -> list[str]:
    """The arguments of each rank's process."""
    entry = plan.spec.entry_point
    if entry is None:
        return trainer_args(plan)
    if isinstance(entry, CommandEntryPoint):
        return list(entry.command[1:])
    return list(entry.args)


def _launcher(plan: JobPlan) -> list[str]:
    spec = plan.spec
    return [
        "hyperpodrun",
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={plan.instance.accelerator_count}",
        "--tee=3",
        f"--log-dir={AGENT_LOG_DIR}",
        f"--server-port={AGENT_PORT}",
        # Restarts keep the agent's default SIGKILL (a save needing dead peers would only
        # hang); pod deletion forwards SIGTERM, and this is how long the save may take.
        f"--shutdown-timeout={spec.shutdown_timeout_s}",
        *([ELASTIC_RDZV_BACKEND] if spec.elastic else []),
    ]


def trainer_args(plan: JobPlan) -> list[str]:
    """Arguments for `python -m training.train`, every value resolved so the job is explicit."""
    spec = plan.spec
    overrides: dict[str, object] = {
        "training.steps": plan.total_steps,
        # Always explicit: the preset's batch where the world splits it, else the nearest
        # batch that it does (JobConfig.batch_for_world); the trainer's start line prints it
        # beside the preset's.
        "training.global_batch_size": plan.global_batch_size,
        # HSDP across nodes, tensor parallelism within one (hpctl.job.scaling).
        **plan.parallel_overrides,
    }
    for tier in plan.trainer_config.checkpoint.tiers:
        overrides[tier_key(tier.name, "dir")] = plan.tier_dir(tier.name)
        overrides[tier_key(tier.name, "interval")] = plan.tier_interval(tier.name)
        if tier.storage == AUTO_STORAGE:
            # Explicit: the image always has the managed library, but only clusters with
            # tiered storage can serve it ("auto" would pick it everywhere).
            overrides[tier_key(tier.name, "storage")] = plan.tier_storage(tier.name)
    # The endpoint the platform's Prometheus collector scrapes (the named port below).
    overrides["metrics.port"] = METRICS_PORT
    if plan.managed_storage:
        # The library's namespace: the same on every restart, unique per job.
        overrides["checkpoint.managed_namespace"] = spec.name
        # Kubernetes expands $(VAR) in args from the container's env (the ConfigMap value).
        overrides["checkpoint.managed_s3_path"] = f"$({MANAGED_S3_PATH_ENV})"
    args = ["--preset", spec.preset, "--out", plan.out_dir]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    return args


def _pod_template(plan: JobPlan) -> dict[str, Any]:
    spec, platform = plan.spec, plan.spec.platform
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        # A digest names one image, so a cached copy is it (no re-pull of many GiB); a tag
        # can be pushed again, so nodes ask the registry each time.
        "imagePullPolicy": "IfNotPresent" if "@sha256:" in spec.image else "Always",
        "command": _command(plan),
        "args": _args(plan),
        "ports": [
            {"containerPort": AGENT_PORT, "protocol": "TCP"},
            # Scraped by name: the collector keeps only this port of the labelled pods.
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "env": [{"name": "HOME", "value": HOME_MOUNT}, *_env(plan)],
        "resources": _resources(plan),
        # The team's own tree where it lies under /fsx, the datasets read-only: nothing else
        # of the file system (platform_constructs/eks_fsx_volume.py).
        "volumeMounts": [
            {"name": "fsx", "mountPath": team_directory(spec.team)},
            {"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
            {"name": "shm", "mountPath": SHM_MOUNT},
            {"name": "home", "mountPath": HOME_MOUNT},
        ],
        # Pod Security "restricted" (what team namespaces audit). Writable root file system
        # kept: the trainer's libraries (torch's compile caches, NCCL's topology files, pip-
        # installed packages' caches under $HOME) write outside the mounted volumes.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": platform.service_account,
        # Pod Identity credentials come from the EKS Pod Identity agent, not the projected
        # service-account token mount, and neither the elastic agent nor the checkpointing
        # library calls the Kubernetes API: no API token in the pod.
        "automountServiceAccountToken": False,
        "nodeSelector": {
            INSTANCE_GROUP_LABEL: spec.instance_group,
            INSTANCE_TYPE_LABEL: platform.instance_type,
        },
        # Only nodes that passed HyperPod's health checks; others are being checked or replaced.
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": NODE_HEALTH_LABEL,
                                    "operator": "In",
                                    "values": ["Schedulable"],
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "securityContext": pod_security_context(spec),
        # Room for the agent to SIGTERM the workers, wait, then SIGKILL them.
        "terminationGracePeriodSeconds": spec.shutdown_timeout_s + 30,
        "containers": [container],
        "volumes": [
            {"name": "fsx", "persistentVolumeClaim": {"claimName": platform.fsx_claim}},
            {
                "name": "data",
                "persistentVolumeClaim": {"claimName": platform.data_claim, "readOnly": True},
            },
            # NCCL and data loaders need far more shared memory than the runtime's 64 MiB.
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            # $HOME of the team's user, which has no home in the image (config/teams.py).
            {"name": "home", "emptyDir": {}},
        ],
    }
    if platform.taints:
        pod_spec["tolerations"] = [taint.toleration() for taint in platform.taints]
    return {"metadata": {"labels": pod_labels(spec)}, "spec": pod_spec}


def pod_security_context(spec: JobSpec) -> dict[str, Any]:
    """The team's user and group (config/team_groups.py): they own the team's directories on
    FSx (config/teams.py), and the team's admission policy admits pods in its namespace
    only as them (platform_constructs/team_admission.py).

    No fsGroup: kubelet changes a volume's ownership only where the CSI driver's
    fsGroupPolicy allows, and the FSx CSI driver's is ReadWriteOnceWithFSType
    (kubernetes-sigs/aws-fsx-csi-driver deploy/kubernetes/base/csidriver.yaml), which skips
    this ReadWriteMany volume; a recursive chown of a shared file system would be wrong anyway.
    """
    return {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": team_uid(spec.team),
        "runAsGroup": team_gid(spec.team),
    }


def pod_labels(spec: JobSpec) -> dict[str, str]:
    """Labels of every worker pod: the platform's Prometheus collector scrapes pods with the
    metrics label and names their series after the job label (`training_job`)."""
    return {METRICS_LABEL: METRICS_LABEL_VALUE, TRAINING_JOB_LABEL: spec.name}


def topology_annotations(plan: JobPlan) -> dict[str, str]:
    """The Kueue topology request of the job, for its metadata and its pod template."""
    placement = plan.placement
    return {} if placement is None else {placement[0]: placement[1]}


def elastic_policy(plan: JobPlan) -> dict[str, Any] | None:
    """The operator's elasticPolicy: the sizes the trainer runs (a step where they are evenly
    spaced, else the list), and how long a resize may take (the same SIGTERM window as a
    preemption: the trainer saves, then exits)."""
    sizes, bounds = plan.elastic_plan, plan.elastic_range
    if sizes is None or bounds is None:
        return None
    low, high = bounds
    policy: dict[str, Any] = {"minReplicas": low, "maxReplicas": high}
    if sizes.step is not None:
        policy["replicaIncrementStep"] = sizes.step
    else:
        policy["replicaDiscreteValues"] = list(sizes.sizes)
    policy["gracefulShutdownTimeoutInSeconds"] = plan.spec.shutdown_timeout_s
    policy["scalingTimeoutInSeconds"] = ELASTIC_SCALING_TIMEOUT_S
    policy["faultyScaleDownTimeoutInSeconds"] = ELASTIC_FAULTY_SCALE_DOWN_TIMEOUT_S
    return policy


def _place_and_scale(manifest: dict[str, Any], plan: JobPlan) -> None:
    """Adds the job's topology request and elastic policy to `manifest` where it has them."""
    annotations = topology_annotations(plan)
    (replica,) = manifest["spec"]["replicaSpecs"]
    if annotations:
        manifest["metadata"]["annotations"] = dict(annotations)
        replica["template"]["metadata"]["annotations"] = dict(annotations)
    policy = elastic_policy(plan)
    if policy is None:
        return
    replica["maxReplicas"] = policy["maxReplicas"]  # AWS: must match elasticPolicy's
    manifest["spec"]["elasticPolicy"] = policy
    # No scale-up until a restarted job had time to reach its first step: growing it sooner
    # would restart it again before it trained.
    restart = manifest["spec"]["runPolicy"]["restartPolicy"]
    restart["scaleUpSnoozeTimeInSeconds"] = plan.spec.start_deadline_s


def render_job(spec: JobSpec) -> dict[str, Any]:
    """The HyperPodPyTorchJob manifest for `spec` as a plain dict."""
    plan = JobPlan(spec)  # every derived value, computed once for this manifest
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            "namespace": plan.namespace,
            "labels": {
                QUEUE_LABEL: local_queue(spec.team),
                PRIORITY_LABEL: priority_class(spec.priority),
            },
        },
        "spec": {
            "nprocPerNode": str(plan.instance.accelerator_count),
            "replicaSpecs": [
                {
                    "name": REPLICA_NAME,
                    "replicas": spec.nodes,
                    "spares": spec.spares,
                    "template": _pod_template(plan),
                }
            ],
            "runPolicy": {
                "jobMaxRetryCount": spec.max_retries,
                "restartPolicy": {
                    "numRestartBeforeFullJobRestart": spec.restarts_before_full_restart,
                    "evalPeriodSeconds": spec.restart_eval_period_s,
                    "maxFullJobRestarts": spec.max_full_restarts,
                },
                "cleanPodPolicy": spec.clean_pod_policy,
                "logMonitoringConfiguration": log_rules(spec),
            },
        },
    }
    _place_and_scale(manifest, plan)
    return manifest


def to_yaml(manifest: dict[str, Any]) -> str:
    """YAML for `manifest`, keys in the order they were built (readable, stable diffs)."""
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=100)
