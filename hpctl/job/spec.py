"""`JobSpec`: a validated training job, what a user asked for, checked against the platform's
facts for its instance group (`JobPlatform`) and the trainer preset it runs.

Every field is checked on its own and against the trainer preset it runs (`training.config`):
a job that validates here is one the trainer accepts. What the hardware and the cluster
dictate is the spec's `platform` (`hpctl.job.platform`, derived once from the environment);
what follows from the choices, the platform and the preset (parallel settings, placement,
checkpoint tiers, batch) is its `JobPlan` (`hpctl.job.plan`, built from the spec). Kubernetes names follow the
rules of `config.kubernetes`.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from config.addons import (
    ELASTIC_TRAINING_MINIMUM,
    TASK_GOVERNANCE,
    TOPOLOGY_SCHEDULING_MINIMUM,
    TRAINING_OPERATOR,
    Version,
)
from config.instance_types import topology_instance_types
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
    is_dns1035_label,
    is_dns1123_label,
)
from config.teams import team_directory
from hpctl.job.entry_points import EntryPoint
from hpctl.job.platform import JobPlatform
from hpctl.job.scaling import (
    TP_KEY,
    ElasticRangeError,
    Parallelism,
    configured,
    elastic_plan,
    parallel_overrides,
    resolved_parallelism,
)
from training.checkpoint.config import AUTO_INTERVAL, CheckpointConfig
from training.config import JobConfig
from training.config_parsing import ConfigError
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


@functools.cache
def preset_config(preset: str) -> JobConfig:
    """The trainer's own configuration for `preset` (shared: do not mutate)."""
    return build_config(preset)


PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


def _tier_interval(value: object) -> int | str:
    """A tier's interval: a whole number of steps >= 0, or "auto"."""
    if value == AUTO_INTERVAL or (isinstance(value, int) and not isinstance(value, bool)):
        if isinstance(value, int) and value < 0:
            raise ValueError("Input should be greater than or equal to 0 (0 disables the tier)")
        return value
    raise ValueError(f"Input should be a whole number of steps or {AUTO_INTERVAL!r}")


TierInterval = Annotated[int | str, BeforeValidator(_tier_interval)]


class JobSpec(BaseModel):
    """What a user asked for one training job, on the platform's facts for its group.
    Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # First: every check of a choice against the hardware or the cluster reads it.
    platform: JobPlatform
    name: str
    team: str
    priority: str
    image: str
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
    # Steps between a tier's checkpoints, or "auto": the trainer re-plans the interval from
    # each commit's measured cost and the job's failure rate (training/checkpoint/interval.py).
    checkpoint_intervals: dict[str, TierInterval] = {}
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
    # Elastic: "MIN:MAX" nodes. The job starts at MIN (`nodes`); the operator grows and shrinks
    # it among the sizes the trainer runs (`elastic_plan`).
    elastic: str | None = None
    # Placement: "required:LEVEL", "preferred:LEVEL" (LEVEL in config.kubernetes
    # TOPOLOGY_LEVELS), "ultraserver" (required in one UltraServer) or "none"; None: the
    # default (`JobPlan.placement`).
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
        platform = _platform(info)
        if match["digest"] is None and platform is not None and platform.require_image_digest:
            raise ValueError(
                f"{value!r} names a tag, and this environment runs images by digest only "
                "(require_image_digest); use REPOSITORY@sha256:<digest> (docker buildx "
                "imagetools inspect prints it)"
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
        preset, platform = info.data.get("preset"), _platform(info)
        if platform is None:
            return value
        gpus, instance_type = platform.instance.accelerator_count, platform.instance_type
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
        preset, platform = info.data.get("preset"), _platform(info)
        if preset is None or platform is None or info.data.get("entry_point") is not None:
            return value
        ranks = platform.instance.accelerator_count
        try:
            _parallel_config(info.data, preset, ranks, value > 1).check_sharding(value * ranks)
        except ConfigError as error:
            raise ValueError(
                f"{value} node(s) x {ranks} ranks do not fit preset {preset!r} ({error}); "
                "pick a node count its parallel settings split"
            ) from None
        return value

    @field_validator("run_dir")
    @classmethod
    def _run_dir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not path_inside(value, FSX_MOUNT):
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
                if not path_inside(path, SHM_MOUNT) and not path_inside(path, FSX_MOUNT):
                    raise ValueError(
                        f"{name}: {path!r} is not on a mounted volume; use a normalised absolute "
                        f"path under {SHM_MOUNT}/ or {FSX_MOUNT}/"
                    )
            elif not path_inside(path, FSX_MOUNT):
                raise ValueError(
                    f"{name}: {path!r} does not survive node replacement; use a normalised "
                    f"absolute path under {FSX_MOUNT}/"
                )
            if path_inside(path, FSX_MOUNT):
                _check_team_owned(path, info, tier=name)
        return value

    @field_validator("checkpoint_intervals")
    @classmethod
    def _checkpoint_intervals(
        cls, value: dict[str, int | str], info: ValidationInfo
    ) -> dict[str, int | str]:
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
            if not isinstance(interval, int) or interval == 0:
                # A disabled tier never conflicts; an auto one re-plans itself from its cost.
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
        platform = _platform(info)
        if platform is not None and not platform.elastic_training:
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
        preset = info.data.get("preset")
        # A team's own code decides what sizes it runs: only the trainer's are checked.
        if preset is None or platform is None or info.data.get("entry_point") is not None:
            return f"{low}:{high}"
        gpus = platform.instance.accelerator_count
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
        platform = _platform(info)
        if platform is not None and not platform.topology_scheduling:
            raise ValueError(
                f"the environment's task governance add-on is older than "
                f"{_version(TOPOLOGY_SCHEDULING_MINIMUM)}, the first with topology-aware "
                f"scheduling; upgrade {TASK_GOVERNANCE} (eks.addons) or leave --topology out"
            )
        if platform is None:
            return text
        instance, instance_type = platform.instance, platform.instance_type
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
    def runs_trainer(self) -> bool:
        """The job runs the project's trainer, not a team's own code."""
        return self.entry_point is None


def _platform(info: ValidationInfo) -> JobPlatform | None:
    """The job's platform facts, where they validated."""
    platform = info.data.get("platform")
    return platform if isinstance(platform, JobPlatform) else None


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
    if team is None or path_inside(path, team_directory(team)):
        return
    where = f"{tier}: " if tier else ""
    raise ValueError(
        f"{where}{path!r} is outside team {team}'s directory, which is all its jobs may write; "
        f"use a path under {team_directory(team)}/"
    )


def path_inside(path: str, mount: str) -> bool:
    """True when `path` is an absolute, normalised path strictly inside `mount`."""
    return path.startswith(mount + "/") and posixpath.normpath(path) == path
