"""render_job: the manifest carries what the spec and the instance table say, nothing else."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from config.kubernetes import METRICS_LABEL, METRICS_PORT, METRICS_PORT_NAME, TRAINING_JOB_LABEL
from config.node_model import JobAllocation
from config.team_groups import team_gid, team_uid
from hpctl.job.plan import JobPlan
from hpctl.job.render import render_job, to_yaml
from hpctl.job.spec import JobSpec
from tests.job.conftest import IMAGE
from training.checkpoint.config import AUTO_FIRST_INTERVAL, AUTO_INTERVAL, TierConfig
from training.train import parse_args


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["replicaSpecs"][0]["template"]["spec"]


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod(manifest)["containers"]
    return container


def _env(manifest: dict[str, Any]) -> dict[str, str]:
    """Plain `value` variables (a `valueFrom` one is looked up in the cluster)."""
    return {item["name"]: item["value"] for item in _container(manifest)["env"] if "value" in item}


def test_kind_metadata_queue_and_priority_labels(spec_factory) -> None:
    manifest = render_job(spec_factory(name="run-1", team="vision", priority="low"))
    assert manifest["apiVersion"] == "sagemaker.amazonaws.com/v1"
    assert manifest["kind"] == "HyperPodPyTorchJob"
    assert manifest["metadata"] == {
        "name": "run-1",
        "namespace": "hyperpod-ns-vision",
        "labels": {
            "kueue.x-k8s.io/queue-name": "hyperpod-ns-vision-localqueue",
            "kueue.x-k8s.io/priority-class": "low-priority",
        },
    }


@pytest.mark.parametrize(
    ("instance_type", "accelerator_key", "count", "efa", "rdma"),
    [
        ("ml.p5.48xlarge", "nvidia.com/gpu", 8, 32, True),
        ("ml.p4d.24xlarge", "nvidia.com/gpu", 8, 4, True),
        ("ml.g5.12xlarge", "nvidia.com/gpu", 4, 1, False),
        ("ml.g6e.48xlarge", "nvidia.com/gpu", 8, 4, False),
        ("ml.trn1.32xlarge", "aws.amazon.com/neuron", 16, 8, True),
    ],
)
def test_resources_and_efa_env_follow_the_instance_table(
    spec_factory, instance_type: str, accelerator_key: str, count: int, efa: int, rdma: bool
) -> None:
    manifest = render_job(spec_factory(instance_type=instance_type))
    resources = _container(manifest)["resources"]
    for section in ("requests", "limits"):
        assert resources[section][accelerator_key] == count
        assert resources[section]["vpc.amazonaws.com/efa"] == efa
    other = {"nvidia.com/gpu", "aws.amazon.com/neuron"} - {accelerator_key}
    assert not other & (resources["requests"].keys() | resources["limits"].keys())
    assert manifest["spec"]["nprocPerNode"] == str(count)
    assert f"--nproc-per-node={count}" in _container(manifest)["command"]
    env = _env(manifest)
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_FORK_SAFE"] == "1"
    # GPUDirect RDMA only where the EFA hardware has it.
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) is rdma
    if rdma:
        assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_cpu_and_memory_are_the_allocation_of_the_spec(spec_factory) -> None:
    allocation = JobAllocation(cpu_millicores=22_880, memory_mib=172_252)
    resources = _container(render_job(spec_factory(allocation=allocation)))["resources"]
    assert resources["requests"]["cpu"] == "22880m"
    assert resources["requests"]["memory"] == "172252Mi"
    # A memory limit, equal to the request; no CPU limit, so data loading is never throttled.
    assert resources["limits"]["memory"] == "172252Mi"
    assert "cpu" not in resources["limits"]
    assert not any(key.startswith("hugepages-") for key in resources["requests"])


def test_hugepages_are_requested_and_limited_alike_when_the_node_offers_them(
    spec_factory,
) -> None:
    allocation = JobAllocation(cpu_millicores=1000, memory_mib=2048, hugepages_2mi_mib=5120)
    resources = _container(render_job(spec_factory(allocation=allocation)))["resources"]
    assert resources["requests"]["hugepages-2Mi"] == "5120Mi"
    assert resources["limits"]["hugepages-2Mi"] == "5120Mi"


def test_common_nccl_env(spec_factory) -> None:
    env = _env(render_job(spec_factory()))
    assert env["NCCL_DEBUG"] == "WARN"
    assert env["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_pods_run_as_the_teams_training_service_account(spec_factory) -> None:
    assert _pod(render_job(spec_factory()))["serviceAccountName"] == "training"
    assert _pod(render_job(spec_factory(service_account="vision-sa")))["serviceAccountName"] == (
        "vision-sa"
    )


def test_managed_storage_reads_the_s3_tier_from_the_team_config_map(spec_factory) -> None:
    managed = _container(render_job(spec_factory(tiered_storage=True)))["env"]
    from_config_map = {item["name"]: item for item in managed if "value" not in item}
    assert from_config_map["HPTRAIN_MANAGED_S3_PATH"] == {
        "name": "HPTRAIN_MANAGED_S3_PATH",
        "valueFrom": {"configMapKeyRef": {"name": "hyperpod-team", "key": "managed-tier-s3-path"}},
    }
    local = _container(render_job(spec_factory()))["env"]
    # Without tiered storage, only the optional MLflow URI comes from the ConfigMap.
    assert [item["name"] for item in local if "value" not in item] == [
        "HPTRAIN_MLFLOW_TRACKING_URI"
    ]
    assert "HPTRAIN_MANAGED_S3_PATH" not in {item["name"] for item in local}


def test_replicas_spares_and_agent_port(spec_factory) -> None:
    manifest = render_job(spec_factory(nodes=16, spares=2))
    (replica,) = manifest["spec"]["replicaSpecs"]
    assert (replica["name"], replica["replicas"], replica["spares"]) == ("worker", 16, 2)
    assert _container(manifest)["ports"] == [
        {"containerPort": 8080, "protocol": "TCP"},
        {"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"},
    ]
    assert "--nnodes=16" in _container(manifest)["command"]


def test_workers_carry_the_scrape_label_and_their_job_name(spec_factory) -> None:
    manifest = render_job(spec_factory(name="run-7"))
    labels = manifest["spec"]["replicaSpecs"][0]["template"]["metadata"]["labels"]
    assert labels[TRAINING_JOB_LABEL] == "run-7"
    assert set(labels) == {METRICS_LABEL, TRAINING_JOB_LABEL}
    # The trainer serves on the port the pod names.
    assert f"metrics.port={METRICS_PORT}" in _container(manifest)["args"]


def test_command_launches_the_trainer_module_under_hyperpodrun(spec_factory) -> None:
    container = _container(render_job(spec_factory(nodes=2, preset="1b", steps=250)))
    command = container["command"]
    assert command[0] == "hyperpodrun"
    assert command[-2:] == ["-m", "training.train"]
    # Per-rank stdout files are what the agent's log monitor reads.
    assert "--tee=3" in command
    assert "--log-dir=/tmp/hyperpod" in command
    assert "--server-port=8080" in command
    # Restarts keep the agent's default SIGKILL; only the SIGTERM wait is configured.
    assert not [flag for flag in command if flag.startswith("--shutdown-signal")]
    assert container["args"] == [
        "--preset",
        "1b",
        "--out",
        "/fsx/teams/research/runs/llama-8b",
        "--set",
        "training.steps=250",
        "--set",
        "training.global_batch_size=256",
        # Two nodes: HSDP, sharded over a node's 8 GPUs, replicated across nodes.
        "--set",
        "parallel.dp_replicate=-1",
        "--set",
        "parallel.dp_shard=8",
        "--set",
        "parallel.tp=1",
        "--set",
        "checkpoint.fast_dir=/dev/shm/hptrain-ckpt",
        "--set",
        "checkpoint.fast_interval=50",
        "--set",
        "checkpoint.fast_storage=local",
        "--set",
        "checkpoint.durable_dir=/fsx/teams/research/checkpoints/llama-8b",
        "--set",
        "checkpoint.durable_interval=500",
        "--set",
        f"metrics.port={METRICS_PORT}",
    ]
    assert container["image"] == IMAGE


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"preset": "tiny", "hang_timeout_s": 120, "steps": 12, "checkpoint_intervals": {"fast": 0}},
        {
            "run_dir": "/fsx/teams/research/runs/a",
            "checkpoint_dirs": {
                "fast": "/fsx/teams/research/fast/a",
                "durable": "/fsx/teams/research/durable/a",
            },
            "checkpoint_intervals": {"fast": 10, "durable": 100},
            "tiered_storage": True,
        },
        {"checkpoint_intervals": {"fast": "auto"}},
        {"checkpoint_intervals": {"fast": 0, "durable": "auto"}},
    ],
)
def test_trainer_accepts_the_rendered_arguments(spec_factory, overrides: dict[str, Any]) -> None:
    spec = spec_factory(**overrides)
    # Kubernetes expands $(VAR) in args from the container's env before the trainer starts.
    args = [
        a.replace("$(HPTRAIN_MANAGED_S3_PATH)", "s3://bucket/managed")
        for a in _container(render_job(spec))["args"]
    ]
    config, out, start_fresh = parse_args(args)
    assert not start_fresh
    assert str(out) == JobPlan(spec).out_dir
    assert config.preset == spec.preset
    assert config.training.steps == JobPlan(spec).total_steps
    checkpoint = config.checkpoint
    assert checkpoint.tiers == _rendered_tiers(spec)
    assert checkpoint.tier("fast").storage == (
        "managed" if spec.platform.tiered_storage else "local"
    )
    assert config.metrics.port == METRICS_PORT
    if spec.platform.tiered_storage:
        assert checkpoint.managed_namespace == spec.name
        assert checkpoint.managed_s3_path == "s3://bucket/managed"
    else:
        assert (checkpoint.managed_namespace, checkpoint.managed_s3_path) == ("", "")


def _rendered_tiers(spec: JobSpec) -> tuple[TierConfig, ...]:
    """The preset's tiers with the directory, interval and storage the job gives them ("auto"
    keeps the preset's interval, or the trainer's first one, as where it starts)."""
    plan = JobPlan(spec)

    def interval(tier: TierConfig) -> dict[str, Any]:
        chosen = plan.tier_interval(tier.name)
        if chosen == AUTO_INTERVAL:
            return {"interval": tier.interval or AUTO_FIRST_INTERVAL, "auto_interval": True}
        return {"interval": chosen}

    return tuple(
        dataclasses.replace(
            tier,
            dir=plan.tier_dir(tier.name),
            storage=plan.tier_storage(tier.name),
            **interval(tier),
        )
        for tier in plan.trainer_config.checkpoint.tiers
    )


@pytest.mark.parametrize("tiered_storage", [False, True])
def test_a_tier_added_to_the_trainer_config_is_rendered_and_accepted(
    spec_factory, three_tier_preset: str, tiered_storage: bool
) -> None:
    spec = spec_factory(
        preset=three_tier_preset,
        hang_timeout_s=120,
        checkpoint_intervals={"nearline": 8},
        tiered_storage=tiered_storage,
    )
    args = _container(render_job(spec))["args"]
    storage = "managed" if tiered_storage else "local"
    nearline = [
        "--set",
        "checkpoint.nearline_dir=/fsx/teams/research/checkpoints/llama-8b-nearline",
        "--set",
        "checkpoint.nearline_interval=8",
        "--set",
        f"checkpoint.nearline_storage={storage}",
    ]
    start = args.index(nearline[1]) - 1
    assert args[start : start + len(nearline)] == nearline
    # Between the fast and durable tiers' arguments, as in the preset.
    assert args.index("checkpoint.fast_dir=/dev/shm/hptrain-ckpt-fast") < start
    assert start < args.index("checkpoint.durable_dir=/fsx/teams/research/checkpoints/llama-8b")
    config, _, _ = parse_args([a.replace("$(HPTRAIN_MANAGED_S3_PATH)", "s3://b/m") for a in args])
    assert [tier.name for tier in config.checkpoint.tiers] == ["fast", "nearline", "durable"]
    assert config.checkpoint.tiers == _rendered_tiers(spec)
    assert config.checkpoint.tier("nearline").storage == storage
    assert (config.checkpoint.managed_namespace == spec.name) is tiered_storage


@pytest.mark.parametrize("claim", ["fsx-team", "team-a.fsx"])
def test_volumes_team_tree_data_shared_memory_and_home(spec_factory, claim: str) -> None:
    manifest = render_job(spec_factory(fsx_claim=claim))
    assert _pod(manifest)["volumes"] == [
        {"name": "fsx", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-data", "readOnly": True}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "home", "emptyDir": {}},
    ]
    # The team's tree where it lies under /fsx, so every path a job names stays valid.
    assert _container(manifest)["volumeMounts"] == [
        {"name": "fsx", "mountPath": "/fsx/teams/research"},
        {"name": "data", "mountPath": "/fsx/data", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "home", "mountPath": "/home/job"},
    ]


def test_home_is_the_writable_home_volume(spec_factory) -> None:
    # The team's user has no entry in the image's /etc/passwd: the runtime's HOME would be /.
    container = _container(render_job(spec_factory()))
    assert {"name": "HOME", "value": "/home/job"} in container["env"]


def test_node_selectors_and_health_affinity(spec_factory) -> None:
    pod = _pod(render_job(spec_factory(instance_type="ml.g5.12xlarge", instance_group="dev-g5")))
    assert pod["nodeSelector"] == {
        "sagemaker.amazonaws.com/instance-group-name": "dev-g5",
        "node.kubernetes.io/instance-type": "ml.g5.12xlarge",
    }
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": "sagemaker.amazonaws.com/node-health-status",
                    "operator": "In",
                    "values": ["Schedulable"],
                }
            ]
        }
    ]


def test_no_tolerations_without_taints(spec_factory) -> None:
    assert "tolerations" not in _pod(render_job(spec_factory()))


def test_tolerations_match_the_given_taints(spec_factory) -> None:
    taints = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "training", "effect": "NoExecute"},
    ]
    assert _pod(render_job(spec_factory(taints=taints)))["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute"},
    ]


def test_a_taint_with_an_empty_value_is_tolerated_as_one_without(spec_factory) -> None:
    taints = [{"key": "dedicated", "value": "", "effect": "NoSchedule"}]
    assert _pod(render_job(spec_factory(taints=taints)))["tolerations"] == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_run_policy_defaults(spec_factory) -> None:
    policy = render_job(spec_factory())["spec"]["runPolicy"]
    assert policy["jobMaxRetryCount"] == 10
    assert policy["restartPolicy"] == {
        "numRestartBeforeFullJobRestart": 3,
        "evalPeriodSeconds": 21600,
        "maxFullJobRestarts": 1,
    }
    assert policy["cleanPodPolicy"] == "All"
    names = [rule["name"] for rule in policy["logMonitoringConfiguration"]]
    assert names == ["JobStart", "JobHang"]


def test_run_policy_follows_the_spec(spec_factory) -> None:
    spec = spec_factory(
        max_retries=4,
        restarts_before_full_restart=1,
        restart_eval_period_s=3600,
        max_full_restarts=2,
        clean_pod_policy="OnlyComplete",
        start_deadline_s=300,
        hang_timeout_s=1000,
        min_tokens_per_s=50000,
        slow_data_points=5,
    )
    policy = render_job(spec)["spec"]["runPolicy"]
    assert policy["jobMaxRetryCount"] == 4
    assert policy["restartPolicy"] == {
        "numRestartBeforeFullJobRestart": 1,
        "evalPeriodSeconds": 3600,
        "maxFullJobRestarts": 2,
    }
    assert policy["cleanPodPolicy"] == "OnlyComplete"
    rules = {rule["name"]: rule for rule in policy["logMonitoringConfiguration"]}
    assert rules["JobStart"]["expectedStartCutOffInSeconds"] == 300
    assert rules["JobHang"]["expectedRecurringFrequencyInSeconds"] == 1000
    assert "expectedStartCutOffInSeconds" not in rules["JobHang"]
    slow = rules["LowThroughput"]
    assert (slow["metricThreshold"], slow["operator"], slow["metricEvaluationDataPoints"]) == (
        50000,
        "lt",
        5,
    )


def test_shutdown_grace_outlasts_the_agent_timeout(spec_factory) -> None:
    manifest = render_job(spec_factory(shutdown_timeout_s=240))
    assert "--shutdown-timeout=240" in _container(manifest)["command"]
    assert _pod(manifest)["terminationGracePeriodSeconds"] > 240


def test_pod_runs_as_non_root(spec_factory) -> None:
    manifest = render_job(spec_factory())
    # The team's user and group (tests/job/test_team_directories.py checks them against the
    # directories the platform creates); no fsGroup on Lustre.
    assert _pod(manifest)["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": team_uid("research"),
        "runAsGroup": team_gid("research"),
    }
    assert _container(manifest)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_render_is_pure_and_yaml_round_trips(spec_factory) -> None:
    spec = spec_factory(taints=[{"key": "a", "effect": "NoSchedule"}], min_tokens_per_s=10)
    first, second = render_job(spec), render_job(spec)
    assert first == second
    assert first is not second
    text = to_yaml(first)
    assert yaml.safe_load(text) == first
    assert text == to_yaml(second)
    assert text.startswith("apiVersion: sagemaker.amazonaws.com/v1\nkind: HyperPodPyTorchJob\n")


def test_launcher_flags_parse_as_torchrun_flags(spec_factory) -> None:
    # hyperpodrun is torchrun's parser plus its own server/shutdown flags: drop those two and
    # torchrun must accept the rest, with the trainer module and its arguments intact.
    from torch.distributed.run import get_args_parser

    container = _container(render_job(spec_factory(nodes=4)))
    own = ("--server-port=", "--shutdown-timeout=")
    launcher = [flag for flag in container["command"][1:] if not flag.startswith(own)]
    args = get_args_parser().parse_args(launcher + container["args"])
    assert (args.nnodes, args.nproc_per_node, args.tee, args.log_dir) == (
        "4",
        "8",
        "3",
        "/tmp/hyperpod",
    )
    assert args.module is True
    assert args.training_script == "training.train"
    assert args.training_script_args == container["args"]
