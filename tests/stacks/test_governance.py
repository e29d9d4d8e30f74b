"""Governance stack: the add-on, one scheduler config, one quota per team, and each team's
workspace (after the namespace its quota creates, with the Job that creates its directories),
in order, in every environment."""

from __future__ import annotations

import re

import pytest

from config.addons import ADDONS, TASK_GOVERNANCE
from config.images import TEAM_DIRECTORIES, pinned_images
from config.kubernetes import team_namespace
from config.team_admission import team_admissions
from config.team_groups import team_gid, team_uid
from config.teams import (
    MANAGED_TIER_PATH_KEY,
    TEAM_CONFIG_MAP,
    managed_tier_prefix,
    team_directories,
)
from platform_constructs.task_governance import COMPUTE_QUOTA_TYPE, KUEUE_CONTROLLER, KUEUE_WAIT_ID
from platform_constructs.team_admission import policy_name, team_admission_manifest
from tests.support import SYNTH_GROUP, SynthResult, kubernetes_objects, manifest_tokens, only

pytestmark = pytest.mark.xdist_group(SYNTH_GROUP)


def test_only_environments_with_governance_get_the_stack(synth_all):
    with_stack = {name for name, result in synth_all.items() if "governance" in result.stacks}
    assert with_stack == {n for n, r in synth_all.items() if r.config.governance is not None}
    assert with_stack == set(synth_all)


def test_task_governance_add_on_at_its_pin(prod: SynthResult):
    addon = only(prod.resources("governance", "AWS::EKS::Addon"))
    assert addon["Properties"]["AddonName"] == TASK_GOVERNANCE
    assert addon["Properties"]["AddonVersion"] == ADDONS[TASK_GOVERNANCE].version
    assert prod.exported(addon["Properties"]["ClusterName"])[0] == "eks"


def test_one_scheduler_config_after_the_add_ons_kueue_controller_is_available(
    prod: SynthResult,
):
    [(logical_id, config)] = prod.resources(
        "governance", "AWS::SageMaker::ClusterSchedulerConfig"
    ).items()
    (addon_id,) = prod.resources("governance", "AWS::EKS::Addon")
    waits = prod.resources("governance", "Custom::AWSCDK-EKS-KubernetesObjectValue")
    ((kueue_wait, wait),) = [
        (k, w) for k, w in waits.items() if w["Properties"]["ObjectName"] == KUEUE_CONTROLLER
    ]
    assert config["DependsOn"] == [kueue_wait]
    assert wait["DependsOn"] == [addon_id]
    # Named for what it waits for: CloudFormation shows this ID beside a timeout.
    assert kueue_wait.startswith(KUEUE_WAIT_ID)
    assert config["Properties"]["Name"] == prod.config.names.scheduler_config
    classes = {
        c["Name"]: c["Weight"] for c in config["Properties"]["SchedulerConfig"]["PriorityClasses"]
    }
    assert classes == {c.name: c.weight for c in prod.config.governance.priority_classes}
    assert prod.exported(config["Properties"]["ClusterArn"]) == (
        "hyperpod",
        {"Fn::GetAtt": ["HyperPodCluster", "ClusterArn"]},
    )
    assert logical_id.startswith("SchedulerConfig")


def test_one_quota_per_team_after_the_scheduler_config(prod: SynthResult):
    quotas = prod.resources("governance", COMPUTE_QUOTA_TYPE)
    (scheduler_id,) = prod.resources("governance", "AWS::SageMaker::ClusterSchedulerConfig")
    teams = {q["Properties"]["ComputeQuotaTarget"]["TeamName"]: q for q in quotas.values()}
    assert sorted(teams) == sorted(t.name for t in prod.config.governance.teams)
    for team, quota in teams.items():
        assert quota["DependsOn"] == sorted([scheduler_id, _admission_of(prod, team)])
        assert quota["Properties"]["Name"] == prod.config.names.compute_quota(team)
        assert prod.exported(quota["Properties"]["ClusterArn"])[0] == "hyperpod"
    p5 = [
        r["Count"]
        for q in quotas.values()
        for r in q["Properties"]["ComputeQuotaConfig"]["ComputeQuotaResources"]
        if r["InstanceType"] == "ml.p5.48xlarge"
    ]
    assert sum(p5) == 16


def test_governance_deploys_after_the_cluster_add_ons(prod: SynthResult):
    dependencies = {s.stack_name for s in prod.stacks["governance"].dependencies}
    assert prod.stacks["cluster_addons"].stack_name in dependencies
    assert prod.stacks["hyperpod"].stack_name in dependencies


def _quota_of(result: SynthResult, team: str) -> str:
    (logical_id,) = [
        k
        for k, q in result.resources("governance", COMPUTE_QUOTA_TYPE).items()
        if q["Properties"]["ComputeQuotaTarget"]["TeamName"] == team
    ]
    return logical_id


def _admission_of(result: SynthResult, team: str) -> str:
    """The logical ID of the manifest that applies `team`'s admission policy."""
    manifests = result.resources("governance", "Custom::AWSCDK-EKS-KubernetesResource")
    (logical_id,) = [
        k
        for k, m in manifests.items()
        if any(
            o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == policy_name(team)
            for o in kubernetes_objects({"Resources": {k: m}})
        )
    ]
    return logical_id


def test_every_team_namespace_is_guarded_by_its_admission_policy(env: SynthResult):
    """Policy and binding per team, built from the environment's config, applied before the
    quota that creates the namespace."""
    governance, groups = env.config.governance, env.config.hyperpod.instance_groups
    for team, admission in team_admissions(governance, groups).items():
        manifest = env.resources("governance", "Custom::AWSCDK-EKS-KubernetesResource")[
            _admission_of(env, team)
        ]
        objects = kubernetes_objects({"Resources": {"M": manifest}})
        assert [(o["kind"], o["spec"]) for o in objects] == [
            (o["kind"], o["spec"]) for o in team_admission_manifest(admission)
        ]
        assert (
            _admission_of(env, team)
            in env.resources("governance", COMPUTE_QUOTA_TYPE)[_quota_of(env, team)]["DependsOn"]
        )


def test_every_team_namespace_is_awaited_after_its_quota(env: SynthResult):
    waits = env.resources("governance", "Custom::AWSCDK-EKS-KubernetesObjectValue")
    awaited = {
        w["Properties"]["ObjectName"]: w["DependsOn"]
        for w in waits.values()
        if w["Properties"]["ObjectType"] == "namespace"
    }
    teams = [t.name for t in env.config.governance.teams]
    assert set(awaited) == {team_namespace(t) for t in teams}
    for team in teams:
        assert _quota_of(env, team) in awaited[team_namespace(team)]


def test_team_config_map_names_the_checkpoint_buckets_team_prefix(env: SynthResult):
    template = env.templates["governance"]
    tokens = manifest_tokens(template)
    bucket = env.resolved("storage", env.platform.storage.checkpoint_bucket.bucket_name)
    config_maps = {
        o["metadata"]["namespace"]: o["data"]
        for o in kubernetes_objects(template)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == TEAM_CONFIG_MAP
    }
    assert set(config_maps) == {team_namespace(t.name) for t in env.config.governance.teams}
    for team in env.config.governance.teams:
        path = config_maps[team_namespace(team.name)][MANAGED_TIER_PATH_KEY]
        placeholder, key = path.removeprefix("s3://").split("/", 1)
        assert env.exported(tokens[placeholder]) == ("storage", bucket)
        assert key == managed_tier_prefix(team.name)


def _team_of_script(job: dict) -> str:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    (team,) = {t for t in re.findall(r"/fsx/teams/([a-z0-9-]+)", container["command"][-1])}
    return team


def test_every_team_gets_its_directories_owned_by_the_user_its_jobs_run_as(env: SynthResult):
    found = [o for o in kubernetes_objects(env.templates["governance"]) if o["kind"] == "Job"]
    # In the platform's own namespace: a team namespace has no claim above the team's tree.
    assert {o["metadata"]["namespace"] for o in found} == {"default"}
    jobs = {team_namespace(_team_of_script(o)): o for o in found}
    teams = [t.name for t in env.config.governance.teams]
    assert set(jobs) == {team_namespace(t) for t in teams}
    image = {**pinned_images(env.config.region), **env.config.eks.image_overrides}[TEAM_DIRECTORIES]
    taints = {t.key for g in env.config.hyperpod.instance_groups for t in g.taints}
    for team in teams:
        pod = jobs[team_namespace(team)]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == image
        script = container["command"][-1]
        # The user and group `hpctl job render` gives the team's pods (hpctl/job/render.py).
        assert f'chown {team_uid(team)}:{team_gid(team)} "$dir"' in script
        for directory in team_directories(team):
            assert directory in script
        assert {t["key"] for t in pod.get("tolerations", [])} == taints


def test_every_team_namespace_is_isolated_once_it_exists(env: SynthResult):
    """Per team: the NetworkPolicies and the Pod Security patch wait for its namespace, and
    the collector's allow names the control-plane subnets (where its ENIs are)."""
    teams = [t.name for t in env.config.governance.teams]
    policies = [
        o for o in kubernetes_objects(env.templates["governance"]) if o["kind"] == "NetworkPolicy"
    ]
    for team in teams:
        namespace = team_namespace(team)
        names = {p["metadata"]["name"] for p in policies if p["metadata"]["namespace"] == namespace}
        assert "default-deny" in names and "allow-metrics-scrape" in names, team
    (scrape,) = [
        p for p in policies
        if p["metadata"]["name"] == "allow-metrics-scrape"
        and p["metadata"]["namespace"] == team_namespace(teams[0])
    ]  # fmt: skip
    sources = [b["ipBlock"]["cidr"] for b in scrape["spec"]["ingress"][0]["from"]]
    assert sources == [str(c) for _, c in sorted(env.layout.infra.items())]
    patches = env.resources("governance", "Custom::AWSCDK-EKS-KubernetesPatch")
    patched = {p["Properties"]["ResourceName"] for p in patches.values()}
    assert patched == {f"namespace/{team_namespace(t)}" for t in teams}
    # No team names principals in the shipped configs: no access entries.
    assert env.resources("governance", "AWS::EKS::AccessEntry") == {}
