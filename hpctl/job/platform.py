"""`JobPlatform`: what the environment decides for a job on one instance group, derived once
from its config (`platform_for`) and never chosen by the user: the group's instance type,
taints and what its nodes leave a job (`config.node_model`), the team namespace's claims and
service account, and what the cluster's add-ons and tiered storage offer."""

from __future__ import annotations

from functools import cached_property
from typing import Final

from pydantic import BaseModel, ConfigDict, field_validator

from config.addons import (
    ELASTIC_TRAINING_MINIMUM,
    TASK_GOVERNANCE,
    TOPOLOGY_SCHEDULING_MINIMUM,
    TRAINING_OPERATOR,
    Version,
    parse_version,
)
from config.instance_types import InstanceType, lookup
from config.kubernetes import Taint, is_dns1123_subdomain
from config.node_model import JobAllocation
from config.plan import PlatformPlan
from config.schema import EnvironmentConfig
from config.schema.hyperpod import InstanceGroupConfig
from config.teams import DATA_CLAIM_NAME, TEAM_CLAIM_NAME, TRAINING_SERVICE_ACCOUNT


class JobPlatform(BaseModel):
    """The environment's facts a job on one instance group is checked against and rendered
    with. Unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_type: str
    # The instance group's taints; the pods tolerate each.
    taints: tuple[Taint, ...] = ()
    # What the pod requests on its node besides its devices: what the node model leaves a job
    # on the group's nodes (config.node_model).
    allocation: JobAllocation
    # The team namespace's claims (config/teams.py): the team's own tree of the file system,
    # and the data repository's directory, read-only.
    fsx_claim: str = TEAM_CLAIM_NAME
    data_claim: str = DATA_CLAIM_NAME
    # The team's Kubernetes service account (its IAM role through EKS Pod Identity).
    service_account: str = TRAINING_SERVICE_ACCOUNT
    # The cluster has HyperPod tiered storage: tiers whose storage is "auto" use managed
    # tiered checkpointing; without it, a local directory.
    tiered_storage: bool = False
    # What the environment's add-ons offer: topology-aware scheduling (task governance
    # >= v1.2.2) and elastic jobs (training operator >= v1.2).
    topology_scheduling: bool = True
    elastic_training: bool = True
    # The environment runs images by digest only (its require_image_digest).
    require_image_digest: bool = False

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

    @cached_property
    def instance(self) -> InstanceType:
        """The figures of the group's instance type (config.instance_types), read once."""
        return lookup(self.instance_type)


# JobPlatform's fields: the environment decides them, a job's options never do.
PLATFORM_FIELDS: Final = frozenset(JobPlatform.model_fields)


def addon_offers(config: EnvironmentConfig, addon: str, minimum: Version) -> bool:
    """The environment installs `addon` at `minimum` or later."""
    version = parse_version(config.eks.addon_version(addon))
    return version is not None and version >= minimum


def platform_for(
    config: EnvironmentConfig, group: InstanceGroupConfig, plan: PlatformPlan
) -> JobPlatform:
    """The platform's facts for a job on `group` of the environment `config`, read once for
    every check and the render that follow: the node from the environment's frozen plan
    (config.plan)."""
    node = plan.node_model(group.name)
    return JobPlatform(
        instance_type=group.instance_type,
        taints=tuple(group.taints),
        allocation=node.job,
        tiered_storage=config.hyperpod.tiered_storage.enabled,
        topology_scheduling=addon_offers(config, TASK_GOVERNANCE, TOPOLOGY_SCHEDULING_MINIMUM),
        elastic_training=addon_offers(config, TRAINING_OPERATOR, ELASTIC_TRAINING_MINIMUM),
        require_image_digest=config.require_image_digest,
    )
