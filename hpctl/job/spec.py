"""Render a HyperPodPyTorchJob (HyperPod training operator, `sagemaker.amazonaws.com/v1`).

`JobSpec` holds a validated job: what a user chooses plus what the cluster dictates.
`spec_for_environment` builds one from an environment's config and the user's options: the
team, its priority classes and its quota (`config.teams`), the instance group's type and
taints, and whether the cluster has managed tiered checkpointing all come from the config, so
a job can only ask for what the platform deployed. Everything the hardware dictates
(accelerators, EFA interfaces, CPU and memory) comes from `config.instance_types`.
`render_job` is pure: the same spec always gives the same manifest, so it can be diffed,
reviewed and tested without a cluster. Kubernetes and task-governance names (labels,
namespace, queue, priority class, service account, the team ConfigMap) come from
`config.kubernetes` and `config.teams`, the names the stacks create. The renderer belongs to
`hpctl`, not to the training image: it reads the trainer's presets (`training.config`), never
the other way round.

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
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from config.errors import Location, problem_lines
from config.instance_types import InstanceType, lookup
from config.kubernetes import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    EFA_RESOURCE,
    FSX_CLAIM_NAME,
    GPU_RESOURCE,
    INSTANCE_GROUP_LABEL,
    INSTANCE_GROUP_NAME,
    INSTANCE_TYPE_LABEL,
    LABEL_KEY,
    LABEL_VALUE,
    MAX_PRIORITY_LENGTH,
    MAX_TEAM_LENGTH,
    METRICS_LABEL,
    METRICS_LABEL_VALUE,
    METRICS_PORT,
    METRICS_PORT_NAME,
    NEURON_RESOURCE,
    NODE_HEALTH_LABEL,
    PRIORITY_CLASS_SUFFIX,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    TEAM_NAMESPACE_PREFIX,
    TRAINING_JOB_LABEL,
    local_queue,
    priority_class,
    team_namespace,
)
from config.schema import EnvironmentConfig
from config.teams import (
    MANAGED_TIER_PATH_KEY,
    TEAM_CONFIG_MAP,
    TRAINING_SERVICE_ACCOUNT,
    GroupCapacity,
    team_capacity,
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
# The S3 tier of managed tiered checkpointing, from the team's ConfigMap (the bucket is named
# at deploy time) into this variable, which Kubernetes expands into the trainer's
# `--set checkpoint.managed_s3_path=$(HPTRAIN_MANAGED_S3_PATH)` argument.
MANAGED_S3_PATH_ENV = "HPTRAIN_MANAGED_S3_PATH"

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
    # The team's Kubernetes service account (its IAM role through EKS Pod Identity).
    service_account: str = TRAINING_SERVICE_ACCOUNT
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
        if not instance.has_accelerators:
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

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str) -> str:
        if len(value) > 253 or not DNS_SUBDOMAIN.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid service account name; use lowercase letters, "
                f"digits, '-' and '.' (e.g. {TRAINING_SERVICE_ACCOUNT})"
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


def _env(spec: JobSpec) -> list[dict[str, Any]]:
    instance = spec.instance
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
    items: list[dict[str, Any]] = [{"name": key, "value": value} for key, value in env.items()]
    if spec.managed_fast_tier:
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


def _resources(instance: InstanceType) -> dict[str, dict[str, int | str]]:
    accelerator = GPU_RESOURCE if instance.accelerator == "nvidia" else NEURON_RESOURCE
    devices: dict[str, int | str] = {accelerator: instance.accelerator_count}
    if instance.supports_efa:
        devices[EFA_RESOURCE] = instance.efa_interfaces
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
        # The endpoint the platform's Prometheus collector scrapes (the named port below).
        "metrics.port": METRICS_PORT,
    }
    if spec.managed_fast_tier:
        # The library's namespace: the same on every restart, unique per job.
        overrides["checkpoint.managed_namespace"] = spec.name
        # Kubernetes expands $(VAR) in args from the container's env (the ConfigMap value).
        overrides["checkpoint.managed_s3_path"] = f"$({MANAGED_S3_PATH_ENV})"
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
        "ports": [
            {"containerPort": AGENT_PORT, "protocol": "TCP"},
            # Scraped by name: the collector keeps only this port of the labelled pods.
            {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "env": _env(spec),
        "resources": _resources(instance),
        "volumeMounts": [
            {"name": "fsx", "mountPath": FSX_MOUNT},
            {"name": "shm", "mountPath": SHM_MOUNT},
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": spec.service_account,
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
    return {"metadata": {"labels": pod_labels(spec)}, "spec": pod_spec}


def pod_labels(spec: JobSpec) -> dict[str, str]:
    """Labels of every worker pod: the platform's Prometheus collector scrapes pods with the
    metrics label and names their series after the job label (`training_job`)."""
    return {METRICS_LABEL: METRICS_LABEL_VALUE, TRAINING_JOB_LABEL: spec.name}


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


# --- From an environment's config and a user's options to a JobSpec -------------------------

MAX_JOB_NAME: Final = 63
# JobSpec fields the environment decides; `spec_for_environment` refuses them as choices.
DERIVED_FIELDS: Final = frozenset(
    {"instance_type", "taints", "fsx_claim", "service_account", "managed_fast_tier"}
)
# JobSpec fields whose problems a user fixes through another option (or not at all: the
# environment's config); the rest map to --field-name.
_OPTION_FOR_FIELD: Final = {
    "instance_type": "--instance-group",
    "taints": "--instance-group",
    "fsx_claim": "--env",
    "service_account": "--env",
    "managed_fast_tier": "--env",
}


class JobRequestError(ValueError):
    """Options that do not make a job in the environment: one `--option: problem; fix` line
    per problem (`problems`); `str()` joins them with "; "."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def option_for(loc: Location) -> str:
    """The CLI option a JobSpec error location stands for: `--nodes`, `--instance-group`."""
    if not loc:
        return ""
    return _OPTION_FOR_FIELD.get(str(loc[0]), "--" + str(loc[0]).replace("_", "-"))


def utc_now() -> datetime:
    return datetime.now(UTC)


def nodes_figure(value: Fraction) -> int | float:
    """A node count for people: whole numbers as they are, fractions to 2 decimals."""
    return int(value) if value.denominator == 1 else round(float(value), 2)


def default_priority(config: EnvironmentConfig) -> str:
    """The environment's lowest-weight priority class (ties: the first by name)."""
    if config.governance is None:
        raise JobRequestError([_no_governance(config)])
    return min(config.governance.priority_classes, key=lambda c: (c.weight, c.name)).name


def default_job_name(team: str, preset: str, now: datetime) -> str:
    """`<team>-<preset>-<UTC YYYYmmdd-HHMMSS>`, the team cut short to fit 63 characters.
    A naive `now` is taken as UTC."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    stamp = now.astimezone(UTC).strftime("%Y%m%d-%H%M%S")
    # The preset is validated on its own; only its shape matters here.
    tag = re.sub(r"[^a-z0-9]+", "-", preset.lower()).strip("-")[:16].strip("-") or "job"
    suffix = f"-{tag}-{stamp}"
    stem = team if team[:1].isalpha() else f"job-{team}"  # job names start with a letter
    return stem[: MAX_JOB_NAME - len(suffix)].rstrip("-") + suffix


def _no_governance(config: EnvironmentConfig) -> str:
    env = config.environment
    return (
        f"--env: {env} has no governance section, so it has no teams, queues or priority "
        f"classes for jobs; add one to config/{env}.yaml or use an environment with task "
        "governance"
    )


def _unknown(option: str, what: str, value: str, known: list[str], env: str, hint: str) -> str:
    fix = f"use {hint!r}" if hint in known else f"use one of {', '.join(known)}"
    return f"{option}: unknown {what} {value!r} in {env}; {fix}"


def _accelerated(instance_type: str) -> bool:
    return lookup(instance_type).has_accelerators


def _quota_problem(
    team: str, capacity: GroupCapacity, usable: list[str], nodes: int, spares: int
) -> str | None:
    """Why `nodes` + `spares` on the group do not fit `team`'s capacity there, if they don't."""
    asked, limit = nodes + spares, capacity.max_job_nodes
    if asked <= limit:
        return None
    group = capacity.instance_group
    elsewhere = (
        f"use a group where it has one ({', '.join(usable)})"
        if usable
        else "ask the platform team for a quota"
    )
    if capacity.guaranteed == 0 and capacity.borrowable == 0:
        return (
            f"--instance-group: team {team} has no quota on {group} ({capacity.instance_type}); "
            f"{elsewhere}"
        )
    total = capacity.guaranteed + capacity.borrowable
    figures = (
        f"{nodes_figure(capacity.guaranteed)} guaranteed + "
        f"{nodes_figure(capacity.borrowable)} borrowable = {nodes_figure(total)}"
    )
    if capacity.group_nodes < total:
        figures += f", and the group has {capacity.group_nodes} nodes"
    if limit == 0:
        return (
            f"--instance-group: team {team} may use less than one node on {group}: {figures}; "
            f"{elsewhere}"
        )
    fix = f"ask for at most {limit}" + (" nodes and spares together" if spares else "")
    return (
        f"--nodes: {nodes} nodes (+{spares} spares) exceed what team {team} may use on "
        f"{group}: {figures}; {fix}"
    )


_NODES = TypeAdapter(PositiveInt)
_SPARES = TypeAdapter(Annotated[int, Field(ge=0)])


def _counts(nodes: object, spares: object) -> tuple[int, int] | None:
    """Nodes and spares as JobSpec reads them, or None where JobSpec will reject them."""
    try:
        return _NODES.validate_python(nodes), _SPARES.validate_python(spares)
    except ValidationError:
        return None


def _lines(error: ValidationError) -> list[str]:
    return problem_lines(error, where=option_for, missing="missing; pass {where}")


def spec_for_environment(
    config: EnvironmentConfig,
    *,
    team: str,
    instance_group: str,
    nodes: int | str,
    image: str,
    priority: str | None = None,
    name: str | None = None,
    clock: Callable[[], datetime] = utc_now,
    **choices: Any,
) -> JobSpec:
    """The JobSpec for a job of `team` on `instance_group` of the environment `config`.

    From the config: the group's instance type and taints (tolerations), the team's queue and
    priority classes, the training service account, the FSx claim, and the managed fast tier
    exactly when the cluster has tiered storage. `priority` defaults to the lowest-weight
    class, `name` to `<team>-<preset>-<UTC time from clock>`. `choices` are the other JobSpec
    fields a user picks (preset, steps, spares, min_tokens_per_s, ...), as values or text.

    Raises JobRequestError (one `--option: problem; fix` line per problem) for an environment
    without governance, an unknown team, group or priority class, a group without
    accelerators, an invalid choice, or more nodes (spares included) than the team may use on
    the group; TypeError when `choices` name a field the config decides.
    """
    derived = sorted(DERIVED_FIELDS & choices.keys())
    if derived:
        raise TypeError(f"{', '.join(derived)}: decided by the environment's config, not a choice")
    governance, env = config.governance, config.environment
    if governance is None:
        raise JobRequestError([_no_governance(config)])
    problems: list[str] = []
    teams = {t.name: t for t in governance.teams}
    chosen_team = teams.get(team)
    if chosen_team is None:
        hint = team.removeprefix(TEAM_NAMESPACE_PREFIX)
        problems.append(_unknown("--team", "team", team, sorted(teams), env, hint))
    groups = {g.name: g for g in config.hyperpod.instance_groups}
    group = groups.get(instance_group)
    if group is None:
        problems.append(
            _unknown("--instance-group", "instance group", instance_group, sorted(groups), env, "")
        )
    elif not _accelerated(group.instance_type):
        accelerated = sorted(n for n, g in groups.items() if _accelerated(g.instance_type))
        fix = (
            f"use a GPU or Trainium group ({', '.join(accelerated)})"
            if accelerated
            else f"add a GPU or Trainium group to config/{env}.yaml"
        )
        problems.append(
            f"--instance-group: group {group.name} is {group.instance_type}, and "
            f"{group.instance_type} has no accelerators; {fix}"
        )
    if priority is None:
        priority = default_priority(config)
    else:
        classes = sorted(governance.priority_classes, key=lambda c: (-c.weight, c.name))
        known = [c.name for c in classes]
        if priority not in known:
            hint = priority.removesuffix(PRIORITY_CLASS_SUFFIX)
            problems.append(_unknown("--priority", "priority class", priority, known, env, hint))
    if problems or chosen_team is None or group is None:
        raise JobRequestError(problems)
    preset = choices.get("preset", JobSpec.model_fields["preset"].default)
    fields: dict[str, Any] = {
        **choices,
        "name": name if name is not None else default_job_name(team, str(preset), clock()),
        "team": team,
        "priority": priority,
        "image": image,
        "instance_type": group.instance_type,
        "instance_group": group.name,
        "nodes": nodes,
        "taints": tuple(Taint(key=t.key, value=t.value, effect=t.effect) for t in group.taints),
        "fsx_claim": FSX_CLAIM_NAME,
        "service_account": TRAINING_SERVICE_ACCOUNT,
        "managed_fast_tier": config.hyperpod.tiered_storage.enabled,
    }
    # The quota first: a job the team may not run at all needs another size before anything
    # else about it matters (a size the preset cannot split is a --nodes problem as well).
    quota: list[str] = []
    counts = _counts(nodes, choices.get("spares", JobSpec.model_fields["spares"].default))
    if counts is not None:
        capacity = team_capacity(governance, chosen_team, config.hyperpod.instance_groups)
        usable = [
            c.instance_group
            for c in capacity
            if c.max_job_nodes > 0 and _accelerated(c.instance_type)
        ]
        (on_group,) = (c for c in capacity if c.instance_group == group.name)
        problem = _quota_problem(team, on_group, usable, *counts)
        quota = [] if problem is None else [problem]
    try:
        spec = JobSpec.model_validate(fields)
    except ValidationError as error:
        if quota:  # the quota's line stands for every other problem of --nodes
            error_lines = [
                line
                for item, line in zip(error.errors(), _lines(error), strict=True)
                if item["loc"][:1] not in (("nodes",), ("spares",))
            ]
            raise JobRequestError(quota + error_lines) from None
        raise JobRequestError(_lines(error)) from None
    if quota:
        raise JobRequestError(quota)
    return spec
