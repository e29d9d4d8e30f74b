"""Render a HyperPodPyTorchJob (HyperPod training operator, `sagemaker.amazonaws.com/v1`).

`JobSpec` holds what a user chooses; everything the hardware dictates (accelerators, EFA
interfaces, CPU and memory) comes from `config.instance_types`. `render_job` is pure: the same
spec always gives the same manifest, so it can be diffed, reviewed and tested without a cluster.
Kubernetes and task-governance names (labels, namespace, queue, priority class) come from
`config.kubernetes`, the names the stacks create. The renderer belongs to `hpctl`, not to the
training image: it reads the trainer's presets (`training.config`), never the other way round.

The log-monitoring rules match the trainer's fixed `HPTRAIN ...` lines. The elastic agent inside
the container applies each rule with Python `re.match` (anchored at the start of the line, hence
the leading `.*`) to every line the local-rank-0 worker writes to stdout; a rule's first capture
group is parsed as a float and compared with the integer `metricThreshold`. The patterns also
stay inside the RE2 subset (no look-around, no back-references) so a Go-side check accepts them.
"""

from __future__ import annotations

import functools
import posixpath
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from config.instance_types import InstanceType, lookup
from config.kubernetes import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    FSX_CLAIM_NAME,
    INSTANCE_GROUP_LABEL,
    INSTANCE_GROUP_NAME,
    INSTANCE_TYPE_LABEL,
    LABEL_KEY,
    LABEL_VALUE,
    MAX_PRIORITY_LENGTH,
    MAX_TEAM_LENGTH,
    NODE_HEALTH_LABEL,
    PRIORITY_CLASS_SUFFIX,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TEAM_NAMESPACE_PREFIX,
    local_queue,
    priority_class,
    team_namespace,
)
from training.config import PRESETS, ConfigError, JobConfig, build_config

API_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"

AGENT_PORT = 8080  # the elastic agent's HTTP server; the operator talks to it on this port
FSX_MOUNT = "/fsx"
SHM_MOUNT = "/dev/shm"  # noqa: S108 - a mount path inside the pod, not a local temp file
# The elastic agent only monitors logs that torchrun writes to files, so workers must tee.
AGENT_LOG_DIR = "/tmp/hyperpod"  # noqa: S108 - inside the pod, the agent reads it
TRAINER_MODULE = "training.train"
CONTAINER_NAME = "trainer"
REPLICA_NAME = "worker"

# Share of a node's vCPUs and memory the trainer requests: the rest stays for the kubelet's
# reservation and HyperPod's daemon sets (health agent, device plugins, CNI, FSx CSI).
NODE_SHARE = 0.9

# Families whose EFA supports GPUDirect RDMA (p4d and newer, Trainium). g5/g6e EFA has no RDMA
# read, so FI_EFA_USE_DEVICE_RDMA=1 would make libfabric fail there.
RDMA_FAMILIES = frozenset({"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "trn1", "trn1n", "trn2"})

# A DNS label that starts with a letter as well: the operator derives Service and pod names
# from the job name, and Service names must be DNS-1035 labels.
_JOB_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# OCI distribution reference: [host[:port]/]path[:tag][@sha256:hex]
_IMAGE = re.compile(
    r"^(?P<name>(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)


# --- Log-monitoring patterns, one per trainer line they must recognise ---------------------
_NUM = r"\d+(?:\.\d+)?"
# Identify the start line by its fixed head; the trailing fields are not needed to spot it.
START_PATTERN = r".*HPTRAIN start rank=\d+ world=\d+ "
# Progress means a step with a finite loss: a nan/inf loss line does not reset the hang clock,
# so a diverged run is restarted from its last checkpoint instead of burning GPU hours.
STEP_PATTERN = r".*HPTRAIN step=\d+ loss=-?\d+\.\d+ "
# Group 1 is the throughput the agent compares with the threshold; the loss may be anything.
THROUGHPUT_PATTERN = rf".*HPTRAIN step=\d+ loss=\S+ tokens_per_s=({_NUM}) "
OOM_PATTERN = r".*(?:CUDA out of memory|OutOfMemoryError)"
NCCL_PATTERN = (
    r".*(?:NCCL error|NCCL WARN.*[Tt]imeout|Watchdog caught collective operation timeout"
    r"|nccl(?:System|Internal|Remote|UnhandledCuda)Error)"
)
WATCHDOG_PATTERN = rf".*HPTRAIN watchdog no progress for {_NUM}s at step=\d+"


@functools.cache
def preset_config(preset: str) -> JobConfig:
    """The trainer's own configuration for `preset` (shared: do not mutate)."""
    return build_config(preset)


class Taint(BaseModel):
    """A node taint the job must tolerate (same shape as an instance group's taints)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if not LABEL_KEY.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid taint key; use a Kubernetes label key")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        if value is not None and not LABEL_VALUE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid taint value; use at most 63 letters, digits, '-', '_' or '.'"
            )
        return value

    def toleration(self) -> dict[str, Any]:
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


PositiveInt = Annotated[int, Field(ge=1)]


class JobSpec(BaseModel):
    """What a user chooses for one training job. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    team: str
    priority: str
    image: str
    instance_type: str
    instance_group: str
    # A trainer preset (training.config.PRESETS); checks below read its batch size, watchdog
    # and SIGTERM grace, so it is validated before the fields that depend on it.
    preset: str = "8b"
    steps: PositiveInt | None = None  # None: the preset's own step count
    nodes: PositiveInt = 1
    spares: Annotated[int, Field(ge=0)] = 0
    fsx_claim: str = FSX_CLAIM_NAME
    # The trainer's run directory (summary, attempt ledger, final export); default
    # /fsx/runs/<name>. It must be shared so every attempt and node sees the same ledger.
    run_dir: str | None = None
    # Fast tier: pod memory (counts toward the memory limit), survives the agent's in-place
    # worker restarts; or HyperPod managed tiered checkpointing when the cluster has tiered
    # storage. Durable tier: FSx, survives pod and node replacement.
    fast_checkpoint_dir: str = f"{SHM_MOUNT}/hptrain-ckpt"
    durable_checkpoint_dir: str | None = None  # default: /fsx/checkpoints/<name>
    fast_checkpoint_every: Annotated[int, Field(ge=0)] | None = None  # 0 disables; None: preset
    durable_checkpoint_every: PositiveInt | None = None  # None: the preset's interval
    managed_fast_tier: bool = False
    # Log-monitoring thresholds.
    start_deadline_s: Annotated[int, Field(ge=30)] = 900
    hang_timeout_s: Annotated[int, Field(ge=60)] = 1200
    # None leaves the throughput rule out: a floor only makes sense for a known model/hardware.
    min_tokens_per_s: PositiveInt | None = None
    slow_data_points: PositiveInt = 10
    # Run policy (operator restart budget).
    max_retries: Annotated[int, Field(ge=0)] = 10
    restarts_before_full_restart: Annotated[int, Field(ge=0)] = 3
    restart_eval_period_s: Annotated[int, Field(ge=60)] = 21600
    max_full_restarts: Annotated[int, Field(ge=0)] = 1
    clean_pod_policy: Literal["All", "OnlyComplete", "None"] = "All"
    # When the pod is deleted (preemption, drain) the agent passes SIGTERM to the workers and
    # waits this long before SIGKILL; the trainer needs it to save its durable checkpoint.
    shutdown_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 180
    taints: tuple[Taint, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if len(value) > 63 or not _JOB_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid job name; use 1-63 lowercase letters, digits and '-', "
                "starting with a letter and ending with a letter or digit"
            )
        return value

    @field_validator("team")
    @classmethod
    def _team(cls, value: str) -> str:
        if value.startswith(TEAM_NAMESPACE_PREFIX):
            raise ValueError(
                f"{value!r} is a namespace; give the team name alone "
                f"(e.g. {value.removeprefix(TEAM_NAMESPACE_PREFIX)!r})"
            )
        if len(value) > MAX_TEAM_LENGTH or not DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid team; use the task-governance team name (1-"
                f"{MAX_TEAM_LENGTH} lowercase letters, digits and '-'), without the "
                f"'{TEAM_NAMESPACE_PREFIX}' prefix"
            )
        return value

    @field_validator("priority")
    @classmethod
    def _priority(cls, value: str) -> str:
        if value.endswith(PRIORITY_CLASS_SUFFIX):
            raise ValueError(
                f"{value!r} already ends in '{PRIORITY_CLASS_SUFFIX}'; give the class name alone "
                f"(e.g. {value.removesuffix(PRIORITY_CLASS_SUFFIX)!r})"
            )
        if len(value) > MAX_PRIORITY_LENGTH or not DNS_LABEL.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid priority class; use a task-governance priority class "
                f"name (1-{MAX_PRIORITY_LENGTH} lowercase letters, digits and '-')"
            )
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        match = _IMAGE.fullmatch(value)
        if not match:
            raise ValueError(f"{value!r} is not a valid image reference; use REPOSITORY:TAG")
        if match["digest"] is None and match["tag"] in (None, "latest"):
            raise ValueError(
                f"{value!r} is not pinned; use an explicit version tag (REPOSITORY:1.2.3) or a "
                "digest (REPOSITORY@sha256:...) so every node and restart runs the same image"
            )
        return value

    @field_validator("instance_type")
    @classmethod
    def _instance_type(cls, value: str) -> str:
        try:
            instance = lookup(value)
        except KeyError as error:
            raise ValueError(error.args[0]) from None
        if instance.accelerator == "none" or instance.accelerator_count == 0:
            raise ValueError(
                f"{value} has no accelerators; pick a GPU (ml.p*, ml.g*) or Trainium (ml.trn*) type"
            )
        return value

    @field_validator("instance_group")
    @classmethod
    def _instance_group(cls, value: str) -> str:
        if not INSTANCE_GROUP_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid instance group name; use the HyperPod instance group "
                "name (1-63 letters, digits and '-', not starting or ending with '-')"
            )
        return value

    @field_validator("preset")
    @classmethod
    def _preset(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; use one of {', '.join(PRESETS)}")
        return value

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, value: int, info: ValidationInfo) -> int:
        # The trainer refuses a world that does not divide its batch or its sharding; catch
        # that here rather than after the nodes were scheduled.
        preset, instance_type = info.data.get("preset"), info.data.get("instance_type")
        if preset is None or instance_type is None:
            return value
        ranks = lookup(instance_type).accelerator_count
        try:
            preset_config(preset).check_world(value * ranks)
        except ConfigError as error:
            raise ValueError(
                f"{value} node(s) x {ranks} ranks do not fit preset {preset!r} ({error}); "
                "pick a node count that divides it"
            ) from None
        return value

    @field_validator("fsx_claim")
    @classmethod
    def _fsx_claim(cls, value: str) -> str:
        if len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid PersistentVolumeClaim name; use lowercase letters, "
                "digits, '-' and '.' (e.g. fsx-claim)"
            )
        return value

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, value: str | None) -> str | None:
        if value is None or _under(value, FSX_MOUNT):
            return value
        raise ValueError(
            f"{value!r} is not shared by every node; use a normalised absolute path under {FSX_MOUNT}/"
        )

    @field_validator("fast_checkpoint_dir")
    @classmethod
    def _fast_dir(cls, value: str) -> str:
        if not _under(value, SHM_MOUNT) and not _under(value, FSX_MOUNT):
            raise ValueError(
                f"{value!r} is not on a mounted volume; use a normalised absolute path under "
                f"{SHM_MOUNT}/ or {FSX_MOUNT}/"
            )
        return value

    @field_validator("durable_checkpoint_dir")
    @classmethod
    def _durable_dir(cls, value: str | None) -> str | None:
        if value is None or _under(value, FSX_MOUNT):
            return value
        raise ValueError(
            f"{value!r} does not survive node replacement; use a normalised absolute path under "
            f"{FSX_MOUNT}/"
        )

    @field_validator("durable_checkpoint_every")
    @classmethod
    def _durable_every(cls, value: int | None, info: ValidationInfo) -> int | None:
        preset = info.data.get("preset")
        if preset is None or "fast_checkpoint_every" not in info.data:
            return value
        fast = info.data["fast_checkpoint_every"]
        if fast is None:
            fast = preset_config(preset).checkpoint.fast_interval
        durable = value if value is not None else preset_config(preset).checkpoint.durable_interval
        if durable < fast:  # a disabled fast tier (0) never conflicts
            raise ValueError(
                f"{durable} is more frequent than the fast tier (every {fast} steps); durable "
                f"saves cost more, so use a value >= {fast}"
            )
        return value

    @field_validator("hang_timeout_s")
    @classmethod
    def _hang_timeout(cls, value: int, info: ValidationInfo) -> int:
        # The trainer's own watchdog names the stuck step and exits; the log rule is the
        # backstop for a trainer too stuck to do that, so it must fire later.
        preset = info.data.get("preset")
        watchdog = preset_config(preset).fault.watchdog_s if preset else 0
        if watchdog and value <= watchdog:
            raise ValueError(
                f"{value} s does not outlast preset {preset!r}'s own watchdog ({watchdog:.0f} s); "
                f"use more than {watchdog:.0f}"
            )
        return value

    @field_validator("shutdown_timeout_s")
    @classmethod
    def _shutdown_timeout(cls, value: int, info: ValidationInfo) -> int:
        preset = info.data.get("preset")
        grace = preset_config(preset).fault.sigterm_grace_s if preset else 0
        if value <= grace:
            raise ValueError(
                f"{value} s is shorter than preset {preset!r}'s SIGTERM save grace ({grace:.0f} s); "
                f"use more than {grace:.0f} so the final checkpoint is not cut off"
            )
        return value

    @property
    def instance(self) -> InstanceType:
        return lookup(self.instance_type)

    @property
    def namespace(self) -> str:
        return team_namespace(self.team)

    @property
    def trainer_config(self) -> JobConfig:
        return preset_config(self.preset)

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else self.trainer_config.training.steps

    @property
    def out_dir(self) -> str:
        return self.run_dir or f"{FSX_MOUNT}/runs/{self.name}"

    @property
    def durable_dir(self) -> str:
        return self.durable_checkpoint_dir or f"{FSX_MOUNT}/checkpoints/{self.name}"

    @property
    def fast_every(self) -> int:
        if self.fast_checkpoint_every is not None:
            return self.fast_checkpoint_every
        return self.trainer_config.checkpoint.fast_interval

    @property
    def durable_every(self) -> int:
        if self.durable_checkpoint_every is not None:
            return self.durable_checkpoint_every
        return self.trainer_config.checkpoint.durable_interval


def _under(path: str, mount: str) -> bool:
    """True when `path` is an absolute, normalised path strictly inside `mount`."""
    return path.startswith(mount + "/") and posixpath.normpath(path) == path


def log_rules(spec: JobSpec) -> list[dict[str, Any]]:
    """The logMonitoringConfiguration rules for `spec`, in evaluation-report order."""
    rules: list[dict[str, Any]] = [
        # The agent watches local rank 0 of every node, so each node's first worker must print
        # its start line within the deadline (model, data and checkpoint loading included).
        {
            "name": "JobStart",
            "logPattern": START_PATTERN,
            "expectedStartCutOffInSeconds": spec.start_deadline_s,
        },
        # Only global rank 0 prints step lines. Without a start cut-off the other nodes' copies
        # of this rule stay WAITING instead of declaring them hung; the clock starts at the
        # first step line.
        {
            "name": "JobHang",
            "logPattern": STEP_PATTERN,
            "expectedRecurringFrequencyInSeconds": spec.hang_timeout_s,
        },
    ]
    if spec.min_tokens_per_s is not None:
        rules.append(
            {
                "name": "LowThroughput",
                "logPattern": THROUGHPUT_PATTERN,
                "metricThreshold": spec.min_tokens_per_s,
                "operator": "lt",
                "metricEvaluationDataPoints": spec.slow_data_points,
            }
        )
    rules += [
        {"name": "CudaOutOfMemory", "logPattern": OOM_PATTERN, "faultOnMatch": True},
        {"name": "NcclError", "logPattern": NCCL_PATTERN, "faultOnMatch": True},
        # The trainer exits by itself; the rule records why the operator saw the fault.
        {"name": "TrainerWatchdog", "logPattern": WATCHDOG_PATTERN, "faultOnMatch": True},
    ]
    return rules


def _env(spec: JobSpec) -> list[dict[str, str]]:
    instance = spec.instance
    env = {
        # Workers write to files the agent tails; unbuffered output keeps the hang clock honest.
        "PYTHONUNBUFFERED": "1",
        # WARN prints NCCL's own warnings (including timeouts) to stdout, where rules see them.
        "NCCL_DEBUG": "WARN",
        # Bootstrap over the pod's interface, never loopback or a bridge.
        "NCCL_SOCKET_IFNAME": "^lo,docker",
        # The trainer's managed-tier namespace: the same on every restart, unique per job.
        "HPTRAIN_JOB_NAME": spec.name,
    }
    if instance.supports_efa:
        env["FI_PROVIDER"] = "efa"
        # Data loader workers fork after EFA memory is registered.
        env["FI_EFA_FORK_SAFE"] = "1"
        if instance.family in RDMA_FAMILIES:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return [{"name": key, "value": value} for key, value in env.items()]


def _resources(instance: InstanceType) -> dict[str, dict[str, int | str]]:
    accelerator = "nvidia.com/gpu" if instance.accelerator == "nvidia" else "aws.amazon.com/neuron"
    devices: dict[str, int | str] = {accelerator: instance.accelerator_count}
    if instance.supports_efa:
        devices["vpc.amazonaws.com/efa"] = instance.efa_interfaces
    memory = f"{int(instance.memory_gib * NODE_SHARE)}Gi"
    return {
        "requests": {**devices, "cpu": str(int(instance.vcpus * NODE_SHARE)), "memory": memory},
        # A memory limit keeps a runaway trainer from starving the node's health agents; no CPU
        # limit, so data loading is never throttled.
        "limits": {**devices, "memory": memory},
    }


def _command(spec: JobSpec) -> list[str]:
    return [
        "hyperpodrun",
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={spec.instance.accelerator_count}",
        "--tee=3",
        f"--log-dir={AGENT_LOG_DIR}",
        f"--server-port={AGENT_PORT}",
        # Restarts keep the agent's default SIGKILL (a save needing dead peers would only
        # hang); pod deletion forwards SIGTERM, and this is how long the save may take.
        f"--shutdown-timeout={spec.shutdown_timeout_s}",
        "-m",
        TRAINER_MODULE,
    ]


def trainer_args(spec: JobSpec) -> list[str]:
    """Arguments for `python -m training.train`, every value resolved so the job is explicit."""
    overrides = {
        "training.steps": spec.total_steps,
        "checkpoint.fast_dir": spec.fast_checkpoint_dir,
        "checkpoint.durable_dir": spec.durable_dir,
        "checkpoint.fast_interval": spec.fast_every,
        "checkpoint.durable_interval": spec.durable_every,
        # Explicit: the image always has the managed library, but only clusters with tiered
        # storage can serve it ("auto" would pick it everywhere).
        "checkpoint.fast_backend": "managed" if spec.managed_fast_tier else "local",
    }
    args = ["--preset", spec.preset, "--out", spec.out_dir]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    return args


def _pod_template(spec: JobSpec) -> dict[str, Any]:
    instance = spec.instance
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        # The image is pinned, so a cached copy is the right one; avoids re-pulling many GiB.
        "imagePullPolicy": "IfNotPresent",
        "command": _command(spec),
        "args": trainer_args(spec),
        "ports": [{"containerPort": AGENT_PORT, "protocol": "TCP"}],
        "env": _env(spec),
        "resources": _resources(instance),
        "volumeMounts": [
            {"name": "fsx", "mountPath": FSX_MOUNT},
            {"name": "shm", "mountPath": SHM_MOUNT},
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    pod_spec: dict[str, Any] = {
        "nodeSelector": {
            INSTANCE_GROUP_LABEL: spec.instance_group,
            INSTANCE_TYPE_LABEL: spec.instance_type,
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
        # The image runs as a numeric non-root user; refuse images that would run as root.
        "securityContext": {"runAsNonRoot": True},
        # Room for the agent to SIGTERM the workers, wait, then SIGKILL them.
        "terminationGracePeriodSeconds": spec.shutdown_timeout_s + 30,
        "containers": [container],
        "volumes": [
            {"name": "fsx", "persistentVolumeClaim": {"claimName": spec.fsx_claim}},
            # NCCL and data loaders need far more shared memory than the runtime's 64 MiB.
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    if spec.taints:
        pod_spec["tolerations"] = [taint.toleration() for taint in spec.taints]
    return {"spec": pod_spec}


def render_job(spec: JobSpec) -> dict[str, Any]:
    """The HyperPodPyTorchJob manifest for `spec` as a plain dict."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": spec.name,
            "namespace": spec.namespace,
            "labels": {
                QUEUE_LABEL: local_queue(spec.team),
                PRIORITY_LABEL: priority_class(spec.priority),
            },
        },
        "spec": {
            "nprocPerNode": str(spec.instance.accelerator_count),
            "replicaSpecs": [
                {
                    "name": REPLICA_NAME,
                    "replicas": spec.nodes,
                    "spares": spec.spares,
                    "template": _pod_template(spec),
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


def to_yaml(manifest: dict[str, Any]) -> str:
    """YAML for `manifest`, keys in the order they were built (readable, stable diffs)."""
    return yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=100)
