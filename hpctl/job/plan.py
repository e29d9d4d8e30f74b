"""`JobPlan`: what follows from a job's choices (`JobSpec`), the platform's facts for its
group (`JobPlatform`) and its trainer preset: the parallel settings and elastic sizes the
trainer runs, the placement Kueue is asked for, the checkpoint tiers' directories, intervals
and storage, the world and its batch. `render_job` builds one per job and reads every derived
value from it; each is computed at most once.
"""

from __future__ import annotations

from functools import cached_property

from config.instance_types import InstanceType
from config.kubernetes import (
    NETWORK_NODE_LAYER_LABELS,
    PREFERRED_TOPOLOGY_ANNOTATION,
    ULTRASERVER_LABEL,
    team_namespace,
)
from config.teams import team_checkpoints_directory, team_runs_directory
from hpctl.job.scaling import (
    ElasticPlan,
    Parallelism,
    configured,
    elastic_plan,
    parallel_overrides,
    resolved_parallelism,
)
from hpctl.job.spec import (
    NO_TOPOLOGY,
    SHM_MOUNT,
    TOPOLOGY_MODES,
    JobSpec,
    path_inside,
    preset_config,
)
from training.checkpoint.config import (
    AUTO_STORAGE,
    DURABLE,
    LOCAL_STORAGE,
    MANAGED_STORAGE,
    TierConfig,
)
from training.config import JobConfig
from training.environment import CHECKPOINT_DIR_ENV, NODE_CHECKPOINT_DIR_ENV, environment_tiers

# Node-local checkpoint directory of a job that does not run the project's trainer (pod
# memory, like the trainer's fast tier; HPTRAIN_NODE_CHECKPOINT_DIR).
NODE_CHECKPOINT_DIR = f"{SHM_MOUNT}/checkpoints"


class JobPlan:
    """The derived side of a job: read-only, each value computed on first use."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec

    @property
    def instance(self) -> InstanceType:
        return self.spec.platform.instance

    @property
    def namespace(self) -> str:
        return team_namespace(self.spec.team)

    @property
    def trainer_config(self) -> JobConfig:
        return preset_config(self.spec.preset)

    @cached_property
    def elastic_range(self) -> tuple[int, int] | None:
        if self.spec.elastic is None:
            return None
        low, high = self.spec.elastic.split(":")
        return int(low), int(high)

    @property
    def max_nodes(self) -> int:
        """Nodes at the job's largest: the top of an elastic range, else `nodes`."""
        return self.elastic_range[1] if self.elastic_range else self.spec.nodes

    @cached_property
    def parallel_mode(self) -> Parallelism | None:
        """FSDP, HSDP, or None where the preset's own parallel settings stand."""
        spec = self.spec
        return resolved_parallelism(
            self.trainer_config, spec.parallelism, spec.tp, self.max_nodes > 1
        )

    @cached_property
    def parallel_overrides(self) -> dict[str, int]:
        """The trainer's parallel settings the job sets (`--set` in its arguments)."""
        return parallel_overrides(self.parallel_mode, self.instance.accelerator_count, self.spec.tp)

    @cached_property
    def parallel_config(self) -> JobConfig:
        """The preset with the job's parallel settings: what the trainer runs."""
        return configured(self.spec.preset, self.parallel_overrides)

    @cached_property
    def elastic_plan(self) -> ElasticPlan | None:
        """The sizes an elastic job runs at and their common batch; None for a fixed size."""
        if self.elastic_range is None:
            return None
        low, high = self.elastic_range
        if not self.spec.runs_trainer:
            # Every count: the platform knows nothing of other code's batch or mesh.
            return ElasticPlan(sizes=tuple(range(low, high + 1)), batch=0)
        gpus = self.instance.accelerator_count
        return elastic_plan(self.parallel_config, gpus, low, high, self.spec.preset)

    @cached_property
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
        spec, instance = self.spec, self.instance
        if spec.topology == NO_TOPOLOGY:
            return None
        if spec.topology is not None:
            mode, level = spec.topology.split(":", 1)
            return TOPOLOGY_MODES[mode], level
        if not (
            spec.platform.topology_scheduling
            and instance.network_topology
            and instance.supports_efa
            and self.max_nodes > 1
        ):
            return None
        pods = self.max_nodes + spec.spares
        in_one_ultraserver = instance.nvlink_domain_instances > 1 and pods <= (
            instance.nvlink_domain_instances
        )
        level = ULTRASERVER_LABEL if in_one_ultraserver else NETWORK_NODE_LAYER_LABELS[-1]
        return PREFERRED_TOPOLOGY_ANNOTATION, level

    @property
    def checkpoint_dir(self) -> str:
        """The job's shared checkpoint directory on FSx (HPTRAIN_CHECKPOINT_DIR): the
        trainer's most durable tier's, else the team's checkpoint directory for the job."""
        if self.spec.runs_trainer:
            return self.tier_dir(
                environment_tiers(self.trainer_config.checkpoint)[CHECKPOINT_DIR_ENV]
            )
        return f"{team_checkpoints_directory(self.spec.team)}/{self.spec.name}"

    @property
    def node_checkpoint_dir(self) -> str:
        """The job's checkpoint directory in each node's pod memory
        (HPTRAIN_NODE_CHECKPOINT_DIR): the trainer's first per-node tier's, if it has one."""
        if self.spec.runs_trainer:
            tier = environment_tiers(self.trainer_config.checkpoint).get(NODE_CHECKPOINT_DIR_ENV)
            if tier is not None:
                return self.tier_dir(tier)
        return NODE_CHECKPOINT_DIR

    @property
    def world_size(self) -> int:
        """Trainer ranks: one per accelerator of every node (spares stand by, not counted)."""
        return self.spec.nodes * self.instance.accelerator_count

    @cached_property
    def global_batch_size(self) -> int:
        """The preset's batch fitted to the job's world (`JobConfig.batch_for_world`); for an
        elastic job the one batch every size it runs at splits (`elastic_plan`)."""
        plan = self.elastic_plan
        if plan is not None:
            return plan.batch
        return self.parallel_config.batch_for_world(self.world_size)

    @property
    def total_steps(self) -> int:
        steps = self.spec.steps
        return steps if steps is not None else self.trainer_config.training.steps

    @property
    def out_dir(self) -> str:
        return self.spec.run_dir or f"{team_runs_directory(self.spec.team)}/{self.spec.name}"

    def tier_dir(self, name: str) -> str:
        """The pod directory of checkpoint tier `name`."""
        tier = self.trainer_config.checkpoint.tier(name)
        chosen = self.spec.checkpoint_dirs.get(name)
        return chosen or default_tier_dir(tier, self.spec.team, self.spec.name)

    def tier_interval(self, name: str) -> int | str:
        """Steps between checkpoints of tier `name` (0: disabled), or "auto"."""
        tier = self.trainer_config.checkpoint.tier(name)
        return self.spec.checkpoint_intervals.get(name, tier.interval)

    def tier_storage(self, name: str) -> str:
        """The storage kind of tier `name`, "auto" resolved by the cluster's tiered storage."""
        storage = self.trainer_config.checkpoint.tier(name).storage
        if storage != AUTO_STORAGE:
            return storage
        return MANAGED_STORAGE if self.spec.platform.tiered_storage else LOCAL_STORAGE

    @cached_property
    def managed_storage(self) -> bool:
        """Some tier uses HyperPod managed tiered checkpointing; for a team's own code, the
        cluster offers it."""
        if not self.spec.runs_trainer:
            return self.spec.platform.tiered_storage
        return any(
            self.tier_storage(tier.name) == MANAGED_STORAGE
            for tier in self.trainer_config.checkpoint.tiers
        )


def default_tier_dir(tier: TierConfig, team: str, job_name: str) -> str:
    """A tier's directory when the job names none: a per-node tier in pod memory (the
    preset's own directory when it names one there, else one per tier), a shared tier on FSx
    in the team's checkpoint directory, under the job's name."""
    if tier.per_node:
        return (
            tier.dir
            if path_inside(tier.dir, SHM_MOUNT)
            else f"{SHM_MOUNT}/hptrain-ckpt-{tier.name}"
        )
    root = f"{team_checkpoints_directory(team)}/{job_name}"
    # A job resubmitted under the same name finds its durable checkpoints there; any other
    # shared tier gets its own root beside it (a suffix, never inside another tier's root).
    # The durable root moved into the team's directory (from /fsx/checkpoints/<job>, which
    # no job can write): a job resubmitted across that change starts from step 0.
    return root if tier.name == DURABLE else f"{root}-{tier.name}"
