"""`hpctl preflight --env NAME` against botocore's Stubber on real clients of every service it
calls (SageMaker, Service Quotas, EC2, IAM, ECR, EKS): the real API models check each request
(and every expected parameter is exact) and each canned response. No test reaches the
network: credentials are fake and sockets refuse to connect."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import NoCredentialsError

from config.images import platform_images
from hpctl import options
from hpctl.errors import ExitCode
from hpctl.preflight import context, digests
from tests.cli.conftest import (
    Stubs,
    error_line,
    expect_failure,
    hpctl,
    offline_clients,
    stubbed_clients,
)
from tests.support import environment_data

SERVICES = ("sagemaker", "service-quotas", "ec2", "iam", "ecr", "eks", "cloudformation", "s3")
ACCOUNT = "333333333333"  # config/prod.yaml
REGION = "us-east-1"
PLAN = "p5-prod-2026h2"
PLAN_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{PLAN}"
NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
REPOSITORY = "nvidia/k8s-device-plugin"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}:v0.16.1"
DIGEST = "sha256:" + "ab" * 32
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin"
BREAK_GLASS = f"arn:aws:iam::{ACCOUNT}:role/PlatformBreakGlass"
PREFIX = "hpctl preflight: "
STORAGE_STACK = "hyperpod-prod-storage"
DATA_BUCKET = "hyperpod-prod-storage-databucket0123-abcdef"


# ------------------------------------------------------------------ stubbed clients


@pytest.fixture(scope="module")
def real_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return offline_clients(tmp_path_factory, REGION, SERVICES)


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch, real_clients: dict[str, Any]) -> Iterator[Stubs]:
    monkeypatch.setattr(context, "clock", lambda: NOW)
    # Every image of the table recorded by digest and served (the digest check's own calls
    # are tested in tests/preflight/test_digests.py).
    pinned = {
        name: dataclasses.replace(image, digest=image.digest or DIGEST)
        for name, image in platform_images(REGION).items()
    }
    monkeypatch.setattr(digests, "platform_images", lambda region: pinned)
    monkeypatch.setattr(digests, "ecr_digest", lambda _context, image: image.digest)
    monkeypatch.setattr(digests, "manifest_digest", lambda _repository, reference, **_: reference)
    with stubbed_clients(monkeypatch, real_clients, ACCOUNT) as stubbed:
        yield stubbed


@pytest.fixture
def config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(options, "config_dir", tmp_path)
    return tmp_path


def write_env(directory: Path, name: str, data: dict[str, Any]) -> None:
    data["environment"] = name
    (directory / f"{name}.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")


# ------------------------------------------------------------------ canned responses


def capacity(
    instance_type: str = "ml.p5.48xlarge",
    count: int = 16,
    zone: str = "us-east-1a",
    start: datetime = NOW - timedelta(days=1),
    days: int = 90,
    status: str = "Active",
) -> dict[str, Any]:
    return {
        "ReservedCapacityArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:reserved-capacity/rc-{count}",
        "ReservedCapacityType": "Instance",
        "InstanceType": instance_type,
        "TotalInstanceCount": count,
        "Status": status,
        "AvailabilityZone": zone,
        "AvailabilityZoneId": "use1-az4",
        "StartTime": start,
        "EndTime": start + timedelta(days=days),
    }


def plan_response(
    status: str = "Active",
    ends: datetime = NOW + timedelta(days=89),
    capacities: list[dict[str, Any]] | None = None,
    targets: tuple[str, ...] = ("hyperpod-cluster",),
    arn: str = PLAN_ARN,
    starts: datetime = NOW - timedelta(days=1),
) -> dict[str, Any]:
    return {
        "TrainingPlanArn": arn,
        "TrainingPlanName": PLAN,
        "Status": status,
        "StartTime": starts,
        "EndTime": ends,
        "TotalInstanceCount": 16,
        "TargetResources": list(targets),
        "ReservedCapacitySummaries": [capacity()] if capacities is None else capacities,
    }


def queue_plan(stubs: Stubs, response: dict[str, Any]) -> None:
    stubs["sagemaker"].add_response(
        "describe_training_plan", response, expected_params={"TrainingPlanName": PLAN}
    )


def quota(service: str, code: str, name: str, value: float) -> dict[str, Any]:
    return {
        "ServiceCode": service,
        "QuotaCode": code,
        "QuotaName": name,
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


SAGEMAKER_QUOTAS = [
    quota("sagemaker", "L-5F2E5B33", "ml.p5.48xlarge for cluster usage", 0.0),
    quota("sagemaker", "L-4C0A8E8D", "ml.m5.4xlarge for cluster usage", 10.0),
    quota("sagemaker", "L-0D2A1E52", "ml.m5.xlarge for cluster usage", 4.0),
    quota("sagemaker", "L-6A1C9B3F", "ml.g5.12xlarge for cluster usage", 2.0),
]
# (service code, quota code, name, value) of the quotas read by code, prod's order. prod is a
# closed network: no NAT gateway, so no Elastic IP quota is read.
CODED = [
    ("eks", "L-1194D53C", "Clusters", 100.0),
    ("vpc", "L-F678F1CE", "VPCs per Region", 5.0),
    ("vpc", "L-83CA0A9D", "IPv4 CIDR blocks per VPC", 5.0),
    ("fsx", "L-8F1B9C74", "Lustre Persistent_2 storage capacity", 100800.0),
]
# Read before the FSx quota when the network has NAT gateways.
ELASTIC_IPS = ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs", 5.0)


def queue_sagemaker_quotas(stubs: Stubs, quotas: list[dict[str, Any]] = SAGEMAKER_QUOTAS) -> None:
    stubs["service-quotas"].add_response(
        "list_service_quotas", {"Quotas": quotas}, expected_params={"ServiceCode": "sagemaker"}
    )


def queue_coded_quota(stubs: Stubs, service: str, code: str, name: str, value: float) -> None:
    stubs["service-quotas"].add_response(
        "get_service_quota",
        {"Quota": quota(service, code, name, value)},
        expected_params={"ServiceCode": service, "QuotaCode": code},
    )


def queue_quotas(
    stubs: Stubs, values: dict[str, float] | None = None, *, nat: bool = False
) -> None:
    """prod's quota calls; `values` replaces quota values by quota code; `nat` adds the
    Elastic IP quota a network with NAT gateways reads."""
    queue_sagemaker_quotas(stubs)
    coded = [*CODED[:-1], ELASTIC_IPS, CODED[-1]] if nat else CODED
    for service, code, name, value in coded:
        queue_coded_quota(stubs, service, code, name, (values or {}).get(code, value))


def zone(name: str, zone_id: str, state: str = "available") -> dict[str, Any]:
    return {
        "ZoneName": name,
        "ZoneId": zone_id,
        "State": state,
        "RegionName": REGION,
        "OptInStatus": "opt-in-not-required",
        "ZoneType": "availability-zone",
        "Messages": [],
    }


# prod's account, as cdk.context.json records it.
ZONES = [
    zone("us-east-1a", "use1-az4"),
    zone("us-east-1b", "use1-az6"),
    zone("us-east-1c", "use1-az1"),
    zone("us-east-1d", "use1-az2"),
]


def queue_zones(stubs: Stubs, zones: list[dict[str, Any]] = ZONES) -> None:
    stubs["ec2"].add_response(
        "describe_availability_zones", {"AvailabilityZones": zones}, expected_params={}
    )


def role(arn: str, role_id: str = "AROAEXAMPLEID0000001") -> dict[str, Any]:
    path, _, name = arn.split(":role/", 1)[1].rpartition("/")
    return {
        "Role": {
            "Path": f"/{path}/" if path else "/",
            "RoleName": name,
            "RoleId": role_id,
            "Arn": arn,
            "CreateDate": NOW - timedelta(days=400),
        }
    }


def queue_role(stubs: Stubs, name: str, response: dict[str, Any]) -> None:
    stubs["iam"].add_response("get_role", response, expected_params={"RoleName": name})


def queue_roles(stubs: Stubs) -> None:
    queue_role(stubs, "PlatformAdmin", role(ADMIN))
    queue_role(stubs, "PlatformBreakGlass", role(BREAK_GLASS, "AROAEXAMPLEID0000002"))


IMAGE_PARAMS = {"repositoryName": REPOSITORY, "imageIds": [{"imageTag": "v0.16.1"}]}
# The environments' second override: the team-directory Job's image (config/prod.yaml).
TEAM_REPOSITORY = "docker/library/busybox"
TEAM_IMAGE_PARAMS = {"repositoryName": TEAM_REPOSITORY, "imageIds": [{"imageTag": "1.37.0"}]}


def image_details(
    status: str = "ACTIVE", repository: str = REPOSITORY, tag: str = "v0.16.1"
) -> dict[str, Any]:
    return {
        "imageDetails": [
            {
                "registryId": ACCOUNT,
                "repositoryName": repository,
                "imageDigest": DIGEST,
                "imageTags": [tag],
                "imagePushedAt": NOW - timedelta(days=30),
                "imageStatus": status,
            }
        ]
    }


def queue_image(stubs: Stubs, response: dict[str, Any] | None = None) -> None:
    stubs["ecr"].add_response(
        "describe_images", response or image_details(), expected_params=IMAGE_PARAMS
    )
    queue_team_image(stubs)


def queue_team_image(stubs: Stubs) -> None:
    """The team-directory image, checked after the device plugin (overrides in name order)."""
    stubs["ecr"].add_response(
        "describe_images",
        image_details(repository=TEAM_REPOSITORY, tag="1.37.0"),
        expected_params=TEAM_IMAGE_PARAMS,
    )


def version(name: str, status: str, standard_end: str, extended_end: str) -> dict[str, Any]:
    return {
        "clusterVersion": name,
        "clusterType": "eks",
        "versionStatus": status,
        "status": status.lower().replace("_", "-"),
        "releaseDate": datetime(2024, 1, 1, tzinfo=UTC),
        "endOfStandardSupportDate": datetime.fromisoformat(standard_end).replace(tzinfo=UTC),
        "endOfExtendedSupportDate": datetime.fromisoformat(extended_end).replace(tzinfo=UTC),
    }


VERSIONS = [
    version("1.31", "EXTENDED_SUPPORT", "2025-11-26", "2026-11-26"),
    version("1.32", "EXTENDED_SUPPORT", "2026-03-23", "2027-03-23"),
    version("1.33", "EXTENDED_SUPPORT", "2026-07-29", "2027-07-29"),
    version("1.34", "STANDARD_SUPPORT", "2026-12-02", "2027-12-02"),
    version("1.35", "STANDARD_SUPPORT", "2027-03-27", "2028-03-27"),
]


def queue_versions(stubs: Stubs, versions: list[dict[str, Any]] = VERSIONS) -> None:
    stubs["eks"].add_response(
        "describe_cluster_versions",
        {"clusterVersions": versions},
        expected_params={"includeAll": True},
    )


def storage_stack(outputs: dict[str, str], name: str = STORAGE_STACK) -> dict[str, Any]:
    return {
        "Stacks": [
            {
                "StackName": name,
                "CreationTime": NOW,
                "StackStatus": "UPDATE_COMPLETE",
                "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()],
            }
        ]
    }


def queue_bucket(
    stubs: Stubs, key_count: int = 0, stack: str = STORAGE_STACK, bucket: str = DATA_BUCKET
) -> None:
    """The deployed storage stack names its data bucket; the bucket holds `key_count`
    objects (of the one asked for)."""
    stubs["cloudformation"].add_response(
        "describe_stacks",
        storage_stack({"ArtifactBucketName": "artifacts", "DataBucketName": bucket}, stack),
        expected_params={"StackName": stack},
    )
    contents = [{"Key": "datasets/a.bin", "Size": 1}] if key_count else []
    stubs["s3"].add_response(
        "list_objects_v2",
        {"KeyCount": key_count, "Contents": contents, "Name": bucket, "MaxKeys": 1},
        expected_params={"Bucket": bucket, "MaxKeys": 1},
    )


def queue_prod(stubs: Stubs, *, skip: tuple[str, ...] = (), env: str = "prod") -> None:
    """Healthy answers for every check of config/prod.yaml, but those named in `skip`
    (training-plan, quota, availability-zone, admin-role, image, kubernetes-version,
    bucket-key); `env` names the storage stack of a config written from prod's."""
    queues = {
        "training-plan": lambda: queue_plan(stubs, plan_response()),
        "quota": lambda: queue_quotas(stubs),
        "availability-zone": lambda: queue_zones(stubs),
        "admin-role": lambda: queue_roles(stubs),
        "image": lambda: queue_image(stubs),
        "kubernetes-version": lambda: queue_versions(stubs),
        "bucket-key": lambda: queue_bucket(stubs, stack=f"hyperpod-{env}-storage"),
    }
    for name, queue in queues.items():
        if name not in skip:
            queue()


# ------------------------------------------------------------------ running


def run_json(*args: str, code: ExitCode = ExitCode.OK) -> dict[str, Any]:
    result = hpctl("preflight", *args, "--json")
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if code == ExitCode.FAILED:
        line = error_line(result, ExitCode.FAILED)
        assert line.startswith(PREFIX), line
        assert "found a problem" in line
    else:
        assert result.stderr == ""
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def rows_of(report: dict[str, Any], check: str) -> list[dict[str, str]]:
    return [r for r in report["checks"] if r["check"] == check]


def row(report: dict[str, Any], check: str, subject: str) -> dict[str, str]:
    (found,) = [r for r in rows_of(report, check) if r["subject"] == subject]
    return found


CHECK_NAMES = (
    "training-plan",
    "quota",
    "availability-zone",
    "admin-role",
    "image",
    "digest",
    "kubernetes-version",
    "bucket-key",
)


def others_ok(report: dict[str, Any], *but: str) -> None:
    """Every check other than `but` still ran and passed."""
    others = [r for r in report["checks"] if r["check"] not in but]
    assert {r["check"] for r in others} == set(CHECK_NAMES) - set(but)
    assert all(r["status"] == "ok" for r in others), others


# ------------------------------------------------------------------ all ok


def test_prod_all_ok_json(stubs: Stubs):
    queue_prod(stubs)
    report = run_json("--env", "prod")
    # The shape scripts rely on: keys in this order, every row the same five strings.
    assert list(report) == ["environment", "account", "region", "ok", "counts", "checks"]
    assert all(list(r) == ["check", "subject", "status", "detail", "fix"] for r in report["checks"])
    assert all(isinstance(v, str) for r in report["checks"] for v in r.values())
    assert report["environment"] == "prod"
    assert (report["account"], report["region"], report["ok"]) == (ACCOUNT, REGION, True)
    assert report["counts"] == {"ok": 20, "problem": 0, "warning": 0, "skipped": 0}
    # prod is a closed network: no NAT gateway, so no Elastic IP row (and no call for it).
    assert [(r["check"], r["subject"], r["status"]) for r in report["checks"]] == [
        ("training-plan", f"gpu-p5: {PLAN}", "ok"),
        ("quota", "sagemaker: ml.p5.48xlarge for cluster usage", "ok"),
        ("quota", "sagemaker: ml.m5.4xlarge for cluster usage", "ok"),
        ("quota", "eks: Clusters", "ok"),
        ("quota", "vpc: VPCs per Region", "ok"),
        ("quota", "vpc: IPv4 CIDR blocks per VPC", "ok"),
        ("quota", "fsx: Lustre Persistent_2 storage capacity", "ok"),
        ("availability-zone", "us-east-1a", "ok"),
        ("availability-zone", "us-east-1b", "ok"),
        ("availability-zone", "us-east-1c", "ok"),
        ("admin-role", ADMIN, "ok"),
        ("admin-role", BREAK_GLASS, "ok"),
        ("image", "nvidia-device-plugin", "ok"),
        ("image", "team-directories", "ok"),
        # prod overrides the other two images; their override's row is `image`.
        ("digest", "aws-efa-k8s-device-plugin", "ok"),
        ("digest", "health-monitoring-agent", "ok"),
        ("digest", "neuron-device-plugin", "ok"),
        ("digest", "training-base", "ok"),
        ("kubernetes-version", "1.34", "ok"),
        ("bucket-key", DATA_BUCKET, "ok"),
    ]
    details = {(r["check"], r["subject"]): r["detail"] for r in report["checks"]}
    assert details[("training-plan", f"gpu-p5: {PLAN}")] == (
        "Active, 16 x ml.p5.48xlarge in us-east-1a, ends 2026-11-29"
    )
    # The plan-backed group needs no on-demand quota; the on-demand group's count does.
    assert details[("quota", "sagemaker: ml.p5.48xlarge for cluster usage")] == (
        f"gpu-p5 runs on training plan {PLAN}, not on-demand quota (see training-plan)"
    )
    assert details[("quota", "sagemaker: ml.m5.4xlarge for cluster usage")] == (
        "quota 10, needs 3 (system)"
    )
    assert details[("quota", "fsx: Lustre Persistent_2 storage capacity")] == (
        "quota 100800 GiB, needs 24000 GiB (FSx)"
    )
    assert details[("availability-zone", "us-east-1a")] == (
        "use1-az4, available; used by cluster subnets, FSx, plan of gpu-p5"
    )
    assert details[("availability-zone", "us-east-1c")] == (
        "use1-az1, available; used by cluster subnets"
    )
    assert details[("admin-role", ADMIN)] == "exists (AROAEXAMPLEID0000001)"
    assert details[("image", "nvidia-device-plugin")] == f"{IMAGE} exists (sha256:abababababab)"
    # What the account offers beyond the table is reported, not a problem.
    assert details[("kubernetes-version", "1.34")] == (
        "standard support until 2026-12-02; EKS also offers 1.35, which HyperPod does not "
        "document (config/eks_versions.py)"
    )
    assert all(r["fix"] == "" for r in report["checks"])
    # Every client is built once, for the environment's Region, STS first.
    assert sorted(stubs.clients) == sorted((service, REGION) for service in ("sts", *SERVICES))


def test_prod_all_ok_table(stubs: Stubs):
    queue_prod(stubs)
    result = hpctl("preflight", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert f"Preflight: prod ({ACCOUNT}, {REGION})" in lines[0]
    cells = [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in lines
        if line.startswith("│") and not line.startswith("│ check")
    ]
    first_lines = [c for c in cells if c[0]]
    assert len(first_lines) == 20
    assert {c[2] for c in first_lines} == {"ok"}
    assert ["training-plan", f"gpu-p5: {PLAN}", "ok"] == first_lines[0][:3]
    assert ["admin-role", BREAK_GLASS, "ok", "exists (AROAEXAMPLEID0000002)", "-"] in first_lines
    assert lines[-1] == "20 ok, 0 problems, 0 warnings, 0 skipped"


def test_dev_without_plan_or_secondary_cidr(stubs: Stubs):
    """dev: no training plan (a skipped row, no SageMaker call), both groups on-demand, no
    cluster_cidr (no CIDR-block quota), a closed network (no NAT), 1200 GiB of FSx."""
    dev_account = "111111111111"
    stubs.caller = dev_account
    stubs["service-quotas"].add_response(
        "list_service_quotas",
        {"Quotas": SAGEMAKER_QUOTAS},
        expected_params={"ServiceCode": "sagemaker"},
    )
    for service, code, name, value in CODED:
        if code != "L-83CA0A9D":
            queue_coded_quota(stubs, service, code, name, value)
    # dev's account maps the names to other zones than prod's (cdk.context.json).
    queue_zones(stubs, [zone("us-east-1a", "use1-az2"), zone("us-east-1b", "use1-az4")])
    stubs["iam"].add_response(
        "get_role",
        role(f"arn:aws:iam::{dev_account}:role/PlatformAdmin"),
        expected_params={"RoleName": "PlatformAdmin"},
    )
    queue_image(stubs)
    queue_versions(stubs)
    queue_bucket(stubs, stack="hyperpod-dev-storage")
    report = run_json("--env", "dev")
    assert row(report, "training-plan", "-") == {
        "check": "training-plan",
        "subject": "-",
        "status": "skipped",
        "detail": "no instance group uses a training plan",
        "fix": "",
    }
    quotas = {r["subject"]: r["detail"] for r in rows_of(report, "quota")}
    assert quotas == {
        "sagemaker: ml.g5.12xlarge for cluster usage": "quota 2, needs 2 (gpu-g5)",
        "sagemaker: ml.m5.xlarge for cluster usage": "quota 4, needs 1 (system)",
        "eks: Clusters": "quota 100, needs 1 (the EKS cluster)",
        "vpc: VPCs per Region": "quota 5, needs 1 (the VPC)",
        "fsx: Lustre Persistent_2 storage capacity": "quota 100800 GiB, needs 1200 GiB (FSx)",
    }
    assert [r["subject"] for r in rows_of(report, "availability-zone")] == [
        "us-east-1a",
        "us-east-1b",
    ]
    assert ("sagemaker", REGION) not in stubs.clients


# ------------------------------------------------------------------ training plans


@pytest.mark.parametrize(
    ("response", "detail", "fix"),
    [
        (
            plan_response(
                status="Expired",
                ends=NOW - timedelta(days=2),
                capacities=[capacity(status="Expired", start=NOW - timedelta(days=30), days=28)],
            ),
            "status Expired",
            "buy a new plan (hpctl plans search / buy) and set training_plan.arn",
        ),
        (
            plan_response(ends=NOW - timedelta(hours=1)),
            "ended 2026-09-01 11:00 UTC",
            "buy a new plan and set training_plan.arn",
        ),
        (
            plan_response(ends=NOW + timedelta(days=6, hours=23)),
            "ends 2026-09-08 11:00 UTC, less than 7 days from now",
            "extend the plan or buy the next one before deploying",
        ),
        (
            plan_response(capacities=[capacity(instance_type="ml.p4d.24xlarge")]),
            "plan reserves ml.p4d.24xlarge, the group runs ml.p5.48xlarge",
            "use a plan for ml.p5.48xlarge or change the group's instance_type",
        ),
        (
            plan_response(capacities=[capacity(zone="us-east-1b")]),
            "plan capacity is in us-east-1b, training_plan.availability_zone is us-east-1a",
            "buy a plan in us-east-1a (where FSx is) or correct training_plan.availability_zone",
        ),
        (
            plan_response(capacities=[capacity(count=8)]),
            "plan reserves 8 x ml.p5.48xlarge in us-east-1a, the group needs 16",
            "lower count to 8 or buy a plan for 8 more instances",
        ),
        (
            # Two consecutive 8-instance reservations never hold 16 at once.
            plan_response(
                capacities=[
                    capacity(count=8, start=NOW - timedelta(days=1), days=30),
                    capacity(count=8, start=NOW + timedelta(days=29), days=30),
                ]
            ),
            "plan reserves 8 x ml.p5.48xlarge in us-east-1a, the group needs 16",
            "lower count to 8 or buy a plan for 8 more instances",
        ),
        (
            plan_response(targets=("training-job",)),
            "plan targets training-job, not hyperpod-cluster",
            "buy a plan for hyperpod-cluster",
        ),
        (
            plan_response(status="Pending"),
            "status Pending",
            "wait until the plan is Active or Scheduled",
        ),
    ],
    ids=[
        "expired",
        "ended",
        "ends-within-7-days",
        "wrong-type",
        "wrong-zone",
        "count-too-small",
        "consecutive-not-concurrent",
        "not-for-hyperpod",
        "pending",
    ],
)
def test_training_plan_problems(stubs: Stubs, response: dict[str, Any], detail: str, fix: str):
    queue_prod(stubs, skip=("training-plan",))
    queue_plan(stubs, response)
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "training-plan", f"gpu-p5: {PLAN}") == {
        "check": "training-plan",
        "subject": f"gpu-p5: {PLAN}",
        "status": "problem",
        "detail": detail,
        "fix": fix,
    }
    others_ok(report, "training-plan")
    assert report["counts"]["problem"] == 1


def test_overlapping_reservations_add_up_and_a_scheduled_plan_is_fine(stubs: Stubs):
    queue_prod(stubs, skip=("training-plan",))
    start = NOW + timedelta(days=3)
    queue_plan(
        stubs,
        plan_response(
            status="Scheduled",
            starts=start,
            capacities=[
                capacity(count=8, start=start, status="Scheduled"),
                capacity(count=8, start=start + timedelta(hours=6), status="Scheduled"),
            ],
        ),
    )
    report = run_json("--env", "prod")
    assert row(report, "training-plan", f"gpu-p5: {PLAN}")["detail"] == (
        "Scheduled, 16 x ml.p5.48xlarge in us-east-1a, starts 2026-09-04, ends 2026-11-29"
    )


def test_groups_sharing_a_plan_are_described_once_and_counted_together(
    stubs: Stubs, config_dir: Path
):
    data = environment_data("prod")
    gpu = data["hyperpod"]["instance_groups"][0]
    spare = {
        "name": "gpu-p5-spare",
        "instance_type": gpu["instance_type"],
        "count": 2,
        "training_plan": dict(gpu["training_plan"]),
    }
    data["hyperpod"]["instance_groups"].append(spare)
    write_env(config_dir, "shared", data)
    # One DescribeTrainingPlan for both groups: a second call would find nothing queued.
    queue_prod(stubs, env="shared")
    report = run_json("--env", "shared", code=ExitCode.FAILED)
    plan_rows = rows_of(report, "training-plan")
    assert [r["subject"] for r in plan_rows] == [f"gpu-p5: {PLAN}", f"gpu-p5-spare: {PLAN}"]
    for found in plan_rows:
        assert found["status"] == "problem"
        assert found["detail"] == (
            "plan reserves 16 x ml.p5.48xlarge in us-east-1a, groups gpu-p5, gpu-p5-spare need 18"
        )
        assert found["fix"] == (
            "lower their counts by 2 in total or buy a plan for 2 more instances"
        )
    others_ok(report, "training-plan")


def test_missing_plan_is_a_problem(stubs: Stubs):
    queue_prod(stubs, skip=("training-plan",))
    stubs["sagemaker"].add_client_error(
        "describe_training_plan",
        service_error_code="ResourceNotFound",
        service_message=f"Training plan {PLAN} not found",
        expected_params={"TrainingPlanName": PLAN},
    )
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    found = row(report, "training-plan", f"gpu-p5: {PLAN}")
    assert (found["status"], found["detail"]) == (
        "problem",
        f"no training plan named {PLAN} in us-east-1",
    )
    assert found["fix"] == "buy it (hpctl plans search / buy) or correct training_plan.arn"
    others_ok(report, "training-plan")


def test_plan_of_another_account_is_a_problem(stubs: Stubs):
    queue_prod(stubs, skip=("training-plan",))
    other = f"arn:aws:sagemaker:{REGION}:444444444444:training-plan/{PLAN}"
    queue_plan(stubs, plan_response(arn=other))
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    found = row(report, "training-plan", f"gpu-p5: {PLAN}")
    assert found["detail"] == f"the plan named {PLAN} is {other}"


# ------------------------------------------------------------------ quotas


def test_quota_too_low_is_a_problem_with_the_request_command(stubs: Stubs, config_dir: Path):
    # prod with egress: nat and its three NAT gateways (shipped prod is a closed network).
    data = environment_data("prod")
    data["network"].update(egress="nat", nat_gateways=3, https_egress_cidrs=["203.0.113.10/32"])
    write_env(config_dir, "prod", data)
    queue_prod(stubs, skip=("quota",))
    queue_quotas(stubs, {"L-0263D0A3": 2.0, "L-8F1B9C74": 19200.0}, nat=True)
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "quota", "ec2: EC2-VPC Elastic IPs") == {
        "check": "quota",
        "subject": "ec2: EC2-VPC Elastic IPs",
        "status": "problem",
        "detail": "quota 2, needs 3 (one per NAT gateway)",
        "fix": "request an increase: aws service-quotas request-service-quota-increase "
        "--service-code ec2 --quota-code L-0263D0A3 --desired-value 3 --region us-east-1",
    }
    fsx = row(report, "quota", "fsx: Lustre Persistent_2 storage capacity")
    assert (fsx["status"], fsx["detail"]) == (
        "problem",
        "quota 19200 GiB, needs 24000 GiB (FSx)",
    )
    assert report["counts"]["problem"] == 2
    others_ok(report, "quota")


def test_on_demand_quota_sums_groups_of_one_type(stubs: Stubs, config_dir: Path):
    data = environment_data("prod")
    data["hyperpod"]["instance_groups"].append(
        {"name": "system-extra", "instance_type": "ml.m5.4xlarge", "count": 8}
    )
    write_env(config_dir, "bigger", data)
    queue_prod(stubs, env="bigger")
    report = run_json("--env", "bigger", code=ExitCode.FAILED)
    found = row(report, "quota", "sagemaker: ml.m5.4xlarge for cluster usage")
    assert found["status"] == "problem"
    assert found["detail"] == "quota 10, needs 11 (system, system-extra)"
    assert "--service-code sagemaker --quota-code L-4C0A8E8D --desired-value 11" in found["fix"]


def test_sagemaker_quota_missing_from_applied_and_default_lists(stubs: Stubs):
    queue_prod(stubs, skip=("quota",))
    queue_sagemaker_quotas(
        stubs, [q for q in SAGEMAKER_QUOTAS if "m5.4xlarge" not in q["QuotaName"]]
    )
    stubs["service-quotas"].add_response(
        "list_aws_default_service_quotas",
        {"Quotas": []},
        expected_params={"ServiceCode": "sagemaker"},
    )
    for service, code, name, value in CODED:
        queue_coded_quota(stubs, service, code, name, value)
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    found = row(report, "quota", "sagemaker: ml.m5.4xlarge for cluster usage")
    assert (found["status"], found["detail"]) == (
        "problem",
        "Service Quotas lists no such quota for sagemaker in us-east-1",
    )


def test_quota_without_applied_value_falls_back_to_the_default(stubs: Stubs):
    queue_prod(stubs, skip=("quota",))
    queue_sagemaker_quotas(stubs)
    for service, code, name, value in CODED:
        if code == "L-F678F1CE":
            stubs["service-quotas"].add_client_error(
                "get_service_quota",
                service_error_code="NoSuchResourceException",
                service_message="The request failed because the specified resource does not exist.",
                expected_params={"ServiceCode": service, "QuotaCode": code},
            )
            stubs["service-quotas"].add_response(
                "get_aws_default_service_quota",
                {"Quota": quota(service, code, name, 5.0)},
                expected_params={"ServiceCode": service, "QuotaCode": code},
            )
        else:
            queue_coded_quota(stubs, service, code, name, value)
    report = run_json("--env", "prod")
    assert row(report, "quota", "vpc: VPCs per Region")["detail"] == "quota 5, needs 1 (the VPC)"


# ------------------------------------------------------------------ availability zones


def test_missing_and_impaired_zones(stubs: Stubs):
    queue_prod(stubs, skip=("availability-zone",))
    queue_zones(
        stubs,
        [ZONES[0], zone("us-east-1b", "use1-az6", state="impaired"), ZONES[3]],
    )
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "availability-zone", "us-east-1c") == {
        "check": "availability-zone",
        "subject": "us-east-1c",
        "status": "problem",
        "detail": "not an Availability Zone of us-east-1 for this account; used by cluster subnets",
        "fix": "use zones this account has: us-east-1a, us-east-1b, us-east-1d",
    }
    impaired = row(report, "availability-zone", "us-east-1b")
    assert (impaired["status"], impaired["detail"]) == (
        "problem",
        "use1-az6: state impaired; used by cluster subnets",
    )
    assert row(report, "availability-zone", "us-east-1a")["status"] == "ok"
    others_ok(report, "availability-zone")


def test_a_zone_id_other_than_the_recorded_one_is_a_problem(stubs: Stubs):
    # prod names its zones by ID; cdk.context.json maps use1-az6 to us-east-1b. An account
    # that says otherwise would get its subnets in other physical zones than the file says.
    queue_prod(stubs, skip=("availability-zone",))
    queue_zones(stubs, [ZONES[0], zone("us-east-1b", "use1-az2"), ZONES[2], ZONES[3]])
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    stale = row(report, "availability-zone", "us-east-1b")
    assert (stale["status"], stale["detail"]) == (
        "problem",
        "use1-az2: cdk.context.json records use1-az6 for it; used by cluster subnets",
    )
    assert stale["fix"].startswith("run hpctl zones --env prod --write")
    others_ok(report, "availability-zone")


# ------------------------------------------------------------------ admin roles


def test_missing_role_is_a_problem(stubs: Stubs):
    queue_prod(stubs, skip=("admin-role",))
    queue_role(stubs, "PlatformAdmin", role(ADMIN))
    stubs["iam"].add_client_error(
        "get_role",
        service_error_code="NoSuchEntity",
        service_message="The role with name PlatformBreakGlass cannot be found.",
        http_status_code=404,
        expected_params={"RoleName": "PlatformBreakGlass"},
    )
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "admin-role", BREAK_GLASS) == {
        "check": "admin-role",
        "subject": BREAK_GLASS,
        "status": "problem",
        "detail": f"no role named PlatformBreakGlass in account {ACCOUNT}",
        "fix": "create the role or remove it from eks.admin_role_arns",
    }
    assert row(report, "admin-role", ADMIN)["status"] == "ok"
    others_ok(report, "admin-role")


def test_roles_with_paths_and_of_other_accounts(stubs: Stubs, config_dir: Path):
    data = environment_data("prod")
    with_path = f"arn:aws:iam::{ACCOUNT}:role/platform/admins/PlatformAdmin"
    elsewhere = "arn:aws:iam::444444444444:role/Auditor"
    data["eks"]["admin_role_arns"] = [with_path, elsewhere, BREAK_GLASS]
    write_env(config_dir, "paths", data)
    queue_prod(stubs, skip=("admin-role",), env="paths")
    # Looked up by name; the path is part of the ARN the role must have.
    queue_role(stubs, "PlatformAdmin", role(with_path))
    queue_role(
        stubs, "PlatformBreakGlass", role(f"arn:aws:iam::{ACCOUNT}:role/ops/PlatformBreakGlass")
    )
    report = run_json("--env", "paths", code=ExitCode.FAILED)
    assert row(report, "admin-role", with_path)["status"] == "ok"
    assert row(report, "admin-role", elsewhere) == {
        "check": "admin-role",
        "subject": elsewhere,
        "status": "skipped",
        "detail": f"role of account 444444444444, not {ACCOUNT}: not readable here",
        "fix": "",
    }
    moved = row(report, "admin-role", BREAK_GLASS)
    assert moved["status"] == "problem"
    assert moved["detail"] == (
        f"the role named PlatformBreakGlass is arn:aws:iam::{ACCOUNT}:role/ops/PlatformBreakGlass "
        "(path /ops/)"
    )
    assert moved["fix"] == (
        f"use arn:aws:iam::{ACCOUNT}:role/ops/PlatformBreakGlass in eks.admin_role_arns"
    )


# ------------------------------------------------------------------ image overrides


@pytest.mark.parametrize(
    ("code", "detail", "fix"),
    [
        (
            "ImageNotFoundException",
            f"v0.16.1 is not in repository {REPOSITORY}",
            f"push {REPOSITORY}:v0.16.1 or correct eks.image_overrides.nvidia-device-plugin",
        ),
        (
            "RepositoryNotFoundException",
            f"repository {REPOSITORY} does not exist in {ACCOUNT} (us-east-1)",
            f"create it and push {REPOSITORY}:v0.16.1, or correct "
            "eks.image_overrides.nvidia-device-plugin",
        ),
    ],
)
def test_missing_image_or_repository(stubs: Stubs, code: str, detail: str, fix: str):
    queue_prod(stubs, skip=("image",))
    stubs["ecr"].add_client_error(
        "describe_images",
        service_error_code=code,
        service_message="not found",
        expected_params=IMAGE_PARAMS,
    )
    queue_team_image(stubs)
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "image", "nvidia-device-plugin") == {
        "check": "image",
        "subject": "nvidia-device-plugin",
        "status": "problem",
        "detail": detail,
        "fix": fix,
    }
    others_ok(report, "image")


def test_digest_pins_archived_images_and_images_elsewhere(stubs: Stubs, config_dir: Path):
    data = environment_data("prod")
    by_digest = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}@{DIGEST}"
    data["eks"]["image_overrides"] = {
        "nvidia-device-plugin": by_digest,
        "aws-efa-k8s-device-plugin": "registry.example.com/mirror/efa-plugin:v0.5.6",
        "team-directories": "registry.example.com/mirror/busybox:1.37.0",
    }
    write_env(config_dir, "digests", data)
    queue_prod(stubs, skip=("image",), env="digests")
    stubs["ecr"].add_response(
        "describe_images",
        image_details(status="ARCHIVED"),
        expected_params={"repositoryName": REPOSITORY, "imageIds": [{"imageDigest": DIGEST}]},
    )
    report = run_json("--env", "digests", code=ExitCode.FAILED)
    archived = row(report, "image", "nvidia-device-plugin")
    assert (archived["status"], archived["detail"]) == (
        "problem",
        f"{DIGEST} in {REPOSITORY} is archived: nodes cannot pull it",
    )
    mirror = row(report, "image", "aws-efa-k8s-device-plugin")
    assert (mirror["status"], mirror["detail"]) == (
        "skipped",
        "registry.example.com/mirror/efa-plugin:v0.5.6 is not in the ECR of "
        f"{ACCOUNT} in us-east-1; not checked",
    )


# ------------------------------------------------------------------ Kubernetes version


def test_extended_support_is_a_problem_naming_the_upgrade(
    stubs: Stubs, config_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    from config import eks_versions

    monkeypatch.setattr(eks_versions, "today", lambda: eks_versions.CALENDAR_CHECKED)
    data = environment_data("prod")
    data["eks"]["kubernetes_version"] = "1.33"
    data["eks"]["allow_extended_support"] = True
    data["eks"]["addons"] = {"kube-proxy": "v1.33.10-eksbuild.2"}
    write_env(config_dir, "older", data)
    queue_prod(stubs, env="older")
    report = run_json("--env", "older", code=ExitCode.FAILED)
    assert row(report, "kubernetes-version", "1.33") == {
        "check": "kubernetes-version",
        "subject": "1.33",
        "status": "problem",
        "detail": "in extended support since 2026-07-29, until 2027-07-29 "
        "(billed at the extended support rate); EKS also offers 1.35, which HyperPod does not "
        "document (config/eks_versions.py)",
        # 1.35 is in standard support too, but HyperPod does not document it.
        "fix": "set eks.kubernetes_version to 1.34 (standard support, documented by "
        "HyperPod), one minor version at a time",
    }
    others_ok(report, "kubernetes-version")


@pytest.mark.parametrize(
    ("versions", "detail", "fix"),
    [
        (
            [v for v in VERSIONS if v["clusterVersion"] != "1.34"],
            "EKS in us-east-1 does not list Kubernetes 1.34",
            # 1.33 is offered in extended support only, 1.35 is not documented by HyperPod.
            "add a version HyperPod documents that is in EKS standard support to "
            "config/eks_versions.py",
        ),
        (
            [
                version("1.34", "UNSUPPORTED", "2025-03-23", "2026-03-23"),
                version("1.33", "STANDARD_SUPPORT", "2026-07-29", "2027-07-29"),
                version("1.36", "UNSUPPORTED", "2025-03-23", "2026-03-23"),
            ],
            "status UNSUPPORTED (extended support ended 2026-03-23)",
            "set eks.kubernetes_version to 1.33 (standard support, documented by HyperPod), "
            "one minor version at a time",
        ),
    ],
    ids=["unknown", "unsupported"],
)
def test_unknown_or_unsupported_version(
    stubs: Stubs, versions: list[dict[str, Any]], detail: str, fix: str
):
    queue_prod(stubs, skip=("kubernetes-version",))
    queue_versions(stubs, versions)
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    found = row(report, "kubernetes-version", "1.34")
    # An unsupported newer version is not reported as offered.
    assert (found["status"], found["detail"], found["fix"]) == ("problem", detail, fix)


def test_no_newer_version_offered_reports_standard_support_alone(stubs: Stubs):
    queue_prod(stubs, skip=("kubernetes-version",))
    queue_versions(stubs, [v for v in VERSIONS if v["clusterVersion"] != "1.35"])
    report = run_json("--env", "prod")
    found = row(report, "kubernetes-version", "1.34")
    assert (found["status"], found["detail"]) == ("ok", "standard support until 2026-12-02")


# ------------------------------------------------------------------ AWS failures


# ------------------------------------------------------------------ bucket key


def test_a_data_bucket_with_objects_and_no_key_users_is_a_warning_not_a_failure(stubs: Stubs):
    queue_prod(stubs, skip=("bucket-key",))
    queue_bucket(stubs, key_count=1)
    result = hpctl("preflight", "--env", "prod", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["counts"] == {"ok": 19, "problem": 0, "warning": 1, "skipped": 0}
    assert row(report, "bucket-key", DATA_BUCKET) == {
        "check": "bucket-key",
        "subject": DATA_BUCKET,
        "status": "warning",
        "detail": "holds objects and storage.buckets.key_user_arns is empty: the bucket key "
        "admits only role/hyperpod-prod-* and FSx, so other readers get AccessDenied on "
        "objects written after the deploy",
        "fix": "add every role that reads or writes the bucket from outside the cluster to "
        "storage.buckets.key_user_arns",
    }
    others_ok(report, "bucket-key")


def test_the_warning_row_in_the_table(stubs: Stubs):
    queue_prod(stubs, skip=("bucket-key",))
    queue_bucket(stubs, key_count=1)
    result = hpctl("preflight", "--env", "prod")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "19 ok, 0 problems, 1 warning, 0 skipped"


def test_key_users_named_need_no_bucket_call(stubs: Stubs, config_dir: Path):
    data = environment_data("prod")
    data["storage"].setdefault("buckets", {})["key_user_arns"] = [
        f"arn:aws:iam::{ACCOUNT}:role/DataIngest"
    ]
    write_env(config_dir, "keyed", data)
    # Nothing queued for CloudFormation or S3: a call would fail the test.
    queue_prod(stubs, skip=("bucket-key",), env="keyed")
    report = run_json("--env", "keyed")
    assert row(report, "bucket-key", "data bucket") == {
        "check": "bucket-key",
        "subject": "data bucket",
        "status": "ok",
        "detail": "storage.buckets.key_user_arns names 1 key user(s) outside the platform",
        "fix": "",
    }


def test_an_environment_not_deployed_yet_skips_the_bucket(stubs: Stubs):
    queue_prod(stubs, skip=("bucket-key",))
    stubs["cloudformation"].add_client_error(
        "describe_stacks",
        service_error_code="ValidationError",
        service_message=f"Stack with id {STORAGE_STACK} does not exist",
        expected_params={"StackName": STORAGE_STACK},
    )
    report = run_json("--env", "prod")
    assert row(report, "bucket-key", "data bucket")["status"] == "skipped"
    assert row(report, "bucket-key", "data bucket")["detail"] == (
        f"{STORAGE_STACK} is not deployed: no data yet"
    )


def test_a_bucket_that_cannot_be_listed_names_the_iam_action(stubs: Stubs):
    queue_prod(stubs, skip=("bucket-key",))
    stubs["cloudformation"].add_response(
        "describe_stacks",
        storage_stack({"DataBucketName": DATA_BUCKET}),
        expected_params={"StackName": STORAGE_STACK},
    )
    stubs["s3"].add_client_error(
        "list_objects_v2",
        service_error_code="AccessDenied",
        service_message="Access Denied",
        http_status_code=403,
        expected_params={"Bucket": DATA_BUCKET, "MaxKeys": 1},
    )
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "bucket-key", DATA_BUCKET)["detail"] == "AccessDenied: needs s3:ListBucket"
    others_ok(report, "bucket-key")


def test_access_denied_on_one_check_names_the_action_and_the_rest_run(stubs: Stubs):
    queue_prod(stubs, skip=("training-plan",))
    stubs["sagemaker"].add_client_error(
        "describe_training_plan",
        service_error_code="AccessDeniedException",
        service_message="User: arn:aws:sts::333333333333:assumed-role/ci/x is not authorized "
        "to perform: sagemaker:DescribeTrainingPlan",
        http_status_code=400,
        expected_params={"TrainingPlanName": PLAN},
    )
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "training-plan", f"gpu-p5: {PLAN}") == {
        "check": "training-plan",
        "subject": f"gpu-p5: {PLAN}",
        "status": "problem",
        "detail": "AccessDeniedException: needs sagemaker:DescribeTrainingPlan",
        "fix": "allow sagemaker:DescribeTrainingPlan to the identity running preflight",
    }
    others_ok(report, "training-plan")


def test_access_denied_on_the_quota_list_only_fails_the_rows_that_need_it(stubs: Stubs):
    queue_prod(stubs, skip=("quota",))
    stubs["service-quotas"].add_client_error(
        "list_service_quotas",
        service_error_code="AccessDeniedException",
        service_message="denied",
        expected_params={"ServiceCode": "sagemaker"},
    )
    for service, code, name, value in CODED:
        queue_coded_quota(stubs, service, code, name, value)
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    found = row(report, "quota", "sagemaker: ml.m5.4xlarge for cluster usage")
    assert found["detail"] == "AccessDeniedException: needs servicequotas:ListServiceQuotas"
    problems = [r for r in report["checks"] if r["status"] == "problem"]
    assert problems == [found]


def test_throttling_is_one_clear_row(stubs: Stubs):
    queue_prod(stubs, skip=("kubernetes-version",))
    stubs["eks"].add_client_error(
        "describe_cluster_versions",
        service_error_code="ThrottlingException",
        service_message="Rate exceeded",
        http_status_code=429,
        expected_params={"includeAll": True},
    )
    report = run_json("--env", "prod", code=ExitCode.FAILED)
    assert row(report, "kubernetes-version", "1.34") == {
        "check": "kubernetes-version",
        "subject": "1.34",
        "status": "problem",
        "detail": "ThrottlingException: eks:DescribeClusterVersions was still throttled after "
        "retries",
        "fix": "run preflight again in a few minutes",
    }
    others_ok(report, "kubernetes-version")


def test_local_botocore_failure_is_a_row_not_a_traceback(
    stubs: Stubs, real_clients: dict[str, Any], monkeypatch: pytest.MonkeyPatch
):
    queue_prod(stubs, skip=("availability-zone",))

    def no_credentials(**_: Any) -> None:
        raise NoCredentialsError()

    monkeypatch.setattr(real_clients["ec2"], "describe_availability_zones", no_credentials)
    result = hpctl("preflight", "--env", "prod")
    error_line(result, ExitCode.FAILED)
    assert "Traceback" not in result.output
    report_lines = [line for line in result.stdout.splitlines() if "availability-zone" in line]
    assert len(report_lines) == 3
    assert all("problem" in line and "NoCredentialsError" in line for line in report_lines)
    assert result.stdout.splitlines()[-1] == "17 ok, 3 problems, 0 warnings, 0 skipped"


def test_problem_table_and_stderr_line(stubs: Stubs):
    queue_prod(stubs, skip=("admin-role",))
    queue_role(stubs, "PlatformAdmin", role(ADMIN))
    stubs["iam"].add_client_error(
        "get_role",
        service_error_code="AccessDenied",
        service_message="denied",
        http_status_code=403,
        expected_params={"RoleName": "PlatformBreakGlass"},
    )
    result = hpctl("preflight", "--env", "prod")
    line = error_line(result, ExitCode.FAILED)
    assert line == (
        f"{PREFIX}1 of 20 checks found a problem in {ACCOUNT} (us-east-1); fix them before "
        "deploying prod"
    )
    (denied,) = [text for text in result.stdout.splitlines() if BREAK_GLASS in text]
    assert "problem" in denied
    assert "AccessDenied: needs iam:GetRole" in denied
    assert result.stdout.splitlines()[-1] == "19 ok, 1 problem, 0 warnings, 0 skipped"


# ------------------------------------------------------------------ usage


def test_unknown_environment_is_one_line_and_calls_nothing(stubs: Stubs):
    result = expect_failure(
        "preflight", "--env", "nope", code=ExitCode.USAGE, starts_with=f"{PREFIX}--env: "
    )
    line = error_line(result, ExitCode.USAGE)
    assert line.startswith(f"{PREFIX}--env: unknown environment 'nope'; use one of ")
    assert all(env in line for env in ("dev", "prod", "staging"))
    assert stubs.clients == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], f"{PREFIX}--env: missing; pass --env"),
        (["--env"], f"{PREFIX}Option '--env' requires an argument"),
        (["--env", "prod", "--region", "x"], f"{PREFIX}No such option: --region"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str):
    expect_failure("preflight", *args, code=ExitCode.USAGE, starts_with=message)


def test_help_lists_the_options():
    result = hpctl("preflight", "--help")
    assert result.exit_code == 0
    for text in ("--env", "--json", "training plans", "quotas", "Read-only"):
        assert text in result.stdout
