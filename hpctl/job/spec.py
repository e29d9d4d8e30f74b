"""`JobSpec`: a validated training job, what a user chooses plus what the cluster dictates.

Every field is checked on its own and against the trainer preset it runs (`training.config`):
a job that validates here is one the trainer accepts. Everything the hardware dictates
comes from `config.instance_types` (accelerators, EFA interfaces) and `config.node_model`
(the CPU and memory a node leaves a job: `allocation`); Kubernetes
names follow the rules of `config.kubernetes`.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from config.addons import (
    ELASTIC_TRAINING_MINIMUM,
    TASK_GOVERNANCE,
    TOPOLOGY_SCHEDULING_MINIMUM,
    TRAINING_OPERATOR,
    Version,
)
from config.instance_types import InstanceType, lookup, topology_instance_types
from config.kubernetes import (
    FSX_MOUNT,
    INSTANCE_GROUP_NAME,
    MAX_PRIORITY_LENGTH,
    MAX_TEAM_LENGTH,
    NETWORK_NODE_LAYER_LABELS,
    PREFERRED_TOPOLOGY_ANNOTATION,
    PRIORITY_CLASS_SUFFIX,
    REQUIRED_TOPOLOGY_ANNOTATION,
    TEAM_NAMESPACE_PREFIX,
    TOPOLOGY_LEVELS,
    ULTRASERVER_LABEL,
    Taint,
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    team_namespace,
)
from config.node_model import JobAllocation
from config.teams import (
    DATA_CLAIM_NAME,
    TEAM_CLAIM_NAME,
    TRAINING_SERVICE_ACCOUNT,
    team_checkpoints_directory,
    team_directory,
    team_runs_directory,
)
from hpctl.job.scaling import (
    TP_KEY,
    ElasticPlan,
    ElasticRangeError,
    Parallelism,
    configured,
    elastic_plan,
    parallel_overrides,
    resolved_parallelism,
)
from training.checkpoint.config import (
    AUTO_STORAGE,
    DURABLE,
    LOCAL_STORAGE,
    MANAGED_STORAGE,
    CheckpointConfig,
    TierConfig,
)
from training.config import JobConfig
from training.config_parsing import ConfigError
from training.environment import CHECKPOINT_DIR_ENV, NODE_CHECKPOINT_DIR_ENV, environment_tiers
from training.presets import PRESETS, build_config

SHM_MOUNT = "/dev/shm"  # noqa: S108 - a mount path inside the pod, not a local temp file

# --topology words besides MODE:LEVEL: no placement at all, and the whole job in one
# UltraServer (required at its level).
NO_TOPOLOGY = "none"
ULTRASERVER_TOPOLOGY = "ultraserver"
TOPOLOGY_MODES: dict[str, str] = {
    "required": REQUIRED_TOPOLOGY_ANNOTATION,
    "preferred": PREFERRED_TOPOLOGY_ANNOTATION,
}
_ELASTIC_RANGE = re.compile(r"(\d+):(\d+)")

# OCI distribution reference: [host[:port]/]path[:tag][@sha256:hex]
_IMAGE = re.compile(
    r"^(?P<name>(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)


# A Python module path: dotted identifiers (what `python -m` takes).
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Launchers the platform already runs every job under (hyperpodrun) or that would start a
# second agent inside it: an entry point names the per-rank program instead.
LAUNCHERS = frozenset({"hyperpodrun", "torchrun"})
# Node-local checkpoint directory of a job that does not run the project's trainer (pod
# memory, like the trainer's fast tier; HPTRAIN_NODE_CHECKPOINT_DIR).
NODE_CHECKPOINT_DIR = f"{SHM_MOUNT}/checkpoints"
# JobSpec fields that configure the project's trainer (its preset, tiers and log lines);
# a job running other code may not set them.
TRAINER_FIELDS = (
    "preset",
    "steps",
    "checkpoint_dirs",
    "checkpoint_intervals",
    "start_deadline_s",
    "hang_timeout_s",
    "min_tokens_per_s",
    "slow_data_points",
    "tp",
    "parallelism",
)


class ModuleEntryPoint(BaseModel):
    """A team's own Python module, run on every rank as `python -m MODULE ARGS...`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str
    args: tuple[str, ...] = ()

    @field_validator("module")
    @classmethod
    def _module(cls, value: str) -> str:
        if not _MODULE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a Python module path; use dotted names as `python -m` takes "
                "them (e.g. torchtitan.train)"
            )
        return value

    @property
    def name_tag(self) -> str:
        """What a default job name calls the code."""
        return self.module


class CommandEntryPoint(BaseModel):
    """A team's own program and its arguments, run on every rank as given (no `python`
    prepended)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...]

    @field_validator("command")
    @classmethod
    def _command(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or not value[0].strip():
            raise ValueError("empty command; give the program and its arguments after --")
        program = posixpath.basename(value[0])
        if program in LAUNCHERS:
            raise ValueError(
                f"{program} is the launcher the platform already runs on every node; give the "
                "program each rank runs (e.g. -- python train.py ...) or --module"
            )
        return value

    @property
    def name_tag(self) -> str:
        """What a default job name calls the code: the first word that is neither an option
        nor an interpreter (`python train.py` -> train)."""
        words = [w for w in self.command if not w.startswith("-")]
        named = [w for w in words if posixpath.basename(w) not in _INTERPRETERS] or words
        return posixpath.splitext(posixpath.basename(named[0]))[0] if named else "job"


_INTERPRETERS = frozenset({"python", "python3", "bash", "sh", "env"})

# What a job runs besides the project's trainer (JobSpec.entry_point None).
EntryPoint = ModuleEntryPoint | CommandEntryPoint


@functools.cache
def preset_config(preset: str) -> JobConfig:
    """The trainer's own configuration for `preset` (shared: do not mutate)."""
    return build_config(preset)


PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class JobSpec(BaseModel):
    """What a user chooses for one training job. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    team: str
    priority: str
    # The environment's require_image_digest (validated before `image`, which reads it).
    require_image_digest: bool = False
    image: str
    instance_type: str
    instance_group: str
    # The code the job runs on every rank: None for the project's trainer (training.train),
    # else a team's own module or command. The fields in TRAINER_FIELDS configure the trainer
    # and are refused for other code; every job gets the platform's wiring and environment.
    entry_point: EntryPoint | None = None
    # A trainer preset (training.config.PRESETS); checks below read its batch size, watchdog,
    # SIGTERM grace and checkpoint tiers, so it is validated before the fields that depend on it.
    preset: str = "8b"
    steps: PositiveInt | None = None  # None: the preset's own step count
    # Tensor-parallel degree: each layer split over this many GPUs of one node (NVLink).
    tp: PositiveInt = 1
    # How data-parallel ranks hold the model; None: HSDP across nodes, else the preset's
    # own (hpctl.job.scaling.resolved_parallelism).
    parallelism: Parallelism | None = None
    nodes: PositiveInt = 1
    spares: NonNegativeInt = 0
    # The team namespace's claims (config/teams.py): the team's own tree of the file system,
    # and the data repository's directory, read-only.
    fsx_claim: str = TEAM_CLAIM_NAME
    data_claim: str = DATA_CLAIM_NAME
    # The team's Kubernetes service account (its IAM role through EKS Pod Identity).
    service_account: str = TRAINING_SERVICE_ACCOUNT
    # The trainer's run directory (summary, attempt ledger, final export); default
    # /fsx/teams/<team>/runs/<name>. It must be shared so every attempt and node sees the
    # same ledger.
    run_dir: str | None = None
    # Checkpoint tiers, by the preset's tier names (its `checkpoint.tiers`): the directory in
    # the pod (default: `default_tier_dir`) and the steps between checkpoints (0 disables the
    # tier; default: the preset's). Per-node tiers may use pod memory (counts toward the
    # memory limit, survives the agent's in-place worker restarts); shared tiers are on FSx
    # and survive pod and node replacement.
    checkpoint_dirs: dict[str, str] = {}
    checkpoint_intervals: dict[str, NonNegativeInt] = {}
    # The cluster has HyperPod tiered storage: tiers whose storage is "auto" use managed
    # tiered checkpointing; without it, a local directory.
    tiered_storage: bool = False
    # Log-monitoring thresholds.
    start_deadline_s: Annotated[int, Field(ge=30)] = 900
    hang_timeout_s: Annotated[int, Field(ge=60)] = 1200
    # None leaves the throughput rule out: a floor only makes sense for a known model/hardware.
    min_tokens_per_s: PositiveInt | None = None
    slow_data_points: PositiveInt = 10
    # Run policy (operator restart budget).
    max_retries: NonNegativeInt = 10
    restarts_before_full_restart: NonNegativeInt = 3
    restart_eval_period_s: Annotated[int, Field(ge=60)] = 21600
    max_full_restarts: NonNegativeInt = 1
    clean_pod_policy: Literal["All", "OnlyComplete", "None"] = "All"
    # When the pod is deleted (preemption, drain) the agent passes SIGTERM to the workers and
    # waits this long before SIGKILL; the trainer needs it to save its durable checkpoint.
    shutdown_timeout_s: Annotated[int, Field(ge=1, le=3600)] = 180
    # The instance group's taints; the pods tolerate each.
    taints: tuple[Taint, ...] = ()
    # What the pod requests on its node besides its devices: what the node model leaves a job
    # on the group's nodes (config.node_model).
    allocation: JobAllocation
    # What the environment's add-ons offer: topology-aware scheduling (task governance
    # >= v1.2.2) and elastic jobs (training operator >= v1.2).
    topology_scheduling: bool = True
    elastic_training: bool = True
    # Elastic: "MIN:MAX" nodes. The job starts at MIN (`nodes`); the operator grows and shrinks
    # it among the sizes the trainer runs (`elastic_plan`).
    elastic: str | None = None
    # Placement: "required:LEVEL", "preferred:LEVEL" (LEVEL in config.kubernetes
    # TOPOLOGY_LEVELS), "ultraserver" (required in one UltraServer) or "none"; None: the
    # default (`placement`).
    topology: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # The operator derives Service and pod names from the job name, and Service names
        # must be DNS-1035 labels.
        if not is_dns1035_label(value):
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
        if len(value) > MAX_TEAM_LENGTH or not is_dns1123_label(value):
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
        if len(value) > MAX_PRIORITY_LENGTH or not is_dns1123_label(value):
            raise ValueError(
                f"{value!r} is not a valid priority class; use a task-governance priority class "
                f"name (1-{MAX_PRIORITY_LENGTH} lowercase letters, digits and '-')"
            )
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str, info: ValidationInfo) -> str:
        match = _IMAGE.fullmatch(value)
        if not match:
            raise ValueError(f"{value!r} is not a valid image reference; use REPOSITORY:TAG")
        if match["digest"] is None and match["tag"] in (None, "latest"):
            raise ValueError(
                f"{value!r} is not pinned; use an explicit version tag (REPOSITORY:1.2.3) or a "
                "digest (REPOSITORY@sha256:...) so every node and restart runs the same image"
            )
        if match["digest"] is None and info.data.get("require_image_digest"):
            raise ValueError(
                f"{value!r} names a tag, and this environment runs images by digest only "
                "(require_image_digest); use REPOSITORY@sha256:<digest> (docker buildx "
                "imagetools inspect prints it)"
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

    @field_validator(*TRAINER_FIELDS, mode="before")
    @classmethod
    def _trainer_only(cls, value: object, info: ValidationInfo) -> object:
        # Validators run for the fields a job sets, never for defaults: this refuses exactly
        # the trainer settings given to a job that runs other code.
        if info.data.get("entry_point") is not None:
            raise ValueError(
                "configures the project's trainer (training.train), and this job runs its own "
                "code; drop it and configure that code through its own arguments"
            )
        return value

    @field_validator("preset")
    @classmethod
    def _preset(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; use one of {', '.join(PRESETS)}")
        return value

    @field_validator("tp")
    @classmethod
    def _tp(cls, value: int, info: ValidationInfo) -> int:
        preset, instance_type = info.data.get("preset"), info.data.get("instance_type")
        if instance_type is None:
            return value
        gpus = lookup(instance_type).accelerator_count
        if gpus % value:
            fits = ", ".join(str(d) for d in range(1, gpus + 1) if gpus % d == 0)
            raise ValueError(
                f"{value} does not divide the {gpus} accelerators of a {instance_type} node; "
                f"tensor parallelism stays inside a node's NVLink, so use one of {fits}"
            )
        if preset is not None and value > 1:
            try:
                configured(preset, {TP_KEY: value})
            except ConfigError as error:
                raise ValueError(f"preset {preset!r} refuses it ({error})") from None
        return value

    @field_validator("nodes")
    @classmethod
    def _nodes(cls, value: int, info: ValidationInfo) -> int:
        # The batch is fitted to any world (trainer_args passes `batch_for_world`); the
        # sharding is not: the trainer refuses a world its parallel settings cannot split, so
        # catch that here rather than after the nodes were scheduled.
        preset, instance_type = info.data.get("preset"), info.data.get("instance_type")
        if preset is None or instance_type is None or info.data.get("entry_point") is not None:
            return value
        ranks = lookup(instance_type).accelerator_count
        try:
            _parallel_config(info.data, preset, ranks, value > 1).check_sharding(value * ranks)
        except ConfigError as error:
            raise ValueError(
                f"{value} node(s) x {ranks} ranks do not fit preset {preset!r} ({error}); "
                "pick a node count its parallel settings split"
            ) from None
        return value

    @field_validator("fsx_claim", "data_claim")
    @classmethod
    def _claim(cls, value: str) -> str:
        if not is_dns1123_subdomain(value):
            raise ValueError(
                f"{value!r} is not a valid PersistentVolumeClaim name; use lowercase letters, "
                f"digits, '-' and '.' (e.g. {TEAM_CLAIM_NAME})"
            )
        return value

    @field_validator("service_account")
    @classmethod
    def _service_account(cls, value: str) -> str:
        if not is_dns1123_subdomain(value):
            raise ValueError(
                f"{value!r} is not a valid service account name; use lowercase letters, "
                f"digits, '-' and '.' (e.g. {TRAINING_SERVICE_ACCOUNT})"
            )
        return value

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not _under(value, FSX_MOUNT):
            raise ValueError(
                f"{value!r} is not shared by every node; use a normalised absolute path under "
                f"{FSX_MOUNT}/"
            )
        _check_team_owned(value, info)
        return value

    @field_validator("checkpoint_dirs")
    @classmethod
    def _checkpoint_dirs(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        preset = info.data.get("preset")
        if preset is None:
            return value
        checkpoint = preset_config(preset).checkpoint
        _check_tier_names(value.keys(), preset, checkpoint)
        for name, path in value.items():
            if checkpoint.tier(name).per_node:
                if not _under(path, SHM_MOUNT) and not _under(path, FSX_MOUNT):
                    raise ValueError(
                        f"{name}: {path!r} is not on a mounted volume; use a normalised absolute "
                        f"path under {SHM_MOUNT}/ or {FSX_MOUNT}/"
                    )
            elif not _under(path, FSX_MOUNT):
                raise ValueError(
                    f"{name}: {path!r} does not survive node replacement; use a normalised "
                    f"absolute path under {FSX_MOUNT}/"
                )
            if _under(path, FSX_MOUNT):
                _check_team_owned(path, info, tier=name)
        return value

    @field_validator("checkpoint_intervals")
    @classmethod
    def _checkpoint_intervals(cls, value: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        preset = info.data.get("preset")
        if preset is None:
            return value
        checkpoint = preset_config(preset).checkpoint
        _check_tier_names(value.keys(), preset, checkpoint)
        last = checkpoint.tiers[-1].name
        if value.get(last) == 0:
            # Restarts after a node replacement resume from it.
            raise ValueError(f"{last}: 0 would disable the most durable tier; use a value >= 1")
        previous: tuple[str, int] | None = None  # the last enabled tier and its interval
        for tier in checkpoint.tiers:
            interval = value.get(tier.name, tier.interval)
            if interval == 0:  # a disabled tier never conflicts
                continue
            if previous is not None and interval < previous[1]:
                name, shorter = previous
                raise ValueError(
                    f"{tier.name}: {interval} is more frequent than the {name} tier (every "
                    f"{shorter} steps); {tier.name} saves cost more, so use a value >= {shorter}"
                )
            previous = tier.name, interval
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
        # Other code's own save time is unknown to the platform: only the trainer's is checked.
        runs_trainer = info.data.get("entry_point") is None
        preset = info.data.get("preset") if runs_trainer else None
        grace = preset_config(preset).fault.sigterm_grace_s if preset else 0
        if value <= grace:
            raise ValueError(
                f"{value} s is shorter than preset {preset!r}'s SIGTERM save grace ({grace:.0f} s); "
                f"use more than {grace:.0f} so the final checkpoint is not cut off"
            )
        return value

    @field_validator("elastic")
    @classmethod
    def _elastic(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        match = _ELASTIC_RANGE.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not a node range; use MIN:MAX, e.g. 2:8")
        low, high = int(match[1]), int(match[2])
        if low < 1 or high <= low:
            raise ValueError(f"{value} is not a range; use MIN:MAX with 1 <= MIN < MAX")
        if not info.data.get("elastic_training", True):
            raise ValueError(
                f"the environment's training operator is older than "
                f"{_version(ELASTIC_TRAINING_MINIMUM)}, the first that runs elastic jobs; "
                f"upgrade {TRAINING_OPERATOR} (eks.addons) or leave --elastic out"
            )
        nodes = info.data.get("nodes")
        if nodes is not None and nodes != low:
            raise ValueError(
                f"an elastic job starts at its minimum, {low} nodes, but --nodes is {nodes}; "
                f"leave --nodes out or pass --nodes {low}"
            )
        preset, instance_type = info.data.get("preset"), info.data.get("instance_type")
        # A team's own code decides what sizes it runs: only the trainer's are checked.
        if preset is None or instance_type is None or info.data.get("entry_point") is not None:
            return f"{low}:{high}"
        gpus = lookup(instance_type).accelerator_count
        try:
            config = _parallel_config(info.data, preset, gpus, True)
            elastic_plan(config, gpus, low, high, preset)
        except (ElasticRangeError, ConfigError) as error:
            raise ValueError(str(error)) from None
        return f"{low}:{high}"

    @field_validator("topology")
    @classmethod
    def _topology(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        text = value.strip()
        if text == NO_TOPOLOGY:
            return text
        if text == ULTRASERVER_TOPOLOGY:
            text = f"required:{ULTRASERVER_LABEL}"
        mode, _, level = text.partition(":")
        if mode not in TOPOLOGY_MODES or level not in TOPOLOGY_LEVELS:
            raise ValueError(
                f"{value!r} is not a placement; use required:LEVEL or preferred:LEVEL with a "
                f"LEVEL of {', '.join(TOPOLOGY_LEVELS)}, or {ULTRASERVER_TOPOLOGY!r} or "
                f"{NO_TOPOLOGY!r}"
            )
        if not info.data.get("topology_scheduling", True):
            raise ValueError(
                f"the environment's task governance add-on is older than "
                f"{_version(TOPOLOGY_SCHEDULING_MINIMUM)}, the first with topology-aware "
                f"scheduling; upgrade {TASK_GOVERNANCE} (eks.addons) or leave --topology out"
            )
        instance_type = info.data.get("instance_type")
        if instance_type is None:
            return text
        instance = lookup(instance_type)
        if not instance.network_topology:
            raise ValueError(
                f"{instance_type} nodes carry no network topology labels (HyperPod sets them "
                f"on {', '.join(topology_instance_types())}); leave --topology out"
            )
        if level == ULTRASERVER_LABEL:
            domain = instance.nvlink_domain_instances
            if domain == 1:
                raise ValueError(
                    f"{instance_type} is no UltraServer instance, so its nodes have no "
                    f"{ULTRASERVER_LABEL}; use a network node layer (e.g. "
                    f"preferred:{NETWORK_NODE_LAYER_LABELS[-1]})"
                )
            pods = _largest_size(info.data) + info.data.get("spares", 0)
            if mode == "required" and pods > domain:
                raise ValueError(
                    f"{pods} pods (nodes and spares) do not fit in one UltraServer of {domain} "
                    f"{instance_type} instances; use at most {domain} in all, or "
                    f"preferred:{ULTRASERVER_LABEL}"
                )
        return text

    @property
    def instance(self) -> InstanceType:
        return lookup(self.instance_type)

    @property
    def elastic_range(self) -> tuple[int, int] | None:
        if self.elastic is None:
            return None
        low, high = self.elastic.split(":")
        return int(low), int(high)

    @property
    def max_nodes(self) -> int:
        """Nodes at the job's largest: the top of an elastic range, else `nodes`."""
        return self.elastic_range[1] if self.elastic_range else self.nodes

    @property
    def parallel_mode(self) -> Parallelism | None:
        """FSDP, HSDP, or None where the preset's own parallel settings stand."""
        return resolved_parallelism(
            preset_config(self.preset), self.parallelism, self.tp, self.max_nodes > 1
        )

    @property
    def parallel_overrides(self) -> dict[str, int]:
        """The trainer's parallel settings the job sets (`--set` in its arguments)."""
        return parallel_overrides(self.parallel_mode, self.instance.accelerator_count, self.tp)

    @property
    def parallel_config(self) -> JobConfig:
        """The preset with the job's parallel settings: what the trainer runs."""
        return configured(self.preset, self.parallel_overrides)

    @property
    def elastic_plan(self) -> ElasticPlan | None:
        """The sizes an elastic job runs at and their common batch; None for a fixed size."""
        if self.elastic_range is None:
            return None
        low, high = self.elastic_range
        if not self.runs_trainer:
            # Every count: the platform knows nothing of other code's batch or mesh.
            return ElasticPlan(sizes=tuple(range(low, high + 1)), batch=0)
        gpus = self.instance.accelerator_count
        return elastic_plan(self.parallel_config, gpus, low, high, self.preset)

    @property
    def placement(self) -> tuple[str, str] | None:
        """(Kueue annotation, node label) of the job's topology request, if any. Unless the
        job says otherwise, a job over several EFA nodes that carry topology labels prefers one
        UltraServer where it fits in one, else one network node at EC2's lowest layer: the
        fewest hops between its nodes, and Kueue falls back to higher layers (never to no
        admission) when no such domain has room.

        The UltraServer preference buys network locality only: GPUs of different instances
        talk over NVLink only inside an IMEX channel, which pods get from a ComputeDomain of
        NVIDIA's DRA driver for GPUs (NVIDIA's "Enabling Multi-Node NVLink on Kubernetes for
        NVIDIA GB200 NVL72"; AWS's "Dynamic Resource Allocation on Amazon EKS and Amazon EC2
        P6e-GB200"). The platform installs no DRA driver and rendered pods claim no channel,
        so NCCL joins the instances of an UltraServer over EFA."""
        if self.topology == NO_TOPOLOGY:
            return None
        if self.topology is not None:
            mode, level = self.topology.split(":", 1)
            return TOPOLOGY_MODES[mode], level
        instance = self.instance
        if not (
            self.topology_scheduling
            and instance.network_topology
            and instance.supports_efa
            and self.max_nodes > 1
        ):
            return None
        pods = self.max_nodes + self.spares
        in_one_ultraserver = instance.nvlink_domain_instances > 1 and pods <= (
            instance.nvlink_domain_instances
        )
        level = ULTRASERVER_LABEL if in_one_ultraserver else NETWORK_NODE_LAYER_LABELS[-1]
        return PREFERRED_TOPOLOGY_ANNOTATION, level

    @property
    def namespace(self) -> str:
        return team_namespace(self.team)

    @property
    def trainer_config(self) -> JobConfig:
        return preset_config(self.preset)

    @property
    def runs_trainer(self) -> bool:
        """The job runs the project's trainer, not a team's own code."""
        return self.entry_point is None

    @property
    def checkpoint_dir(self) -> str:
        """The job's shared checkpoint directory on FSx (HPTRAIN_CHECKPOINT_DIR): the
        trainer's most durable tier's, else the team's checkpoint directory for the job."""
        if self.runs_trainer:
            return self.tier_dir(
                environment_tiers(self.trainer_config.checkpoint)[CHECKPOINT_DIR_ENV]
            )
        return f"{team_checkpoints_directory(self.team)}/{self.name}"

    @property
    def node_checkpoint_dir(self) -> str:
        """The job's checkpoint directory in each node's pod memory
        (HPTRAIN_NODE_CHECKPOINT_DIR): the trainer's first per-node tier's, if it has one."""
        if self.runs_trainer:
            tier = environment_tiers(self.trainer_config.checkpoint).get(NODE_CHECKPOINT_DIR_ENV)
            if tier is not None:
                return self.tier_dir(tier)
        return NODE_CHECKPOINT_DIR

    @property
    def world_size(self) -> int:
        """Trainer ranks: one per accelerator of every node (spares stand by, not counted)."""
        return self.nodes * self.instance.accelerator_count

    @property
    def global_batch_size(self) -> int:
        """The preset's batch fitted to the job's world (`JobConfig.batch_for_world`); for an
        elastic job the one batch every size it runs at splits (`elastic_plan`)."""
        plan = self.elastic_plan
        if plan is not None:
            return plan.batch
        return self.parallel_config.batch_for_world(self.world_size)

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else self.trainer_config.training.steps

    @property
    def out_dir(self) -> str:
        return self.run_dir or f"{team_runs_directory(self.team)}/{self.name}"

    def tier_dir(self, name: str) -> str:
        """The pod directory of checkpoint tier `name`."""
        tier = self.trainer_config.checkpoint.tier(name)
        return self.checkpoint_dirs.get(name) or default_tier_dir(tier, self.team, self.name)

    def tier_interval(self, name: str) -> int:
        """Steps between checkpoints of tier `name` (0: disabled)."""
        tier = self.trainer_config.checkpoint.tier(name)
        return self.checkpoint_intervals.get(name, tier.interval)

    def tier_storage(self, name: str) -> str:
        """The storage kind of tier `name`, "auto" resolved by the cluster's tiered storage."""
        storage = self.trainer_config.checkpoint.tier(name).storage
        if storage != AUTO_STORAGE:
            return storage
        return MANAGED_STORAGE if self.tiered_storage else LOCAL_STORAGE

    @property
    def managed_storage(self) -> bool:
        """Some tier uses HyperPod managed tiered checkpointing; for a team's own code, the
        cluster offers it."""
        if not self.runs_trainer:
            return self.tiered_storage
        return any(
            self.tier_storage(tier.name) == MANAGED_STORAGE
            for tier in self.trainer_config.checkpoint.tiers
        )


def _version(version: Version) -> str:
    return "v" + ".".join(map(str, version))


def _largest_size(data: dict[str, object]) -> int:
    """The most nodes a job (validated fields `data`) runs on."""
    elastic, nodes = data.get("elastic"), data.get("nodes", 1)
    if isinstance(elastic, str):
        return int(elastic.split(":")[1])
    return nodes if isinstance(nodes, int) else 1


def _parallel_config(
    data: dict[str, object], preset: str, gpus_per_node: int, multi_node: bool
) -> JobConfig:
    """The trainer configuration a job of validated fields `data` runs (ConfigError where the
    trainer refuses its parallel settings)."""
    tp = data.get("tp", 1)
    tp = tp if isinstance(tp, int) else 1
    chosen = data.get("parallelism")
    mode = resolved_parallelism(
        preset_config(preset),
        chosen if chosen in ("fsdp", "hsdp") else None,
        tp,
        multi_node,
    )
    return configured(preset, parallel_overrides(mode, gpus_per_node, tp))


def default_tier_dir(tier: TierConfig, team: str, job_name: str) -> str:
    """A tier's directory when the job names none: a per-node tier in pod memory (the
    preset's own directory when it names one there, else one per tier), a shared tier on FSx
    in the team's checkpoint directory, under the job's name."""
    if tier.per_node:
        return tier.dir if _under(tier.dir, SHM_MOUNT) else f"{SHM_MOUNT}/hptrain-ckpt-{tier.name}"
    root = f"{team_checkpoints_directory(team)}/{job_name}"
    # A job resubmitted under the same name finds its durable checkpoints there; any other
    # shared tier gets its own root beside it (a suffix, never inside another tier's root).
    # The durable root moved into the team's directory (from /fsx/checkpoints/<job>, which
    # no job can write): a job resubmitted across that change starts from step 0.
    return root if tier.name == DURABLE else f"{root}-{tier.name}"


def _check_tier_names(names: Iterable[str], preset: str, checkpoint: CheckpointConfig) -> None:
    known = [tier.name for tier in checkpoint.tiers]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(
            f"unknown checkpoint tier {', '.join(map(repr, unknown))}; preset {preset!r} has "
            f"{', '.join(known)}"
        )


def _check_team_owned(path: str, info: ValidationInfo, tier: str | None = None) -> None:
    """Jobs write only inside their team's directory on FSx: nothing else is theirs."""
    team = info.data.get("team")
    if team is None or _under(path, team_directory(team)):
        return
    where = f"{tier}: " if tier else ""
    raise ValueError(
        f"{where}{path!r} is outside team {team}'s directory, which is all its jobs may write; "
        f"use a path under {team_directory(team)}/"
    )


def _under(path: str, mount: str) -> bool:
    """True when `path` is an absolute, normalised path strictly inside `mount`."""
    return path.startswith(mount + "/") and posixpath.normpath(path) == path
