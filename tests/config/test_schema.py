"""One test per validation rule of the whole schema, starting from config/prod.yaml: each bad
value gives exactly one line that names the field and says how to fix it. Also the loader:
files, YAML errors, several problems at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from config.errors import ConfigError
from config.loader import CONFIG_DIR, load_environment, load_file, parse_config
from tests.support import config_errors, environment_data, one_error_on


def gpu(data: dict) -> dict:
    return next(g for g in data["hyperpod"]["instance_groups"] if g["name"] == "gpu-p5")


def set_path(path: str, value: object) -> Callable[[dict], None]:
    def mutate(data: dict) -> None:
        node = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def delete_path(path: str) -> Callable[[dict], None]:
    def mutate(data: dict) -> None:
        node = data
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        del node[last]

    return mutate


# (rule id, mutation, field path the line must start with, words the message must contain)
RULES: list[tuple[str, Callable[[dict], None], str, str]] = [
    ("account-format", set_path("account", "12345"), "account", "12-digit AWS account ID"),
    ("region-format", set_path("region", "useast1"), "region", "not an AWS region"),
    ("environment-name", set_path("environment", "Prod_1"), "environment", "lowercase letters"),
    ("unknown-top-level-field", set_path("colour", "blue"), "colour", "unknown field"),
    ("missing-required-section", delete_path("storage"), "storage", "missing"),
    (
        "az-in-region",
        set_path("network.availability_zones", ["us-east-1a", "us-west-2b", "us-east-1c"]),
        "network.availability_zones[1]",
        "not an AZ of region us-east-1",
    ),
    (
        "az-unique",
        set_path("network.availability_zones", ["us-east-1a", "us-east-1b", "us-east-1a"]),
        "network.availability_zones",
        "more than once",
    ),
    (
        "az-minimum",
        set_path("network.availability_zones", ["us-east-1a"]),
        "network.availability_zones",
        "at least 2",
    ),
    (
        "nat-per-az",
        lambda d: d["network"].update(
            egress="nat", nat_gateways=4, https_egress_cidrs=["203.0.113.10/32"]
        ),
        "network.nat_gateways",
        "at most one per AZ",
    ),
    (
        "cidr-syntax",
        set_path("network.vpc_cidr", "10.0.0.300/16"),
        "network.vpc_cidr",
        "not a valid IPv4 CIDR",
    ),
    (
        "cidr-host-bits",
        set_path("network.vpc_cidr", "10.0.0.1/16"),
        "network.vpc_cidr",
        "host bits",
    ),
    ("vpc-cidr-size", set_path("network.vpc_cidr", "10.0.0.0/8"), "network.vpc_cidr", "/16 to /28"),
    (
        "vpc-cidr-private",
        set_path("network.vpc_cidr", "8.8.0.0/16"),
        "network.vpc_cidr",
        "private range",
    ),
    (
        "cidr-overlap",
        set_path("network.cluster_cidr", "10.0.0.0/16"),
        "network.cluster_cidr",
        "overlaps",
    ),
    (
        "secondary-cidr-range",
        set_path("network.cluster_cidr", "192.168.0.0/16"),
        "network.cluster_cidr",
        "100.64.0.0/10",
    ),
    (
        "flow-log-retention",
        set_path("network.flow_log_retention_days", 42),
        "network.flow_log_retention_days",
        "retention period",
    ),
    (
        "fsx-capacity-step",
        set_path("storage.fsx.storage_capacity_gib", 3000),
        "storage.fsx.storage_capacity_gib",
        "multiple of 2400",
    ),
    (
        "fsx-throughput",
        set_path("storage.fsx.throughput_per_tib", 300),
        "storage.fsx.throughput_per_tib",
        "125",
    ),
    (
        "fsx-maintenance-window",
        set_path("storage.fsx.weekly_maintenance_start", "8:25:00"),
        "storage.fsx.weekly_maintenance_start",
        "use d:HH:MM",
    ),
    (
        "admin-role-arn",
        set_path("eks.admin_role_arns", ["arn:aws:iam::333333333333:user/alice"]),
        "eks.admin_role_arns",
        "not an IAM role ARN",
    ),
    (
        "k8s-version",
        set_path("eks.kubernetes_version", "1.21"),
        "eks.kubernetes_version",
        "not supported",
    ),
    (
        "public-endpoint-open",
        set_path("eks.public_access_cidrs", ["0.0.0.0/0"]),
        "eks.public_access_cidrs",
        "office or VPN",
    ),
    (
        "instance-type-known",
        lambda d: gpu(d).update(instance_type="ml.p9.96xlarge"),
        "hyperpod.instance_groups[0].instance_type",
        "known types: ml.c5.4xlarge",
    ),
    (
        "count-non-negative",
        lambda d: gpu(d).update(count=-1),
        "hyperpod.instance_groups[0].count",
        "-1 is too small; use 0 or more",
    ),
    (
        "min-count-le-count",
        lambda d: gpu(d).update(min_count=17),
        "hyperpod.instance_groups[0].min_count",
        "more than count 16",
    ),
    (
        "interface-supported",
        lambda d: d["hyperpod"]["instance_groups"][1].update(network_interface="efa"),
        "hyperpod.instance_groups[1].network_interface",
        "does not support 'efa'",
    ),
    (
        "group-names-unique",
        lambda d: d["hyperpod"]["instance_groups"][1].update(name="gpu-p5", training_plan=None),
        "hyperpod.instance_groups",
        "unique",
    ),
    (
        "group-name-format",
        lambda d: gpu(d).update(name="gpu_p5!"),
        "hyperpod.instance_groups[0].name",
        "letters, digits and dashes",
    ),
    (
        "taints-vs-deep-health-checks",
        lambda d: gpu(d).update(
            taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
        ),
        "hyperpod.instance_groups[0].taints",
        "cannot be combined with deep_health_checks",
    ),
    (
        "training-plan-arn",
        lambda d: gpu(d)["training_plan"].update(
            arn="arn:aws:sagemaker:us-east-1:333333333333:plan/x"
        ),
        "hyperpod.instance_groups[0].training_plan.arn",
        "not a training plan ARN",
    ),
    (
        "training-plan-az-has-subnet",
        lambda d: gpu(d)["training_plan"].update(availability_zone="us-east-1d"),
        "hyperpod.instance_groups[0].training_plan.availability_zone",
        "has no cluster subnet",
    ),
    (
        "training-plan-same-account-region",
        lambda d: gpu(d)["training_plan"].update(
            arn="arn:aws:sagemaker:us-west-2:333333333333:training-plan/p5"
        ),
        "hyperpod.instance_groups[0].training_plan.arn",
        "this account and region",
    ),
    ("prod-retains", set_path("retain_stateful", False), "retain_stateful", "prod must retain"),
    (
        "az-letter-has-slot",
        set_path(
            "network.availability_zones", ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1i"]
        ),
        "network.availability_zones[3]",
        "AZ letters a-h",
    ),
    (
        "fsx-az-has-subnet",
        set_path("storage.fsx.availability_zone", "us-east-1d"),
        "storage.fsx.availability_zone",
        "has no cluster subnet",
    ),
    (
        "plan-in-fsx-az",
        lambda d: (
            d["network"].update(
                availability_zones=["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
            ),
            gpu(d)["training_plan"].update(availability_zone="us-east-1d"),
        ),
        "hyperpod.instance_groups[0].training_plan.availability_zone",
        "differs from storage.fsx.availability_zone us-east-1a",
    ),
    (
        "cluster-level-azs-have-subnets",
        set_path("hyperpod.availability_zones", ["us-east-1a", "us-east-1d"]),
        "hyperpod.availability_zones[1]",
        "has no cluster subnet",
    ),
    (
        "cluster-level-azs-unique",
        set_path("hyperpod.availability_zones", ["us-east-1a", "us-east-1a"]),
        "hyperpod.availability_zones",
        "more than once",
    ),
    (
        "required-endpoints",
        set_path("network.interface_endpoints", ["ec2", "ecr.api", "ecr.dkr", "sts"]),
        "network.interface_endpoints",
        "missing eks, eks-auth, lambda, logs",
    ),
    (
        "public-endpoint-narrow",
        set_path("eks.public_access_cidrs", ["0.0.0.0/1", "128.0.0.0/1"]),
        "eks.public_access_cidrs",
        "large part of the internet",
    ),
    ("tag-reserved-prefix", set_path("tags", {"aws:owner": "x"}), "tags", "reserved for AWS"),
    (
        "no-type-coercion",
        lambda d: gpu(d).update(count="16"),
        "hyperpod.instance_groups[0].count",
        "valid integer",
    ),
    ("account-is-quoted", set_path("account", 333333333333), "account", "in quotes"),
    (
        "images-pullable-without-egress",
        lambda d: d["eks"].pop("image_overrides"),
        "eks.image_overrides.nvidia-device-plugin",
        "nodes have no internet egress",
    ),
    (
        "health-agent-pinned-for-region",
        lambda d: (
            d.update(region="eu-west-3"),
            d["network"].update(availability_zones=["eu-west-3a", "eu-west-3b", "eu-west-3c"]),
            d["hyperpod"].update(availability_zones=["eu-west-3a"]),
            d["storage"]["fsx"].update(availability_zone="eu-west-3a"),
            gpu(d).update(training_plan=None),
            d["eks"].update(
                image_overrides={
                    "nvidia-device-plugin": "333333333333.dkr.ecr.eu-west-3.amazonaws.com/nvidia/k8s-device-plugin:v0.16.1"
                }
            ),
        ),
        "eks.image_overrides",
        "no pinned health-monitoring-agent image for eu-west-3",
    ),
    (
        "cluster-subnets-at-least-28",
        set_path("network.cluster_cidr", "100.64.0.0/27"),
        "network.cluster_cidr",
        "smaller than AWS's /28 minimum",
    ),
    (
        "capacity-fits",
        lambda d: (gpu(d).update(count=300), d["network"].update(cluster_cidr="10.1.0.0/20")),
        "network.cluster_cidr",
        "usable addresses but the plan needs",
    ),
    (
        "cluster-prefix-fits",
        set_path("network.cluster_subnet_prefix", 16),
        "network.cluster_subnet_prefix",
        "do not fit",
    ),
]


@pytest.mark.parametrize(("rule", "mutate", "field", "words"), RULES, ids=[r[0] for r in RULES])
def test_each_rule_gives_one_line_naming_the_field(rule, mutate, field, words):
    line = one_error_on(field, mutate, base="prod")
    assert words in line, line


def test_rule_ids_are_unique():
    ids = [r[0] for r in RULES]
    assert len(ids) == len(set(ids))


def test_several_problems_give_one_line_each():
    def mutate(data: dict) -> None:
        data["account"] = "x"
        data["network"]["nat_gateways"] = 9

    lines = config_errors(mutate, base="prod")
    assert len(lines) == 2
    assert {line.split(":")[0] for line in lines} == {"account", "network.nat_gateways"}


def test_unknown_environment_lists_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        load_environment("qa")
    assert caught.value.source == "-c env"
    assert caught.value.lines == ["unknown environment 'qa'; use one of dev, prod, staging"]


def test_yaml_syntax_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("environment: dev\nnetwork: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_file(bad)
    assert len(caught.value.lines) == 1
    assert caught.value.lines[0].startswith("(yaml) line ")


def test_non_mapping_document_is_rejected(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError) as caught:
        load_file(bad)
    assert caught.value.lines == ["(top level): expected a mapping of settings"]


def test_file_name_must_match_environment(tmp_path):
    (tmp_path / "qa.yaml").write_text((CONFIG_DIR / "dev.yaml").read_text())
    with pytest.raises(ConfigError) as caught:
        load_environment("qa", tmp_path)
    assert caught.value.lines[0].startswith("environment: is 'dev' but the file is qa.yaml")


def test_groups_are_ordered_by_name_not_by_file_position():
    data = environment_data("prod")
    data["hyperpod"]["instance_groups"].reverse()
    reordered = parse_config(data, "x").hyperpod.groups_by_name()
    original = parse_config(environment_data("prod"), "x").hyperpod.groups_by_name()
    assert [g.name for g in reordered] == [g.name for g in original] == ["gpu-p5", "system"]


def test_duplicate_yaml_keys_are_rejected(tmp_path):
    text = (CONFIG_DIR / "prod.yaml").read_text() + "\nenvironment: dev\n"
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_file(path)
    assert len(caught.value.lines) == 1
    assert "duplicate key 'environment'" in caught.value.lines[0]
