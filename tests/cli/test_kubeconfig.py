"""`hpctl kubeconfig --env NAME`: the kubeconfig written from DescribeCluster (server, CA,
`aws eks get-token` exec auth), the tunnel variant (`--local-port`), the admin host's
instance ID from the network stack's output, and one-line failures. Real boto3 clients under
botocore's Stubber (requests and responses checked against the API models); no network."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpctl import options
from hpctl.errors import ExitCode
from tests.cli.conftest import (
    Stubs,
    environment_account,
    error_line,
    expect_failure,
    hpctl,
    offline_clients,
    stubbed_clients,
)
from tests.support import environment_data

REGION = "us-east-1"
CLUSTER = "hyperpod-dev-eks"
ARN = f"arn:aws:eks:{REGION}:111111111111:cluster/{CLUSTER}"
HOST = "0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"
ENDPOINT = f"https://{HOST}"
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
INSTANCE = "i-0123456789abcdef0"
NETWORK_STACK = "hyperpod-dev-network"


@pytest.fixture(scope="module")
def real_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return offline_clients(tmp_path_factory, REGION, ("eks", "cloudformation"))


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch, real_clients: dict[str, Any]) -> Iterator[Stubs]:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with stubbed_clients(monkeypatch, real_clients, environment_account("dev")) as stubbed:
        yield stubbed


def cluster(status: str = "ACTIVE", *, public: bool = False) -> dict[str, Any]:
    return {
        "cluster": {
            "name": CLUSTER,
            "arn": ARN,
            "endpoint": ENDPOINT,
            "status": status,
            "certificateAuthority": {"data": CA},
            "resourcesVpcConfig": {
                "endpointPrivateAccess": True,
                "endpointPublicAccess": public,
                "publicAccessCidrs": ["198.51.100.0/24"] if public else [],
            },
        }
    }


def queue_cluster(stubs: Stubs, response: dict[str, Any] | None = None) -> None:
    stubs["eks"].add_response(
        "describe_cluster", response or cluster(), expected_params={"name": CLUSTER}
    )


def queue_stack(stubs: Stubs, outputs: list[dict[str, str]] | None = None) -> None:
    stack = {
        "StackName": NETWORK_STACK,
        "CreationTime": datetime(2026, 11, 1, tzinfo=UTC),
        "StackStatus": "UPDATE_COMPLETE",
        "Outputs": [{"OutputKey": "VpcId", "OutputValue": "vpc-0123456789abcdef0"}]
        + (
            [{"OutputKey": "AdminHostInstanceId", "OutputValue": INSTANCE}]
            if outputs is None
            else outputs
        ),
    }
    stubs["cloudformation"].add_response(
        "describe_stacks", {"Stacks": [stack]}, expected_params={"StackName": NETWORK_STACK}
    )


def read(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def test_writes_the_clusters_kubeconfig_with_get_token_auth(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs)
    queue_stack(stubs)
    path = tmp_path / "kube" / "dev.yaml"
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(path))
    assert result.exit_code == 0, result.output
    assert read(path) == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": ARN, "cluster": {"certificate-authority-data": CA, "server": ENDPOINT}}
        ],
        "users": [
            {
                "name": ARN,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": [
                            "--region",
                            REGION,
                            "eks",
                            "get-token",
                            "--cluster-name",
                            CLUSTER,
                        ],
                    }
                },
            }
        ],
        "contexts": [{"name": ARN, "context": {"cluster": ARN, "user": ARN}}],
        "current-context": ARN,
        "preferences": {},
    }
    # Private to the user, like ~/.kube/config.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stubs.clients == [("sts", REGION), ("eks", REGION), ("cloudformation", REGION)]
    assert f"  export KUBECONFIG={path}" in result.stdout
    # The endpoint is private: the tunnel variant and a shell on the admin host.
    assert "The API endpoint is private" in result.stdout
    assert "  hpctl kubeconfig --env dev --local-port 8443" in result.stdout
    assert f"  aws ssm start-session --region {REGION} --target {INSTANCE}\n" in result.stdout
    assert "kubernetes_access: view" in result.stdout
    assert result.stderr == ""


def test_local_port_points_at_the_tunnel_and_prints_it(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs)
    queue_stack(stubs)
    path = tmp_path / "tunnel.yaml"
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(path), "--local-port", "9443")
    assert result.exit_code == 0, result.output
    document = read(path)
    (entry,) = document["clusters"]
    assert entry["cluster"] == {
        "certificate-authority-data": CA,
        "server": "https://127.0.0.1:9443",
        # The API server's certificate names the endpoint, not 127.0.0.1.
        "tls-server-name": HOST,
    }
    assert document["current-context"] == f"{ARN}/127.0.0.1:9443"
    assert (
        f"  aws ssm start-session --region {REGION} --target {INSTANCE} --document-name "
        "AWS-StartPortForwardingSessionToRemoteHost --parameters "
        f"host={HOST},portNumber=443,localPortNumber=9443\n"
    ) in result.stdout


def test_output_dash_writes_the_kubeconfig_to_stdout_and_guidance_to_stderr(stubs: Stubs):
    queue_cluster(stubs)
    queue_stack(stubs)
    result = hpctl("kubeconfig", "--env", "dev", "--output", "-")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["current-context"] == ARN
    assert f"--target {INSTANCE}" in result.stderr


def test_default_output_is_a_file_of_its_own_under_kube(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("HOME", str(tmp_path))
    queue_cluster(stubs)
    queue_stack(stubs)
    result = hpctl("kubeconfig", "--env", "dev")
    assert result.exit_code == 0, result.output
    assert read(tmp_path / ".kube" / "hpctl-dev.yaml")["current-context"] == ARN


def test_the_callers_profile_is_kept_for_get_token(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    config = tmp_path / "aws-config"
    config.write_text("[profile platform-admin]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "platform-admin")
    queue_cluster(stubs)
    queue_stack(stubs)
    path = tmp_path / "k.yaml"
    assert hpctl("kubeconfig", "--env", "dev", "--output", str(path)).exit_code == 0
    (user,) = read(path)["users"]
    assert user["user"]["exec"]["env"] == [{"name": "AWS_PROFILE", "value": "platform-admin"}]


def test_a_public_endpoint_is_named_with_its_cidrs(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs, cluster(public=True))
    queue_stack(stubs)
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(tmp_path / "k.yaml"))
    assert result.exit_code == 0, result.output
    assert "public for 198.51.100.0/24 and private inside the VPC" in result.stdout


def test_without_the_stack_output_the_kubeconfig_is_still_written(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs)
    stubs["cloudformation"].add_client_error(
        "describe_stacks",
        service_error_code="ValidationError",
        service_message=f"Stack with id {NETWORK_STACK} does not exist",
    )
    path = tmp_path / "k.yaml"
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(path))
    assert result.exit_code == 0, result.output
    assert read(path)["current-context"] == ARN
    assert (
        f"Admin host: cannot read stack {NETWORK_STACK} (ValidationError: Stack with id "
        f"{NETWORK_STACK} does not exist)."
    ) in result.stdout
    assert "--target <admin host instance ID>" in result.stdout


def test_a_stack_without_the_admin_host_output_says_so(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs)
    queue_stack(stubs, outputs=[])
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(tmp_path / "k.yaml"))
    assert result.exit_code == 0, result.output
    assert f"stack {NETWORK_STACK} has no AdminHostInstanceId output" in result.stdout


def test_a_disabled_admin_host_is_not_looked_up(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    data = environment_data("dev")
    data["network"]["admin_host"] = {"enabled": False}
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setattr(options, "config_dir", tmp_path)
    queue_cluster(stubs)
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(tmp_path / "k.yaml"))
    assert result.exit_code == 0, result.output
    assert stubs.clients == [("sts", REGION), ("eks", REGION)]
    assert "Admin host: network.admin_host is disabled in this environment." in result.stdout
    assert "start-session" not in result.stdout


def test_an_unknown_cluster_is_one_line(stubs: Stubs, tmp_path: Path):
    stubs["eks"].add_client_error(
        "describe_cluster",
        service_error_code="ResourceNotFoundException",
        service_message=f"No cluster found for name: {CLUSTER}.",
        http_status_code=404,
    )
    path = tmp_path / "k.yaml"
    expect_failure(
        "kubeconfig",
        "--env",
        "dev",
        "--output",
        str(path),
        code=ExitCode.FAILED,
        starts_with="hpctl kubeconfig: ResourceNotFoundException: No cluster found for name",
    )
    assert not path.exists()


def test_a_cluster_that_is_not_active_is_one_line(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs, cluster("CREATING"))
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(tmp_path / "k.yaml"))
    assert error_line(result, ExitCode.FAILED) == (
        f"hpctl kubeconfig: {CLUSTER}: the cluster is CREATING; wait until it is ACTIVE, then "
        "run this again"
    )


@pytest.mark.parametrize(
    ("args", "starts_with"),
    [
        ((), "hpctl kubeconfig: --env: missing; pass --env"),
        (("--env", "qa"), "hpctl kubeconfig: --env: unknown environment 'qa'"),
        (
            ("--env", "dev", "--local-port", "0"),
            "hpctl kubeconfig: Invalid value for '--local-port'",
        ),
    ],
)
def test_bad_options_are_one_line_and_ask_aws_nothing(stubs: Stubs, args, starts_with):
    expect_failure("kubeconfig", *args, code=ExitCode.USAGE, starts_with=starts_with)
    assert stubs.clients == []


def test_an_unwritable_output_is_one_line(stubs: Stubs, tmp_path: Path):
    queue_cluster(stubs)
    queue_stack(stubs)
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    expect_failure(
        "kubeconfig",
        "--env",
        "dev",
        "--output",
        str(blocker / "k.yaml"),
        code=ExitCode.FAILED,
        starts_with=f"hpctl kubeconfig: --output: cannot write {blocker / 'k.yaml'}:",
    )


def test_a_relay_only_admin_host_says_its_shell_has_no_kubernetes_access(
    stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    data = environment_data("dev")
    data["network"]["admin_host"]["kubernetes_access"] = "none"
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setattr(options, "config_dir", tmp_path)
    queue_cluster(stubs)
    queue_stack(stubs)
    result = hpctl("kubeconfig", "--env", "dev", "--output", str(tmp_path / "k.yaml"))
    assert result.exit_code == 0, result.output
    assert "its role has no Kubernetes access (kubernetes_access: none)" in result.stdout
