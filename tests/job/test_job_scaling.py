"""Placement, elastic jobs and parallelism in rendered jobs: the Kueue topology request, the
operator's elasticPolicy, and the trainer's parallel settings, each checked against what the
receiving side accepts (the trainer's own argument parser and mesh, the HyperPod CLI's levels)
and each refusal on its own."""

from __future__ import annotations

from typing import Any

import pytest

from config.addons import TASK_GOVERNANCE, TRAINING_OPERATOR
from config.kubernetes import (
    PREFERRED_TOPOLOGY_ANNOTATION,
    REQUIRED_TOPOLOGY_ANNOTATION,
    ULTRASERVER_LABEL,
)
from config.node_model import group_model
from config.schema import EnvironmentConfig
from hpctl.job import scaling
from hpctl.job.environment import JobRequestError
from hpctl.job.plan import JobPlan
from hpctl.job.render import ELASTIC_RDZV_BACKEND, render_job
from hpctl.job.spec import JobSpec
from tests.job.conftest import GB200, env_spec, gb200_environment, make_spec
from tests.support import environment, variant_of
from training.config_parsing import ConfigError
from training.train import parse_args

LAYER_3 = "topology.k8s.aws/network-node-layer-3"
LAYER_1 = "topology.k8s.aws/network-node-layer-1"


GB200_ENV = gb200_environment()


def _gb200_spec(**overrides: Any) -> JobSpec:
    allocation = group_model(GB200_ENV, "gpu-gb200").job
    return make_spec(
        instance_type=GB200, instance_group="gpu-gb200", allocation=allocation, **overrides
    )


def _with_addon(addon: str, version: str) -> EnvironmentConfig:
    """prod as if it ran `addon` at `version`, past the schema's minimum: what a job sees in an
    environment whose add-on predates a feature."""
    prod = environment("prod").config
    eks = prod.eks.model_copy(update={"addons": {**prod.eks.addons, addon: version}})
    return prod.model_copy(update={"eks": eks})


def _problem(config: EnvironmentConfig | str, **options: Any) -> str:
    with pytest.raises(JobRequestError) as caught:
        env_spec(config, **options)
    (line,) = caught.value.problems
    return line


def _annotations(manifest: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    (replica,) = manifest["spec"]["replicaSpecs"]
    job = manifest["metadata"].get("annotations", {})
    return job, replica["template"]["metadata"].get("annotations", {})


def _trainer_config(spec: JobSpec) -> Any:
    (replica,) = render_job(spec)["spec"]["replicaSpecs"]
    (container,) = replica["template"]["spec"]["containers"]
    args = [a.replace("$(HPTRAIN_MANAGED_S3_PATH)", "s3://b/m") for a in container["args"]]
    config, _, _ = parse_args(args)
    return config


# --------------------------------------------------------------------------- placement


def test_a_multi_node_efa_job_prefers_one_network_node_on_job_and_pod_template() -> None:
    job, pods = _annotations(render_job(make_spec(nodes=4)))
    assert job == pods == {PREFERRED_TOPOLOGY_ANNOTATION: LAYER_3}


def test_a_single_node_job_asks_for_no_placement() -> None:
    job, pods = _annotations(render_job(make_spec(nodes=1)))
    assert job == pods == {}


def test_a_type_hyperpod_does_not_label_gets_no_default_placement() -> None:
    spec = env_spec("dev", team="sandbox", instance_group="gpu-g5", nodes=2)
    assert JobPlan(spec).instance.supports_efa
    assert _annotations(render_job(spec)) == ({}, {})


def test_gb200_jobs_prefer_one_ultraserver_while_they_fit_in_one() -> None:
    fits = env_spec(GB200_ENV, instance_group="gpu-gb200", nodes=18)
    assert JobPlan(fits).placement == (PREFERRED_TOPOLOGY_ANNOTATION, ULTRASERVER_LABEL)
    # 17 nodes and 2 spares are 19 pods: more than one UltraServer holds.
    spills = _gb200_spec(nodes=17, spares=2)
    assert JobPlan(spills).placement == (PREFERRED_TOPOLOGY_ANNOTATION, LAYER_3)


@pytest.mark.parametrize(
    ("topology", "annotation", "level"),
    [
        (f"required:{LAYER_1}", REQUIRED_TOPOLOGY_ANNOTATION, LAYER_1),
        (f"preferred:{LAYER_1}", PREFERRED_TOPOLOGY_ANNOTATION, LAYER_1),
        ("ultraserver", REQUIRED_TOPOLOGY_ANNOTATION, ULTRASERVER_LABEL),
    ],
)
def test_an_explicit_request_is_the_only_topology_annotation(
    topology: str, annotation: str, level: str
) -> None:
    spec = _gb200_spec(nodes=4, topology=topology)
    job, pods = _annotations(render_job(spec))
    # Kueue refuses a pod set with more than one topology annotation.
    assert job == pods == {annotation: level}


def test_none_turns_the_default_placement_off() -> None:
    assert _annotations(render_job(make_spec(nodes=4, topology="none"))) == ({}, {})


def test_an_unknown_level_is_refused() -> None:
    problem = _problem("prod", topology="required:rack")
    assert problem.startswith(
        "--topology: 'required:rack' is not a placement; use required:LEVEL or preferred:LEVEL "
        f"with a LEVEL of {LAYER_1}, "
    )
    assert problem.endswith("or 'ultraserver' or 'none'")


def test_a_type_without_topology_labels_refuses_a_request() -> None:
    problem = _problem(
        "dev", team="sandbox", instance_group="gpu-g5", topology=f"required:{LAYER_3}"
    )
    assert problem.startswith("--topology: ml.g5.12xlarge nodes carry no network topology labels")
    assert problem.endswith("leave --topology out")


def test_ultraserver_on_a_type_that_is_no_ultraserver_is_refused() -> None:
    problem = _problem("prod", topology="ultraserver")
    assert problem.startswith(
        "--topology: ml.p5.48xlarge is no UltraServer instance, so its nodes have no "
        f"{ULTRASERVER_LABEL}"
    )


def test_a_job_larger_than_an_ultraserver_cannot_require_one() -> None:
    with pytest.raises(ValueError, match="19 pods") as caught:
        _gb200_spec(nodes=17, spares=2, topology="ultraserver")
    assert "do not fit in one UltraServer of 18 ml.p6e-gb200.36xlarge instances" in str(
        caught.value
    )
    # Preferred is a wish, not a condition: Kueue takes the next level up.
    assert JobPlan(
        _gb200_spec(nodes=17, spares=2, topology=f"preferred:{ULTRASERVER_LABEL}")
    ).placement


def test_an_elastic_job_must_fit_an_ultraserver_at_its_largest() -> None:
    with pytest.raises(ValueError, match="20 pods"):
        _gb200_spec(nodes=2, elastic="2:20", topology="ultraserver")


def test_task_governance_older_than_topology_scheduling_refuses_a_request() -> None:
    old = _with_addon(TASK_GOVERNANCE, "v1.2.1-eksbuild.1")
    problem = _problem(old, topology=f"preferred:{LAYER_3}")
    assert problem.startswith("--topology: the environment's task governance add-on is older")
    assert "upgrade amazon-sagemaker-hyperpod-taskgovernance (eks.addons)" in problem
    # The default placement is left out there rather than refused.
    assert JobPlan(env_spec(old, nodes=4)).placement is None
    assert JobPlan(env_spec(_with_addon(TASK_GOVERNANCE, "v1.2.2-eksbuild.1"), nodes=4)).placement


# --------------------------------------------------------------------------- parallelism


@pytest.mark.parametrize(
    ("options", "overrides", "mesh"),
    [
        # Multi-node: HSDP, a node's 8 GPUs shard, nodes replicate.
        ({"nodes": 2}, {"dp_replicate": -1, "dp_shard": 8, "tp": 1}, (2, 8, 1)),
        ({"nodes": 2, "tp": 2}, {"dp_replicate": -1, "dp_shard": 4, "tp": 2}, (2, 4, 2)),
        (
            {"nodes": 2, "parallelism": "fsdp"},
            {"dp_replicate": 1, "dp_shard": -1, "tp": 1},
            (1, 16, 1),
        ),
        # One node: the preset's plain FSDP, tensor parallelism when asked for.
        ({"nodes": 1}, {}, (1, 8, 1)),
        ({"nodes": 1, "tp": 4}, {"dp_replicate": 1, "dp_shard": -1, "tp": 4}, (1, 2, 4)),
        (
            {"nodes": 1, "parallelism": "hsdp"},
            {"dp_replicate": -1, "dp_shard": 8, "tp": 1},
            (1, 8, 1),
        ),
    ],
)
def test_the_trainer_runs_the_mesh_the_job_renders(
    options: dict[str, Any], overrides: dict[str, int], mesh: tuple[int, int, int]
) -> None:
    spec = make_spec(**options)
    assert JobPlan(spec).parallel_overrides == {f"parallel.{k}": v for k, v in overrides.items()}
    config = _trainer_config(spec)
    assert config.mesh_shape(JobPlan(spec).world_size) == mesh
    config.check_world(JobPlan(spec).world_size)  # the rendered batch splits over the mesh


def test_a_preset_with_its_own_sharding_keeps_it(eight_rank_preset: str) -> None:
    assert JobPlan(make_spec(preset=eight_rank_preset, nodes=1)).parallel_overrides == {}


def test_a_tensor_parallel_degree_that_leaves_a_node_is_refused() -> None:
    with pytest.raises(ValueError, match="tp") as caught:
        make_spec(nodes=2, tp=16)
    assert (
        "16 does not divide the 8 accelerators of a ml.p5.48xlarge node; tensor parallelism "
        "stays inside a node's NVLink, so use one of 1, 2, 4, 8"
    ) in str(caught.value)


def test_a_tensor_parallel_degree_the_model_cannot_split_is_refused() -> None:
    # tiny has 2 key/value heads: 4-way tensor parallelism splits no whole head.
    with pytest.raises(ValueError, match="preset 'tiny' refuses it") as caught:
        make_spec(preset="tiny", instance_type="ml.g5.12xlarge", tp=4)
    assert "must divide model.n_heads=4 and the key/value heads (2)" in str(caught.value)


# --------------------------------------------------------------------------- elastic jobs


def test_an_elastic_job_lists_the_sizes_the_trainer_runs() -> None:
    spec = make_spec(nodes=2, elastic="2:8")
    manifest = render_job(spec)
    (replica,) = manifest["spec"]["replicaSpecs"]
    # 8b's 512 splits over 2, 4 and 8 nodes of 8 GPUs, not over 3, 5, 6 or 7.
    assert manifest["spec"]["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 8,
        "replicaDiscreteValues": [2, 4, 8],
        "gracefulShutdownTimeoutInSeconds": spec.shutdown_timeout_s,
        "scalingTimeoutInSeconds": 60,
        "faultyScaleDownTimeoutInSeconds": 30,
    }
    assert (replica["replicas"], replica["maxReplicas"]) == (2, 8)
    restart = manifest["spec"]["runPolicy"]["restartPolicy"]
    assert restart["scaleUpSnoozeTimeInSeconds"] == spec.start_deadline_s
    assert ELASTIC_RDZV_BACKEND in replica["template"]["spec"]["containers"][0]["command"]


def test_evenly_spaced_sizes_render_an_increment_step() -> None:
    spec = make_spec(preset="tiny", instance_type="ml.g5.12xlarge", nodes=1, elastic="1:2")
    policy = render_job(spec)["spec"]["elasticPolicy"]
    assert policy["replicaIncrementStep"] == 1
    assert "replicaDiscreteValues" not in policy


@pytest.mark.parametrize(
    ("elastic", "tp", "batch"),
    [("2:8", 1, 512), ("3:8", 1, 576), ("2:12", 1, 480), ("4:8", 2, 512)],
)
def test_every_size_of_an_elastic_job_runs_its_one_batch(elastic: str, tp: int, batch: int) -> None:
    low = int(elastic.split(":")[0])
    spec = make_spec(nodes=low, elastic=elastic, tp=tp)
    policy = render_job(spec)["spec"]["elasticPolicy"]
    sizes = policy.get("replicaDiscreteValues") or list(
        range(policy["minReplicas"], policy["maxReplicas"] + 1, policy["replicaIncrementStep"])
    )
    config = _trainer_config(spec)
    assert config.training.global_batch_size == batch
    for nodes in sizes:
        config.check_world(nodes * 8)  # the trainer's own check: mesh, batch, micro-batches
    for nodes in set(range(low, policy["maxReplicas"] + 1)) - set(sizes):
        with pytest.raises(ConfigError):
            config.check_world(nodes * 8)


def test_an_elastic_job_renders_hsdp_from_one_node() -> None:
    spec = make_spec(nodes=1, elastic="1:2")
    assert JobPlan(spec).parallel_mode == "hsdp"
    assert JobPlan(spec).placement == (PREFERRED_TOPOLOGY_ANNOTATION, LAYER_3)


@pytest.mark.parametrize(
    ("elastic", "message"),
    [
        ("2-8", "'2-8' is not a node range; use MIN:MAX, e.g. 2:8"),
        ("8:2", "8:2 is not a range; use MIN:MAX with 1 <= MIN < MAX"),
        ("2:2", "2:2 is not a range; use MIN:MAX with 1 <= MIN < MAX"),
        ("0:2", "0:2 is not a range; use MIN:MAX with 1 <= MIN < MAX"),
    ],
)
def test_a_range_that_is_none_is_refused(elastic: str, message: str) -> None:
    with pytest.raises(ValueError, match="elastic") as caught:
        make_spec(nodes=2, elastic=elastic)
    assert message in str(caught.value)


def test_an_elastic_job_starts_at_its_minimum() -> None:
    with pytest.raises(ValueError, match="starts at its minimum, 2 nodes, but --nodes is 4"):
        make_spec(nodes=4, elastic="2:8")


def test_sizes_the_presets_mesh_cannot_hold_are_refused(eight_rank_preset: str) -> None:
    with pytest.raises(ValueError, match="elastic") as caught:
        make_spec(preset=eight_rank_preset, nodes=1, elastic="1:2")
    assert (
        f"2 node(s) x 8 GPUs do not fit preset {eight_rank_preset!r}'s device mesh; use a range "
        "within the sizes it fits (1)"
    ) in str(caught.value)


def test_a_range_no_batch_near_the_presets_splits_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scaling, "_BATCH_SEARCH_STEPS", 0)
    with pytest.raises(ValueError, match="elastic") as caught:
        make_spec(nodes=3, elastic="3:8")
    assert (
        "no global batch near preset '8b''s 512 splits over both 3 and 8 nodes of 8 GPUs; "
        "narrow the range (e.g. 3:6)"
    ) in str(caught.value)


def test_a_training_operator_older_than_elastic_training_refuses_it() -> None:
    config = variant_of(
        "prod",
        lambda d: (
            d["eks"].setdefault("addons", {}).update({TRAINING_OPERATOR: "v1.1.2-eksbuild.1"})
        ),
    ).config
    problem = _problem(config, elastic="2:4")
    assert problem.startswith("--elastic: the environment's training operator is older than v1.2")
    assert "upgrade amazon-sagemaker-hyperpod-training-operator (eks.addons)" in problem


def test_an_elastic_job_may_only_grow_into_the_teams_quota() -> None:
    # foundation may use 8 guaranteed + 4 borrowed p5 nodes.
    problem = _problem("prod", elastic="2:16")
    assert problem == (
        "--elastic: 16 nodes (+0 spares) exceed what team foundation may use on gpu-p5: 8 "
        "guaranteed + 4 borrowable = 12; ask for at most 12"
    )
    assert JobPlan(env_spec("prod", elastic="2:12")).elastic_range == (2, 12)


def test_a_gb200_pod_takes_its_node_with_gpudirect_rdma() -> None:
    (replica,) = render_job(_gb200_spec(nodes=2))["spec"]["replicaSpecs"]
    (container,) = replica["template"]["spec"]["containers"]
    requests = container["resources"]["requests"]
    assert (requests["nvidia.com/gpu"], requests["vpc.amazonaws.com/efa"]) == (4, 8)
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"
