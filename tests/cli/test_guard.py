"""`hpctl guard`: stateful resources a change would delete or replace.

Hand-written templates (fast) pin each rule: a logical ID or stack that disappears, a type
change, a create-only property change (schema paths, the FSx and instance-group ones the
schemas omit, wildcards, intrinsics, a reference to a replaced resource), `--allow`, `--json`
and bad input. `--env` runs against botocore's Stubber on a real CloudFormation client.
Then prod itself: variants synthesized like the real app (xdist group "variants", once per
module) prove routine edits pass and destructive ones are named with their property.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hpctl import guard, guard_cmd
from hpctl.errors import ExitCode
from hpctl.replacement import (
    EXTRA_REPLACEMENT_PATHS,
    changed_properties,
    create_only_paths,
    references,
    replacement_paths,
)
from platform_constructs.hyperpod_cluster import CLUSTER_LOGICAL_ID
from tests.cli.conftest import (
    Stubs,
    environment_account,
    error_line,
    expect_failure,
    hpctl,
    offline_clients,
    stubbed_clients,
)
from tests.support import VARIANTS_GROUP, SynthResult, synthesize, variant_of

BLOCKED = "hpctl guard: {n} would be deleted or replaced; keep their logical IDs and create-only properties, or pass --allow LOGICAL_ID for each deliberate one"


def blocked(n: int) -> str:
    what = f"{n} stateful resource{'s' if n != 1 else ''}"
    return BLOCKED.format(n=what)


# --------------------------------------------------------------------------- templates


def vpc(cidr: str = "10.0.0.0/20") -> dict[str, Any]:
    return {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": cidr}}


def subnet(cidr: str, az: str = "us-east-1a", **extra: Any) -> dict[str, Any]:
    properties = {"VpcId": {"Ref": "Vpc"}, "CidrBlock": cidr, "AvailabilityZone": az}
    return {"Type": "AWS::EC2::Subnet", "Properties": {**properties, **extra}}


def group(name: str, count: int = 2, override: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "InstanceGroupName": name,
        "InstanceType": "ml.m5.4xlarge",
        "InstanceCount": count,
    }
    if override is not None:
        spec["OverrideVpcConfig"] = {"Subnets": override, "SecurityGroupIds": ["sg-1"]}
    return spec


def cluster(groups: list[dict[str, Any]], subnets: list[str]) -> dict[str, Any]:
    return {
        "Type": "AWS::SageMaker::Cluster",
        "Properties": {
            "ClusterName": "hyperpod-test",
            "VpcConfig": {"Subnets": subnets, "SecurityGroupIds": ["sg-1"]},
            "Orchestrator": {"Eks": {"ClusterArn": {"Fn::ImportValue": "test-eks-arn"}}},
            "InstanceGroups": groups,
        },
    }


def file_system(subnet_export: str = "test-subnet-a", **extra: Any) -> dict[str, Any]:
    return {
        "Type": "AWS::FSx::FileSystem",
        "Properties": {
            "FileSystemType": "LUSTRE",
            "StorageCapacity": 2400,
            "SubnetIds": [{"Fn::ImportValue": subnet_export}],
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "PerUnitStorageThroughput": 500,
            },
            **extra,
        },
    }


def base() -> dict[str, dict[str, Any]]:
    """Three stacks: 9 stateful resources and two that are not (a role, a security group)."""
    return {
        "test-network": {
            "Resources": {
                "Vpc": vpc(),
                "SubnetA": subnet("10.0.0.0/24"),
                "SubnetB": subnet("10.0.1.0/24", "us-east-1b"),
                "FlowLogs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 365}},
                "Group": {
                    "Type": "AWS::EC2::SecurityGroup",
                    "Properties": {"VpcId": {"Ref": "Vpc"}},
                },
            }
        },
        "test-storage": {
            "Resources": {
                "Key": {"Type": "AWS::KMS::Key", "Properties": {"EnableKeyRotation": True}},
                "DataBucket": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"},
                "FileSystem": file_system(),
                "Repository": {
                    "Type": "AWS::FSx::DataRepositoryAssociation",
                    "Properties": {
                        "FileSystemId": {"Ref": "FileSystem"},
                        "FileSystemPath": "/data",
                        "DataRepositoryPath": "s3://data/datasets/",
                    },
                },
                "Role": {"Type": "AWS::IAM::Role", "Properties": {"Path": "/"}},
            }
        },
        "test-hyperpod": {
            "Resources": {
                "Cluster": cluster(
                    [group("gpu", 4, override=["subnet-a"]), group("system")],
                    ["subnet-a", "subnet-b"],
                )
            }
        },
    }


def write(directory: Path, assembly: dict[str, dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for stack, template in assembly.items():
        (directory / f"{stack}.template.json").write_text(json.dumps(template))
    return directory


Edit = Callable[[dict[str, dict[str, Any]]], object]


def guard_run(tmp_path: Path, edit: Edit, *options: str) -> Any:
    """`hpctl guard OLD NEW` with OLD the base templates and NEW the base edited by `edit`."""
    new = base()
    edit(new)
    old_dir, new_dir = write(tmp_path / "old", base()), write(tmp_path / "new", new)
    return hpctl("guard", str(old_dir), str(new_dir), *options)


def resources(assembly: dict[str, dict[str, Any]], stack: str) -> dict[str, Any]:
    resources: dict[str, Any] = assembly[stack]["Resources"]
    return resources


def props(assembly: dict[str, dict[str, Any]], stack: str, logical: str) -> dict[str, Any]:
    properties: dict[str, Any] = resources(assembly, stack)[logical]["Properties"]
    return properties


def findings(result: Any) -> list[str]:
    return result.stdout.splitlines()


# --------------------------------------------------------------------------- the rules


def test_identical_templates_pass_and_count_the_stateful_resources(tmp_path: Path):
    result = guard_run(tmp_path, lambda _: None)
    assert result.exit_code == ExitCode.OK, result.output
    assert result.stdout == "no stateful resource is deleted or replaced (9 checked)\n"
    assert result.stderr == ""


def test_updatable_changes_pass(tmp_path: Path):
    def edit(new: dict[str, dict[str, Any]]) -> None:
        props(new, "test-network", "FlowLogs")["RetentionInDays"] = 731
        props(new, "test-network", "SubnetA")["Tags"] = [{"Key": "owner", "Value": "ml"}]
        props(new, "test-storage", "FileSystem")["StorageCapacity"] = 4800
        # Not stateful: replacing or deleting them loses nothing.
        props(new, "test-storage", "Role")["Path"] = "/platform/"
        del resources(new, "test-network")["Group"]
        # A new stateful resource and a new stack: nothing to lose.
        resources(new, "test-storage")["LogsBucket"] = {"Type": "AWS::S3::Bucket"}
        new["test-extra"] = {"Resources": {"Extra": {"Type": "AWS::S3::Bucket"}}}

    result = guard_run(tmp_path, edit)
    assert result.exit_code == ExitCode.OK, result.output
    assert findings(result) == ["no stateful resource is deleted or replaced (9 checked)"]


def test_a_removed_logical_id_is_deleted(tmp_path: Path):
    result = guard_run(tmp_path, lambda new: resources(new, "test-storage").pop("DataBucket"))
    assert error_line(result, ExitCode.FAILED) == blocked(1)
    assert findings(result) == ["test-storage/DataBucket (AWS::S3::Bucket): deleted"]


def test_a_missing_stack_deletes_every_stateful_resource_in_it(tmp_path: Path):
    result = guard_run(tmp_path, lambda new: new.pop("test-network"))
    assert error_line(result, ExitCode.FAILED) == blocked(4)
    assert findings(result) == [
        "test-network/Vpc (AWS::EC2::VPC): deleted",
        "test-network/SubnetA (AWS::EC2::Subnet): deleted",
        "test-network/SubnetB (AWS::EC2::Subnet): deleted",
        "test-network/FlowLogs (AWS::Logs::LogGroup): deleted",
    ]


def test_a_type_change_is_a_replacement(tmp_path: Path):
    def edit(new: dict[str, dict[str, Any]]) -> None:
        resources(new, "test-network")["FlowLogs"] = {
            "Type": "AWS::Logs::Destination",
            "Properties": {"DestinationName": "flow-logs"},
        }

    result = guard_run(tmp_path, edit)
    assert error_line(result, ExitCode.FAILED) == blocked(1)
    assert findings(result) == [
        "test-network/FlowLogs (AWS::Logs::LogGroup): replaced: type changed"
    ]


def test_create_only_changes_name_the_property(tmp_path: Path):
    def edit(new: dict[str, dict[str, Any]]) -> None:
        props(new, "test-network", "SubnetB")["AvailabilityZone"] = "us-east-1c"
        props(new, "test-network", "SubnetB")["CidrBlock"] = "10.0.2.0/24"
        # Only reordered: CloudFormation compares the value, so this is a change too.
        props(new, "test-hyperpod", "Cluster")["VpcConfig"]["Subnets"].reverse()
        # The schema lists only top-level FSx properties; this nested one comes from
        # hpctl.replacement.FSX_REPLACEMENT_PATHS.
        props(new, "test-storage", "FileSystem")["LustreConfiguration"]["DeploymentType"] = (
            "PERSISTENT_1"
        )
        # Absent before, present now.
        props(new, "test-storage", "FileSystem")["KmsKeyId"] = {"Ref": "Key"}

    result = guard_run(tmp_path, edit)
    assert error_line(result, ExitCode.FAILED) == blocked(4)
    # Stacks in file name order, resources in template order.
    assert findings(result) == [
        "test-hyperpod/Cluster (AWS::SageMaker::Cluster): replaced: VpcConfig changed",
        "test-network/SubnetB (AWS::EC2::Subnet): replaced: AvailabilityZone, CidrBlock changed",
        "test-storage/FileSystem (AWS::FSx::FileSystem): "
        "replaced: KmsKeyId, LustreConfiguration.DeploymentType changed",
        "test-storage/Repository (AWS::FSx::DataRepositoryAssociation): "
        "replaced: FileSystemId changed (FileSystem is replaced)",
    ]


def test_an_imported_value_compares_by_its_export_name(tmp_path: Path):
    def edit(new: dict[str, dict[str, Any]]) -> None:
        props(new, "test-storage", "FileSystem")["SubnetIds"] = [
            {"Fn::ImportValue": "test-subnet-b"}
        ]

    result = guard_run(tmp_path, edit)
    assert error_line(result, ExitCode.FAILED) == blocked(2)
    assert findings(result) == [
        "test-storage/FileSystem (AWS::FSx::FileSystem): replaced: SubnetIds changed",
        "test-storage/Repository (AWS::FSx::DataRepositoryAssociation): "
        "replaced: FileSystemId changed (FileSystem is replaced)",
    ]


def test_a_replaced_vpc_replaces_what_references_it(tmp_path: Path):
    """The subnets' text is the same ({"Ref": "Vpc"}), but the VPC ID it resolves to is new:
    VpcId is create-only, so they are replaced with it."""

    def edit(new: dict[str, dict[str, Any]]) -> None:
        props(new, "test-network", "Vpc")["CidrBlock"] = "10.8.0.0/20"

    result = guard_run(tmp_path, edit)
    assert error_line(result, ExitCode.FAILED) == blocked(3)
    assert findings(result) == [
        "test-network/Vpc (AWS::EC2::VPC): replaced: CidrBlock changed",
        "test-network/SubnetA (AWS::EC2::Subnet): replaced: VpcId changed (Vpc is replaced)",
        "test-network/SubnetB (AWS::EC2::Subnet): replaced: VpcId changed (Vpc is replaced)",
    ]


def test_instance_groups_are_matched_by_name(tmp_path: Path):
    """A group added in front and counts changed: no finding. A training plan added to an
    existing group (its OverrideVpcConfig): the cluster, naming the group."""

    def routine(new: dict[str, dict[str, Any]]) -> None:
        groups = props(new, "test-hyperpod", "Cluster")["InstanceGroups"]
        groups[0]["InstanceCount"] = 8
        groups.insert(0, group("cpu-batch", override=["subnet-b"]))

    result = guard_run(tmp_path / "routine", routine)
    assert result.exit_code == ExitCode.OK, result.output

    def plan_added(new: dict[str, dict[str, Any]]) -> None:
        routine(new)
        groups = props(new, "test-hyperpod", "Cluster")["InstanceGroups"]
        groups[2]["OverrideVpcConfig"] = {"Subnets": ["subnet-a"], "SecurityGroupIds": ["sg-1"]}

    result = guard_run(tmp_path / "plan", plan_added)
    assert error_line(result, ExitCode.FAILED) == blocked(1)
    assert findings(result) == [
        "test-hyperpod/Cluster (AWS::SageMaker::Cluster): "
        "replaced: InstanceGroups[system].OverrideVpcConfig changed"
    ]


def test_allow_accepts_a_deliberate_replacement_and_still_lists_it(tmp_path: Path):
    def edit(new: dict[str, dict[str, Any]]) -> None:
        props(new, "test-network", "SubnetB")["CidrBlock"] = "10.0.2.0/24"
        del resources(new, "test-network")["FlowLogs"]

    result = guard_run(tmp_path / "one", edit, "--allow", "SubnetB")
    assert error_line(result, ExitCode.FAILED) == blocked(1)
    assert findings(result) == [
        "test-network/SubnetB (AWS::EC2::Subnet): replaced: CidrBlock changed [allowed]",
        "test-network/FlowLogs (AWS::Logs::LogGroup): deleted",
    ]
    result = guard_run(
        tmp_path / "both",
        edit,
        "--allow",
        "SubnetB",
        "--allow",
        "test-network/FlowLogs",
        "--allow",
        "SubnetC",
    )
    assert result.exit_code == ExitCode.OK, result.output
    assert result.stderr == ""
    assert findings(result) == [
        "test-network/SubnetB (AWS::EC2::Subnet): replaced: CidrBlock changed [allowed]",
        "test-network/FlowLogs (AWS::Logs::LogGroup): deleted [allowed]",
        "--allow SubnetC: matches no deleted or replaced resource",
        "no stateful resource is deleted or replaced beyond the 2 allowed (9 checked)",
    ]


def test_json_lists_every_finding(tmp_path: Path):
    def edit(new: dict[str, dict[str, Any]]) -> None:
        props(new, "test-network", "SubnetB")["CidrBlock"] = "10.0.2.0/24"
        del resources(new, "test-storage")["Key"]

    result = guard_run(tmp_path, edit, "--json", "--allow", "Key")
    assert error_line(result, ExitCode.FAILED) == blocked(1)
    assert json.loads(result.stdout) == {
        "checked": 9,
        "blocking": 1,
        "findings": [
            {
                "stack": "test-network",
                "logical_id": "SubnetB",
                "type": "AWS::EC2::Subnet",
                "action": "replaced",
                "properties": ["CidrBlock"],
                "detail": "replaced: CidrBlock changed",
                "allowed": False,
            },
            {
                "stack": "test-storage",
                "logical_id": "Key",
                "type": "AWS::KMS::Key",
                "action": "deleted",
                "properties": [],
                "detail": "deleted",
                "allowed": True,
            },
        ],
        "unused_allow": [],
        "not_deployed": [],
    }
    clean = guard_run(tmp_path / "clean", lambda _: None, "--json")
    assert clean.exit_code == ExitCode.OK
    assert json.loads(clean.stdout)["findings"] == []


# --------------------------------------------------------------------------- the paths


def test_every_stateful_type_has_a_provider_schema():
    assert set(guard.STATEFUL_TYPES) == {
        "AWS::SageMaker::Cluster",
        "AWS::FSx::FileSystem",
        "AWS::FSx::DataRepositoryAssociation",
        "AWS::S3::Bucket",
        "AWS::KMS::Key",
        "AWS::EC2::Subnet",
        "AWS::EC2::VPC",
        "AWS::EC2::VPCCidrBlock",
        "AWS::EKS::Cluster",
        "AWS::Logs::LogGroup",
        "AWS::SageMaker::ComputeQuota",
        "AWS::SageMaker::ClusterSchedulerConfig",
    }
    for type_ in guard.STATEFUL_TYPES:
        # Raises for a type cfn-lint has no schema for.
        paths = replacement_paths(type_)
        assert type_ == "AWS::KMS::Key" or paths, type_
    assert {("ClusterName",), ("VpcConfig",), ("Orchestrator", "Eks")} <= set(
        create_only_paths("AWS::SageMaker::Cluster")
    )
    assert ("SubnetIds",) in create_only_paths("AWS::FSx::FileSystem")
    assert set(EXTRA_REPLACEMENT_PATHS) <= set(guard.STATEFUL_TYPES)


def test_wildcards_compare_elements_present_on_both_sides():
    path = [("Rules", "*", "Name")]
    before = {"Rules": [{"Name": "a"}, {"Name": "b"}]}
    assert changed_properties(path, before, {"Rules": [{"Name": "a"}, {"Name": "c"}]}) == [
        "Rules[1].Name"
    ]
    # An element added at the end, or the list appearing: no element changed.
    grown = {"Rules": [{"Name": "a"}, {"Name": "b"}, {"Name": "z"}]}
    assert changed_properties(path, before, grown) == []
    assert changed_properties(path, {}, before) == []
    # A list computed at deploy time is compared whole.
    computed = {"Rules": {"Fn::If": ["Prod", [{"Name": "a"}], []]}}
    assert changed_properties(path, before, computed) == ["Rules"]
    keyed = [("Groups", "[Name]", "Subnets")]
    assert (
        changed_properties(
            keyed,
            {"Groups": [{"Name": "x", "Subnets": ["a"]}, {"Name": "y"}]},
            {"Groups": [{"Name": "new"}, {"Name": "y"}, {"Name": "x", "Subnets": ["a"]}]},
        )
        == []
    )


def test_references_follow_ref_getatt_and_sub():
    value = [
        {"Ref": "Vpc"},
        {"Ref": "AWS::Region"},
        {"Fn::GetAtt": ["Role", "Arn"]},
        {"Fn::GetAtt": "Key.Arn"},
        {"Fn::Sub": "arn:${AWS::Partition}:s3:::${Bucket}/x/${Other.Arn}/${!Literal}"},
        {"Fn::ImportValue": "not-a-local-resource"},
    ]
    assert references(value) == {"Vpc", "Role", "Key", "Bucket", "Other"}


# --------------------------------------------------------------------------- bad input


def test_directories_that_are_not_assemblies_are_usage_errors(tmp_path: Path):
    good = write(tmp_path / "good", base())
    missing = tmp_path / "missing"
    expect_failure(
        "guard",
        str(missing),
        str(good),
        code=ExitCode.USAGE,
        starts_with=f"hpctl guard: OLD {missing}: no such directory; pass a cloud assembly",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    expect_failure(
        "guard",
        str(good),
        str(empty),
        code=ExitCode.USAGE,
        starts_with=f"hpctl guard: NEW {empty}: no *.template.json in it; pass the directory",
    )
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "test-network.template.json").write_text("{not json")
    expect_failure(
        "guard",
        str(good),
        str(broken),
        code=ExitCode.USAGE,
        starts_with=f"hpctl guard: NEW {broken / 'test-network.template.json'}: not a JSON "
        "template (",
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "hpctl guard: OLD NEW: pass two cloud assembly directories (before and after)"),
        (["only-one"], "hpctl guard: OLD NEW: pass two cloud assembly directories"),
        (["a", "b", "--env", "prod"], "hpctl guard: --env: compares with the deployed"),
        (
            ["--env", "nowhere"],
            "hpctl guard: --env: unknown environment 'nowhere'; use one of dev, prod, staging",
        ),
        (["a", "b", "--bogus"], "hpctl guard: No such option: --bogus"),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], expected: str):
    expect_failure("guard", *args, code=ExitCode.USAGE, starts_with=expected)


# --------------------------------------------------------------------------- --env (stubbed)


@pytest.fixture(scope="module")
def cfn_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return offline_clients(tmp_path_factory, "us-east-1", ("cloudformation",))


class Deployed:
    """The stubbed CloudFormation client commands get (STS answers for prod's account), and
    the services/Regions asked for."""

    def __init__(self, stubs: Stubs) -> None:
        self.stubber = stubs["cloudformation"]
        self.clients = stubs.clients

    def template(self, stack: str, template: dict[str, Any]) -> None:
        self.stubber.add_response(
            "get_template",
            {"TemplateBody": json.dumps(template), "StagesAvailable": ["Original", "Processed"]},
            expected_params={"StackName": stack, "TemplateStage": "Original"},
        )

    def error(self, stack: str, code: str, message: str, status: int = 400) -> None:
        self.stubber.add_client_error(
            "get_template",
            service_error_code=code,
            service_message=message,
            http_status_code=status,
            expected_params={"StackName": stack, "TemplateStage": "Original"},
        )


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch, cfn_clients: dict[str, Any]) -> Iterator[Deployed]:
    with stubbed_clients(monkeypatch, cfn_clients, environment_account("prod")) as stubs:
        yield Deployed(stubs)


@pytest.fixture
def synthesized(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """What `--env prod` synthesizes, without the CDK: the base templates under prod's
    names; every stack name of the environment, in deploy order."""
    templates = {f"hyperpod-prod-{k.removeprefix('test-')}": v for k, v in base().items()}
    names = [*templates, "hyperpod-prod-governance"]

    def fake(loaded: Any) -> tuple[dict[str, Any], list[str]]:
        assert loaded.config.environment == "prod"
        return copy.deepcopy(templates), names

    monkeypatch.setattr(guard_cmd, "synthesized_templates", fake)
    return templates


def test_env_compares_with_the_deployed_templates(deployed: Deployed, synthesized: dict):
    deployed.template("hyperpod-prod-network", synthesized["hyperpod-prod-network"])
    storage = copy.deepcopy(synthesized["hyperpod-prod-storage"])
    # Deployed with a bucket the config no longer builds.
    storage["Resources"]["OldBucket"] = {"Type": "AWS::S3::Bucket"}
    deployed.template("hyperpod-prod-storage", storage)
    deployed.template("hyperpod-prod-hyperpod", synthesized["hyperpod-prod-hyperpod"])
    # Deployed, but the config no longer builds it: its log group goes with it.
    deployed.template(
        "hyperpod-prod-governance",
        {"Resources": {"Logs": {"Type": "AWS::Logs::LogGroup"}}},
    )
    result = hpctl("guard", "--env", "prod")
    assert error_line(result, ExitCode.FAILED) == blocked(2)
    assert findings(result) == [
        "hyperpod-prod-storage/OldBucket (AWS::S3::Bucket): deleted",
        "hyperpod-prod-governance/Logs (AWS::Logs::LogGroup): deleted",
    ]
    assert deployed.clients == [("sts", "us-east-1"), ("cloudformation", "us-east-1")]


def test_env_counts_a_stack_not_deployed_as_empty(deployed: Deployed, synthesized: dict):
    deployed.template("hyperpod-prod-network", synthesized["hyperpod-prod-network"])
    for stack in ("storage", "hyperpod", "governance"):
        deployed.error(
            f"hyperpod-prod-{stack}",
            "ValidationError",
            f"Stack with id hyperpod-prod-{stack} does not exist",
        )
    result = hpctl("guard", "--env", "prod", "--json")
    assert result.exit_code == ExitCode.OK, result.output
    report = json.loads(result.stdout)
    assert (report["checked"], report["findings"]) == (4, [])
    assert report["not_deployed"] == [
        "hyperpod-prod-storage",
        "hyperpod-prod-hyperpod",
        "hyperpod-prod-governance",
    ]


def test_env_text_names_the_stacks_not_deployed(deployed: Deployed, synthesized: dict):
    for stack in ("network", "storage", "hyperpod", "governance"):
        deployed.error(
            f"hyperpod-prod-{stack}",
            "ValidationError",
            f"Stack with id hyperpod-prod-{stack} does not exist",
        )
    result = hpctl("guard", "--env", "prod")
    assert result.exit_code == ExitCode.OK, result.output
    assert findings(result) == [
        "no stateful resource is deleted or replaced (0 checked); not deployed yet: "
        "hyperpod-prod-network, hyperpod-prod-storage, hyperpod-prod-hyperpod, "
        "hyperpod-prod-governance"
    ]


@pytest.mark.parametrize(
    ("code", "message", "status"),
    [
        ("Throttling", "Rate exceeded", 400),
        (
            "AccessDenied",
            "User: arn:aws:iam::333333333333:user/ci is not authorized to perform: "
            "cloudformation:GetTemplate",
            403,
        ),
        # A ValidationError that is not "does not exist" is not read as "not deployed".
        ("ValidationError", "1 validation error detected: StackName", 400),
    ],
)
def test_env_aws_failures_are_one_line(
    deployed: Deployed, synthesized: dict, code: str, message: str, status: int
):
    deployed.template("hyperpod-prod-network", synthesized["hyperpod-prod-network"])
    deployed.error("hyperpod-prod-storage", code, message, status)
    result = hpctl("guard", "--env", "prod")
    assert error_line(result, ExitCode.FAILED) == f"hpctl guard: {code}: {message}"
    assert result.stdout == ""


def test_env_unknown_environment_makes_no_call(deployed: Deployed):
    expect_failure(
        "guard",
        "--env",
        "prd",
        code=ExitCode.USAGE,
        starts_with="hpctl guard: --env: unknown environment 'prd'; use one of",
    )
    assert deployed.clients == []


# --------------------------------------------------------------------------- prod variants


def synth_test(test: Callable[..., None]) -> Callable[..., None]:
    """A test on synthesized variants: on the variants worker; skipped by make test-fast."""
    marked: Callable[..., None] = pytest.mark.slow(pytest.mark.xdist_group(VARIANTS_GROUP)(test))
    return marked


EXTRA_GROUP = {
    "name": "cpu-batch",
    "instance_type": "ml.c5.4xlarge",
    "count": 2,
    "ebs_volume_gib": 100,
    "labels": {"workload": "batch"},
}
ADDED_AZ = "us-east-1d"
ADDED_ADMIN = "arn:aws:iam::333333333333:role/PlatformOnCall"
PLAN_ARN = "arn:aws:sagemaker:us-east-1:333333333333:training-plan/m5-system"


def _routine(data: dict[str, Any]) -> None:
    """Edits that must deploy in place: groups grown, reordered and one added; an AZ added to
    the network only (the cluster-level AZs reordered, which the cluster ignores); FSx
    grown; an admin role; a tag; a team quota."""
    groups = data["hyperpod"]["instance_groups"]
    assert [g["name"] for g in groups] == ["gpu-p5", "system"]
    groups[0]["count"] += 2
    groups[1]["count"] += 1
    groups.reverse()
    groups.insert(1, copy.deepcopy(EXTRA_GROUP))
    data["network"]["availability_zones"] = ["us-east-1c", "us-east-1a", ADDED_AZ, "us-east-1b"]
    data["hyperpod"]["availability_zones"] = ["us-east-1c", "us-east-1a", "us-east-1b"]
    data["storage"]["fsx"]["storage_capacity_gib"] += 2400
    data["eks"]["admin_role_arns"].append(ADDED_ADMIN)
    data["tags"]["owner"] = "ml-platform-oncall"
    teams = {team["name"]: team for team in data["governance"]["teams"]}
    teams["foundation"]["quotas"][0]["count"] += 2


def _az_removed(data: dict[str, Any]) -> None:
    """us-east-1c dropped from both AZ lists."""
    for section in ("network", "hyperpod"):
        data[section]["availability_zones"] = ["us-east-1a", "us-east-1b"]


def _plan_added(data: dict[str, Any]) -> None:
    """A training plan for the existing system group: it moves to the plan's AZ subnet."""
    (system,) = [g for g in data["hyperpod"]["instance_groups"] if g["name"] == "system"]
    system["training_plan"] = {"arn": PLAN_ARN, "availability_zone": "us-east-1a"}


def _fsx_moved(data: dict[str, Any]) -> None:
    """FSx to another AZ (its subnet), the GPU group's training plan with it."""
    data["storage"]["fsx"]["availability_zone"] = "us-east-1b"
    (gpu,) = [g for g in data["hyperpod"]["instance_groups"] if g["name"] == "gpu-p5"]
    gpu["training_plan"]["availability_zone"] = "us-east-1b"


def _variant(factory: pytest.TempPathFactory, name: str, mutate: Any) -> SynthResult:
    return synthesize(variant_of("prod", mutate), factory.mktemp(f"guard-{name}"))


@pytest.fixture(scope="module")
def routine(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    return _variant(tmp_path_factory, "routine", _routine)


@pytest.fixture(scope="module")
def az_removed(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    return _variant(tmp_path_factory, "az-removed", _az_removed)


@pytest.fixture(scope="module")
def plan_added(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    return _variant(tmp_path_factory, "plan-added", _plan_added)


@pytest.fixture(scope="module")
def fsx_moved(tmp_path_factory: pytest.TempPathFactory) -> SynthResult:
    return _variant(tmp_path_factory, "fsx-moved", _fsx_moved)


def _stateful(result: SynthResult) -> int:
    return sum(
        1
        for template in result.templates.values()
        for r in template["Resources"].values()
        if r["Type"] in guard.STATEFUL_TYPES
    )


def _line(result: SynthResult, short: str, logical: str, detail: str) -> str:
    stack = result.stacks[short].stack_name
    type_ = result.templates[short]["Resources"][logical]["Type"]
    return f"{stack}/{logical} ({type_}): {detail}"


@synth_test
def test_routine_prod_changes_pass(prod_baseline: SynthResult, routine: SynthResult):
    result = hpctl("guard", str(prod_baseline.outdir), str(routine.outdir))
    assert result.exit_code == ExitCode.OK, result.output
    checked = _stateful(prod_baseline)
    assert checked >= 25
    assert result.stdout == f"no stateful resource is deleted or replaced ({checked} checked)\n"
    # The edits took effect (else the pass proves nothing).
    (cluster,) = routine.resources("hyperpod", "AWS::SageMaker::Cluster").values()
    names = [g["InstanceGroupName"] for g in cluster["Properties"]["InstanceGroups"]]
    assert sorted(names) == ["cpu-batch", "gpu-p5", "system"]
    assert ADDED_AZ in routine.stacks["network"].cluster_subnets
    (fsx,) = routine.resources("storage", "AWS::FSx::FileSystem").values()
    (before,) = prod_baseline.resources("storage", "AWS::FSx::FileSystem").values()
    assert fsx["Properties"]["StorageCapacity"] == before["Properties"]["StorageCapacity"] + 2400
    assert {"Key": "owner", "Value": "ml-platform-oncall"} in fsx["Properties"]["Tags"]
    entries = routine.resources("eks", "AWS::EKS::AccessEntry").values()
    assert ADDED_ADMIN in [e["Properties"]["PrincipalArn"] for e in entries]
    quotas = routine.resources("governance", "AWS::SageMaker::ComputeQuota")
    assert quotas != prod_baseline.resources("governance", "AWS::SageMaker::ComputeQuota")


@synth_test
def test_removing_an_az_replaces_the_cluster_and_deletes_its_subnets(
    prod_baseline: SynthResult, az_removed: SynthResult
):
    result = hpctl("guard", str(prod_baseline.outdir), str(az_removed.outdir))
    network = prod_baseline.templates["network"]["Resources"]
    gone = [k for k, v in network.items() if v["Type"] == "AWS::EC2::Subnet" and "useast1c" in k]
    assert len(gone) == 2  # infra and cluster (a closed network has no public subnets)
    expected = [_line(prod_baseline, "network", logical, "deleted") for logical in gone] + [
        _line(prod_baseline, "hyperpod", CLUSTER_LOGICAL_ID, "replaced: VpcConfig changed"),
    ]
    assert sorted(findings(result)) == sorted(expected)
    assert error_line(result, ExitCode.FAILED) == blocked(3)
    # Deliberate (a migration planned around it): every one allowed, still listed.
    allowed = hpctl(
        "guard",
        str(prod_baseline.outdir),
        str(az_removed.outdir),
        "--allow",
        CLUSTER_LOGICAL_ID,
        *(f"--allow={logical}" for logical in gone),
    )
    assert allowed.exit_code == ExitCode.OK, allowed.output
    assert sum(line.endswith(" [allowed]") for line in findings(allowed)) == 3


@synth_test
def test_a_training_plan_on_an_existing_group_is_refused(
    prod_baseline: SynthResult, plan_added: SynthResult
):
    result = hpctl("guard", str(prod_baseline.outdir), str(plan_added.outdir))
    assert error_line(result, ExitCode.FAILED) == blocked(1)
    assert findings(result) == [
        _line(
            prod_baseline,
            "hyperpod",
            CLUSTER_LOGICAL_ID,
            "replaced: InstanceGroups[system].OverrideVpcConfig changed",
        )
    ]


@synth_test
def test_moving_fsx_to_another_subnet_replaces_it(
    prod_baseline: SynthResult, fsx_moved: SynthResult
):
    result = hpctl("guard", str(prod_baseline.outdir), str(fsx_moved.outdir), "--json")
    assert error_line(result, ExitCode.FAILED) == blocked(3)
    report = json.loads(result.stdout)
    stack = prod_baseline.stacks["storage"].stack_name
    found = {(f["stack"], f["type"], f["detail"]) for f in report["findings"]}
    file_system = prod_baseline.logical_id(
        "storage", prod_baseline.stacks["storage"].lustre.resource
    )
    assert found == {
        (stack, "AWS::FSx::FileSystem", "replaced: SubnetIds changed"),
        (
            stack,
            "AWS::FSx::DataRepositoryAssociation",
            f"replaced: FileSystemId changed ({file_system} is replaced)",
        ),
        (
            prod_baseline.stacks["hyperpod"].stack_name,
            "AWS::SageMaker::Cluster",
            "replaced: InstanceGroups[gpu-p5].OverrideVpcConfig changed",
        ),
    }


@synth_test
def test_env_synthesizes_the_environment_and_reads_what_is_deployed(
    prod_baseline: SynthResult, deployed: Deployed
):
    """`--env prod` really synthesizes prod; the account has prod as shipped deployed,
    except the governance stack, which is not deployed yet."""
    for short, stack in prod_baseline.stacks.items():
        if short == "governance":
            deployed.error(
                stack.stack_name,
                "ValidationError",
                f"Stack with id {stack.stack_name} does not exist",
            )
        else:
            deployed.template(stack.stack_name, prod_baseline.templates[short])
    result = hpctl("guard", "--env", "prod")
    assert result.exit_code == ExitCode.OK, result.output
    governance = prod_baseline.stacks["governance"]
    checked = _stateful(prod_baseline) - sum(
        1
        for r in prod_baseline.templates["governance"]["Resources"].values()
        if r["Type"] in guard.STATEFUL_TYPES
    )
    assert result.stdout == (
        f"no stateful resource is deleted or replaced ({checked} checked); "
        f"not deployed yet: {governance.stack_name}\n"
    )
