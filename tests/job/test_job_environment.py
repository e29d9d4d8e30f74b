"""spec_for_environment: a job's cluster facts come from the environment's config, its size
from the team's quota, and every option that does not fit is one `--option: problem; fix`."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from config.errors import ConfigError
from config.kubernetes import Taint
from config.schema import EnvironmentConfig
from config.teams import MANAGED_TIER_PATH_KEY, TEAM_CONFIG_MAP, TRAINING_SERVICE_ACCOUNT
from hpctl.job.environment import JobRequestError, default_job_name, default_priority
from hpctl.job.render import MANAGED_S3_PATH_ENV, render_job
from hpctl.job.spec import JobSpec
from tests.job.conftest import FIXED_NOW, IMAGE, env_spec, make_spec
from tests.support import environment, environment_data, loaded_from

BOTH_2 = "at most 2 nodes and spares together"
MANAGED_ENV = {
    "name": "HPTRAIN_MANAGED_S3_PATH",
    "valueFrom": {"configMapKeyRef": {"name": "hyperpod-team", "key": "managed-tier-s3-path"}},
}


def _variant(name: str, mutate: Any) -> EnvironmentConfig:
    data = environment_data(name)
    mutate(data)
    return loaded_from(data, f"{name}-variant.yaml").config


def _team(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in data["governance"]["teams"] if t["name"] == name)


def _group(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in data["hyperpod"]["instance_groups"] if g["name"] == name)


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["replicaSpecs"][0]["template"]["spec"]


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(manifest)["containers"]
    return container


def _env_names(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in _container(manifest)["env"]}


def _problems(config: EnvironmentConfig | str, **options: Any) -> list[str]:
    with pytest.raises(JobRequestError) as caught:
        env_spec(config, **options)
    problems = caught.value.problems
    assert str(caught.value) == "; ".join(problems)
    assert all("\n" not in line for line in problems)
    return problems


# --------------------------------------------------------------------------- derived fields


def test_dev_g5_job_has_efa_without_rdma_and_no_managed_tier() -> None:
    spec = env_spec("dev", team="sandbox", instance_group="gpu-g5", nodes=2)
    assert (spec.platform.instance_type, spec.instance_group, spec.team) == (
        "ml.g5.12xlarge",
        "gpu-g5",
        "sandbox",
    )
    assert spec.platform.tiered_storage is False
    assert spec.platform.taints == ()
    assert (spec.platform.service_account, spec.platform.fsx_claim) == ("training", "fsx-team")
    manifest = render_job(spec)
    env = _env_names(manifest)
    assert env["FI_PROVIDER"]["value"] == "efa"
    assert "FI_EFA_USE_DEVICE_RDMA" not in env
    assert MANAGED_S3_PATH_ENV not in env
    assert "checkpoint.fast_storage=local" in _container(manifest)["args"]
    resources = _container(manifest)["resources"]["limits"]
    assert (resources["nvidia.com/gpu"], resources["vpc.amazonaws.com/efa"]) == (4, 1)
    assert _pod(manifest)["nodeSelector"] == {
        "sagemaker.amazonaws.com/instance-group-name": "gpu-g5",
        "node.kubernetes.io/instance-type": "ml.g5.12xlarge",
    }
    assert _pod(manifest)["serviceAccountName"] == "training"
    assert manifest["metadata"]["namespace"] == "hyperpod-ns-sandbox"
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == (
        "hyperpod-ns-sandbox-localqueue"
    )


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_p5_job_with_tiered_storage_reads_its_s3_tier_from_the_team_config_map(env: str) -> None:
    assert environment(env).config.hyperpod.tiered_storage.enabled
    spec = env_spec(env, team="foundation", nodes=1)
    assert spec.platform.tiered_storage is True
    manifest = render_job(spec)
    env_vars = _env_names(manifest)
    assert env_vars[MANAGED_S3_PATH_ENV] == MANAGED_ENV
    assert _container(manifest)["env"][-1] == MANAGED_ENV
    assert env_vars["FI_EFA_USE_DEVICE_RDMA"]["value"] == "1"
    assert "checkpoint.fast_storage=managed" in _container(manifest)["args"]
    limits = _container(manifest)["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (8, 32)
    pod = _pod(manifest)
    assert pod["serviceAccountName"] == TRAINING_SERVICE_ACCOUNT
    assert pod["volumes"][0] == {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-team"}}
    assert "tolerations" not in pod  # the shipped groups have no taints


def test_the_config_map_names_are_the_platforms() -> None:
    assert MANAGED_ENV["valueFrom"]["configMapKeyRef"] == {
        "name": TEAM_CONFIG_MAP,
        "key": MANAGED_TIER_PATH_KEY,
    }


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """What Kubernetes does to container args: $(VAR) becomes the container's env value."""
    out = []
    for arg in args:
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        out.append(arg)
    return out


def test_the_trainer_gets_the_s3_tier_and_namespace_the_manifest_sets(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The manifest passes both as trainer config: the namespace as the job name, the S3 tier
    # as $(HPTRAIN_MANAGED_S3_PATH), which Kubernetes expands from the ConfigMap variable.
    # The managed library is not installed here: a recorder stands in for its config class.
    from training.checkpoint import managed
    from training.checkpoint.tiers import ManagedStorageTier, open_tiers
    from training.train import parse_args

    spec = env_spec("prod", team="foundation", nodes=1)
    manifest = render_job(spec)
    args = _container(manifest)["args"]
    assert f"checkpoint.managed_s3_path=$({MANAGED_S3_PATH_ENV})" in args
    assert f"checkpoint.managed_namespace={spec.name}" in args
    s3 = "s3://bucket/teams/foundation/managed-tier"
    config, _, _ = parse_args(_expand(args, {MANAGED_S3_PATH_ENV: s3}))
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(managed, "AVAILABLE", True)
    monkeypatch.setattr(
        managed, "SageMakerCheckpointConfig", lambda **kw: seen.append(kw), raising=False
    )
    tiers = open_tiers(config.checkpoint, tmp_path, world_size=8)
    assert isinstance(tiers["fast"], ManagedStorageTier)
    assert seen == [{"namespace": spec.name, "world_size": 8, "s3_tier_base_path": s3}]


def test_tiered_storage_off_means_the_local_fast_tier() -> None:
    config = _variant("prod", lambda d: d["hyperpod"]["tiered_storage"].update(enabled=False))
    spec = env_spec(config, nodes=1)
    assert spec.platform.tiered_storage is False
    assert MANAGED_S3_PATH_ENV not in _env_names(render_job(spec))


def _tainted(data: dict[str, Any]) -> None:
    group = _group(data, "gpu-p5")
    del group["deep_health_checks"]  # HyperPod refuses custom taints with deep health checks
    group["taints"] = [
        {"key": "example.com/dedicated", "value": "training", "effect": "NoSchedule"},
        {"key": "example.com/gpu", "effect": "NoExecute"},
    ]


def test_every_taint_of_the_group_becomes_a_toleration() -> None:
    spec = env_spec(_variant("prod", _tainted), nodes=2)
    assert spec.platform.taints == (
        Taint(key="example.com/dedicated", value="training", effect="NoSchedule"),
        Taint(key="example.com/gpu", effect="NoExecute"),
    )
    assert _pod(render_job(spec))["tolerations"] == [
        {
            "key": "example.com/dedicated",
            "operator": "Equal",
            "value": "training",
            "effect": "NoSchedule",
        },
        {"key": "example.com/gpu", "operator": "Exists", "effect": "NoExecute"},
    ]


# Taints as an environment file may give them, valid or not: the schema and JobSpec check
# them with the same rules, so a group's taints always make a job's tolerations.
TAINTS: list[dict[str, Any]] = [
    {"key": "example.com/gpu", "effect": "NoSchedule"},
    {"key": "example.com/gpu", "value": "", "effect": "NoSchedule"},
    {"key": "example.com/gpu", "value": "a.b_c-1", "effect": "PreferNoSchedule"},
    {"key": "example.com/", "effect": "NoSchedule"},
    {"key": "Example.com/gpu", "effect": "NoSchedule"},
    {"key": "example.com/gpu", "value": "a b", "effect": "NoSchedule"},
    {"key": "example.com/gpu", "value": "a" * 64, "effect": "NoSchedule"},
    {"key": "example.com/gpu", "effect": "NoWay"},
]


@pytest.mark.parametrize("taint", TAINTS, ids=[str(t)[:60] for t in TAINTS])
def test_the_schema_and_the_job_take_the_same_taints(taint: dict[str, Any]) -> None:
    def with_taint(data: dict[str, Any]) -> None:
        group = _group(data, "gpu-p5")
        del group["deep_health_checks"]
        group["taints"] = [taint]

    try:
        config: EnvironmentConfig | None = _variant("prod", with_taint)
    except ConfigError:
        config = None
    try:
        spec: JobSpec | None = make_spec(taints=[taint])
    except ValidationError:
        spec = None
    assert (config is None) == (spec is None)
    if config is not None and spec is not None:
        assert env_spec(config).platform.taints == spec.platform.taints


def test_user_choices_pass_through() -> None:
    spec = env_spec(
        "prod",
        team="research",
        nodes="4",
        spares="1",
        preset="1b",
        steps="20",
        min_tokens_per_s="9000",
        priority="production",
        name="llama-1b",
    )
    assert (spec.nodes, spec.spares, spec.preset, spec.steps, spec.min_tokens_per_s) == (
        4,
        1,
        "1b",
        20,
        9000,
    )
    assert (spec.name, spec.team, spec.priority, spec.image) == (
        "llama-1b",
        "research",
        "production",
        IMAGE,
    )


def test_the_same_options_give_the_same_manifest() -> None:
    first, second = env_spec("prod", nodes=4), env_spec("prod", nodes=4)
    assert first == second
    assert render_job(first) == render_job(second)


@pytest.mark.parametrize(
    "field", ["instance_type", "taints", "fsx_claim", "service_account", "tiered_storage"]
)
def test_fields_the_config_decides_are_not_choices(field: str) -> None:
    with pytest.raises(TypeError, match=field):
        env_spec("prod", **{field: "x"})


# --------------------------------------------------------------------------- defaults


def test_default_priority_is_the_lowest_weight_class() -> None:
    assert env_spec("prod").priority == "experimentation"
    assert env_spec("dev", team="sandbox", instance_group="gpu-g5").priority == "experimentation"


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        # Not the last or first listed: the lowest weight.
        ([("high", 90), ("low", 5), ("mid", 20)], "low"),
        ([("low", 5), ("high", 90), ("mid", 20)], "low"),
        # A tie goes to the first name.
        ([("zeta", 5), ("top", 50), ("alpha", 5)], "alpha"),
    ],
)
def test_default_priority_order(classes: list[tuple[str, int]], expected: str) -> None:
    config = _variant(
        "prod",
        lambda d: d["governance"].update(
            priority_classes=[{"name": n, "weight": w} for n, w in classes]
        ),
    )
    assert default_priority(config) == expected
    assert env_spec(config).priority == expected


def test_default_name_is_team_preset_and_utc_time() -> None:
    assert env_spec("prod").name == "foundation-8b-20260304-050607"
    assert env_spec("prod", preset="tiny", nodes=1).name == "foundation-tiny-20260304-050607"
    later = datetime(2027, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert env_spec("prod", clock=lambda: later).name == "foundation-8b-20271231-235958"


@pytest.mark.parametrize(
    "now",
    [
        datetime(2026, 3, 4, 7, 6, 7, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 3, 3, 23, 6, 7, tzinfo=timezone(timedelta(hours=-6))),
        datetime(2026, 3, 4, 5, 6, 7),  # naive: taken as UTC, whatever the local zone
    ],
)
def test_default_name_is_stamped_in_utc(monkeypatch: pytest.MonkeyPatch, now: datetime) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert default_job_name("research", "8b", now) == "research-8b-20260304-050607"
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    ("team", "expected"),
    [
        ("r" * 60, "r" * 44 + "-8b-20260304-050607"),
        ("abc-" + "d" * 50, "abc-" + "d" * 40 + "-8b-20260304-050607"),
        ("a" * 43 + "-bcd", "a" * 43 + "-8b-20260304-050607"),  # no dash before the suffix
        ("9lives", "job-9lives-8b-20260304-050607"),
    ],
)
def test_default_name_stays_a_valid_job_name(team: str, expected: str) -> None:
    name = default_job_name(team, "8b", FIXED_NOW)
    assert name == expected
    assert len(name) <= 63
    assert make_spec(name=name).name == name


# --------------------------------------------------------------------------- rejections


def test_environment_without_governance() -> None:
    def without_governance(d: dict[str, Any]) -> None:
        del d["governance"]
        d["observability"]["metrics"]["task_governance"] = "DISABLED"  # Kueue metrics need it

    config = _variant("dev", without_governance)
    (line,) = _problems(config, team="sandbox", instance_group="gpu-g5")
    assert line.startswith("--env: dev has no governance section")
    assert "add one to config/dev.yaml" in line
    with pytest.raises(JobRequestError, match="no governance section"):
        default_priority(config)


def test_unknown_team_names_the_known_ones() -> None:
    assert _problems("prod", team="vision") == [
        "--team: unknown team 'vision' in prod; use one of evaluation, foundation, research"
    ]
    assert _problems("prod", team="hyperpod-ns-research") == [
        "--team: unknown team 'hyperpod-ns-research' in prod; use 'research'"
    ]


def test_unknown_instance_group_names_the_known_ones() -> None:
    assert _problems("prod", instance_group="gpu-p4") == [
        "--instance-group: unknown instance group 'gpu-p4' in prod; use one of gpu-p5, system"
    ]


def test_unknown_priority_names_the_known_ones() -> None:
    assert _problems("prod", priority="urgent") == [
        "--priority: unknown priority class 'urgent' in prod; use one of production, training, "
        "experimentation"
    ]
    assert _problems("prod", priority="training-priority") == [
        "--priority: unknown priority class 'training-priority' in prod; use 'training'"
    ]


def test_lookup_problems_are_reported_together() -> None:
    problems = _problems("prod", team="vision", instance_group="gpu-p4", priority="urgent")
    assert [line.split(":")[0] for line in problems] == ["--team", "--instance-group", "--priority"]


def test_a_group_without_accelerators() -> None:
    # research has a quota on the CPU group, so only the missing accelerators stop it.
    assert _problems("prod", team="research", instance_group="system", nodes=1) == [
        "--instance-group: group system is ml.m5.4xlarge, and ml.m5.4xlarge has no "
        "accelerators; use a GPU or Trainium group (gpu-p5)"
    ]


def test_invalid_choices_name_their_option() -> None:
    problems = _problems("prod", image="hptrain:latest", preset="70b", name="Llama", steps=0)
    assert [line.split(":")[0] for line in problems] == ["--name", "--image", "--preset", "--steps"]
    assert "use one of tiny, 1b, 8b" in problems[2]


# --------------------------------------------------------------------------- quota


@pytest.mark.parametrize(
    ("env", "team", "group", "nodes", "spares"),
    [
        ("prod", "foundation", "gpu-p5", 8, 4),  # 8 + 4 borrowable: spares fill the rest
        ("prod", "research", "gpu-p5", 8, 4),
        ("prod", "evaluation", "gpu-p5", 2, 0),  # Lend: never borrows
        ("prod", "evaluation", "gpu-p5", 1, 1),
        ("staging", "foundation", "gpu-p5", 2, 0),  # 1 guaranteed + 1 borrowed
        ("dev", "sandbox", "gpu-g5", 2, 0),  # DontLend: exactly its quota
    ],
)
def test_a_job_of_exactly_the_team_maximum_is_accepted(
    env: str, team: str, group: str, nodes: int, spares: int
) -> None:
    spec = env_spec(env, team=team, instance_group=group, nodes=nodes, spares=spares)
    assert (spec.nodes, spec.spares) == (nodes, spares)


@pytest.mark.parametrize(
    ("env", "team", "group", "nodes", "spares", "figures", "fix"),
    [
        ("prod", "foundation", "gpu-p5", 14, 0, "8 guaranteed + 4 borrowable = 12", "at most 12"),
        ("prod", "foundation", "gpu-p5", 16, 0, "8 guaranteed + 4 borrowable = 12", "at most 12"),
        (
            "prod",
            "foundation",
            "gpu-p5",
            8,
            5,
            "8 guaranteed + 4 borrowable = 12",
            "at most 12 nodes and spares together",
        ),
        ("prod", "evaluation", "gpu-p5", 2, 1, "2 guaranteed + 0 borrowable = 2", BOTH_2),
        ("prod", "evaluation", "gpu-p5", 4, 0, "2 guaranteed + 0 borrowable = 2", "at most 2"),
        ("staging", "research", "gpu-p5", 1, 2, "1 guaranteed + 1 borrowable = 2", BOTH_2),
        ("dev", "sandbox", "gpu-g5", 2, 1, "2 guaranteed + 0 borrowable = 2", BOTH_2),
    ],
)
def test_one_node_more_than_the_team_may_use_is_refused(
    env: str, team: str, group: str, nodes: int, spares: int, figures: str, fix: str
) -> None:
    (line,) = _problems(env, team=team, instance_group=group, nodes=nodes, spares=spares)
    assert line == (
        f"--nodes: {nodes} nodes (+{spares} spares) exceed what team {team} may use on "
        f"{group}: {figures}; ask for {fix}"
    )


def test_the_quota_comes_before_the_preset_and_other_problems_still_show(
    eight_rank_preset: str,
) -> None:
    # 14 x 8 ranks do not fit the preset's sharding either; the quota is the line that matters.
    (line,) = _problems("prod", nodes=14, preset=eight_rank_preset)
    assert line.startswith("--nodes: 14 nodes (+0 spares) exceed")
    quota, image = _problems("prod", nodes=14, preset=eight_rank_preset, image="hptrain:latest")
    assert quota.startswith("--nodes: 14 nodes")
    assert image.startswith("--image: 'hptrain:latest' is not pinned")


def test_a_size_the_quota_allows_but_the_presets_sharding_cannot_split(
    eight_rank_preset: str,
) -> None:
    (line,) = _problems("prod", nodes=2, preset=eight_rank_preset)
    assert line.startswith(f"--nodes: 2 node(s) x 8 ranks do not fit preset '{eight_rank_preset}'")


def test_a_team_without_quota_on_the_group() -> None:
    def elsewhere(data: dict[str, Any]) -> None:
        _team(data, "evaluation")["quotas"] = [{"instance_group": "system", "count": 1}]

    config = _variant("prod", elsewhere)
    assert _problems(config, team="evaluation", nodes=1) == [
        "--instance-group: team evaluation has no quota on gpu-p5 (ml.p5.48xlarge); ask the "
        "platform team for a quota"
    ]


def test_fractional_guarantees() -> None:
    def in_gpus(amount: int) -> Any:
        def mutate(data: dict[str, Any]) -> None:
            _team(data, "evaluation")["quotas"] = [
                {"instance_group": "gpu-p5", "accelerators": amount}
            ]

        return mutate

    # 12 H100s: a node and a half guaranteed, one whole node per job.
    one_and_a_half = _variant("prod", in_gpus(12))
    assert env_spec(one_and_a_half, team="evaluation", nodes=1).nodes == 1
    assert _problems(one_and_a_half, team="evaluation", nodes=2) == [
        "--nodes: 2 nodes (+0 spares) exceed what team evaluation may use on gpu-p5: "
        "1.5 guaranteed + 0 borrowable = 1.5; ask for at most 1"
    ]
    # 4 H100s: half a node, never a whole one.
    (line,) = _problems(_variant("prod", in_gpus(4)), team="evaluation", nodes=1)
    assert line.startswith(
        "--instance-group: team evaluation may use less than one node on gpu-p5: "
        "0.5 guaranteed + 0 borrowable = 0.5;"
    )


def test_no_borrowing_without_idle_resource_sharing() -> None:
    config = _variant("prod", lambda d: d["governance"].update(idle_resource_sharing=False))
    assert env_spec(config, nodes=8).nodes == 8
    (line,) = _problems(config, nodes=8, spares=1)
    assert "8 guaranteed + 0 borrowable = 8; ask for at most 8" in line
