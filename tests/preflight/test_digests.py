"""The preflight digest check (beside tests/cli, whose fixtures refuse sockets: this one
serves a registry on localhost): public registries through a local OCI registry (the bearer
token challenge included), ECR through botocore's Stubber on a real client (the API model
checks each request), and the rows each answer becomes."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from config.images import PinnedImage
from hpctl.preflight import digests
from hpctl.preflight.digests import (
    DOCKER_HUB,
    MANIFEST_TYPES,
    Location,
    RegistryError,
    digest_rows,
    location,
    manifest_digest,
)

SERVED = "sha256:" + "1" * 64
GONE = "sha256:" + "2" * 64
TOKEN = "anonymous-pull-token"
ECR_REPOSITORY = "111111111111.dkr.ecr.us-east-1.amazonaws.com/eks/plugin"


class Registry(BaseHTTPRequestHandler):
    """An OCI registry that serves `app:1.0` (digest SERVED) to bearer-token holders."""

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:  # the token endpoint
        assert self.path.startswith("/token?"), self.path
        assert "scope=repository%3Aorg%2Fapp%3Apull" in self.path
        body = json.dumps({"token": TOKEN}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            host = self.headers["Host"]
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate",
                f'Bearer realm="http://{host}/token",service="registry",'
                'scope="repository:org/app:pull"',
            )
            self.end_headers()
            return
        assert MANIFEST_TYPES[0] in self.headers["Accept"]
        reference = self.path.rsplit("/", 1)[1]
        if self.path.startswith("/v2/org/app/manifests/") and reference in ("1.0", SERVED):
            self.send_response(200)
            self.send_header("Docker-Content-Digest", SERVED)
        else:
            self.send_response(404)
        self.end_headers()


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    # A short poll: shutdown() waits for the loop's next poll, half a second by default.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_tag_resolves_to_its_digest_through_the_token_challenge(registry: str):
    assert manifest_digest(f"{registry}/org/app", "1.0", scheme="http") == SERVED


def test_a_digest_is_served_or_not(registry: str):
    assert manifest_digest(f"{registry}/org/app", SERVED, scheme="http") == SERVED
    assert manifest_digest(f"{registry}/org/app", GONE, scheme="http") is None


def test_an_unreachable_registry_is_a_registry_error():
    with pytest.raises(RegistryError, match=re.escape("127.0.0.1:9/v2/org/app/manifests/1.0")):
        manifest_digest("127.0.0.1:9/org/app", "1.0", scheme="http")


def test_only_http_schemes():
    with pytest.raises(ValueError, match="use https"):
        manifest_digest("nvcr.io/nvidia/x", "1", scheme="file")


@pytest.mark.parametrize(
    ("repository", "expected"),
    [
        ("pytorch/pytorch", Location(DOCKER_HUB, "pytorch/pytorch")),
        ("busybox", Location(DOCKER_HUB, "library/busybox")),
        (
            "public.ecr.aws/docker/library/busybox",
            Location("public.ecr.aws", "docker/library/busybox"),
        ),
        ("nvcr.io/nvidia/k8s-device-plugin", Location("nvcr.io", "nvidia/k8s-device-plugin")),
        ("localhost:5000/app", Location("localhost:5000", "app")),
    ],
)
def test_registry_and_path_follow_dockers_reference_rules(repository: str, expected: Location):
    assert location(repository) == expected


# --------------------------------------------------------------------------- rows


@dataclass
class Context:
    config: Any
    ecr: Any

    def client(self, service: str) -> Any:
        assert service == "ecr"
        return self.ecr


@pytest.fixture
def ecr() -> Iterator[Stubber]:
    client = boto3.client(
        "ecr", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def _rows(
    monkeypatch: pytest.MonkeyPatch, stubber: Stubber, table: dict[str, PinnedImage]
) -> dict[str, Any]:
    monkeypatch.setattr(digests, "platform_images", lambda region: table)
    config = SimpleNamespace(region="us-east-1", eks=SimpleNamespace(image_overrides={}))
    rows = digest_rows(Context(config, stubber.client), scheme="http")  # type: ignore[arg-type]
    return {r.subject: r for r in rows}


def _ecr_params(image_id: dict[str, str]) -> dict[str, Any]:
    return {
        "registryId": "111111111111",
        "repositoryName": "eks/plugin",
        "imageIds": [image_id],
        "acceptedMediaTypes": list(MANIFEST_TYPES),
    }


def test_rows_for_served_tag_only_and_missing_images(
    monkeypatch: pytest.MonkeyPatch, ecr: Stubber, registry: str
):
    ecr.add_response(
        "batch_get_image",
        {"images": [{"imageId": {"imageDigest": SERVED}}], "failures": []},
        expected_params=_ecr_params({"imageDigest": SERVED}),
    )
    rows = _rows(
        monkeypatch,
        ecr,
        {
            "ecr-pinned": PinnedImage(ECR_REPOSITORY, "v1", SERVED),
            "pinned": PinnedImage(f"{registry}/org/app", "1.0", SERVED),
            "tag-only": PinnedImage(f"{registry}/org/app", "1.0"),
            "gone": PinnedImage(f"{registry}/org/app", "1.0", GONE),
        },
    )
    assert (rows["ecr-pinned"].status, rows["pinned"].status) == ("ok", "ok")
    assert rows["tag-only"].status == "skipped"
    assert rows["tag-only"].fix == f"record digest {SERVED} for tag-only in config/images.py"
    assert rows["gone"].status == "problem"
    assert rows["gone"].detail == f"{registry}/org/app serves no {GONE}"


def test_ecr_image_not_found_and_access_denied(monkeypatch: pytest.MonkeyPatch, ecr: Stubber):
    ecr.add_response(
        "batch_get_image",
        {
            "images": [],
            "failures": [{"imageId": {"imageTag": "v1"}, "failureCode": "ImageNotFound"}],
        },
        expected_params=_ecr_params({"imageTag": "v1"}),
    )
    ecr.add_client_error(
        "batch_get_image",
        "AccessDeniedException",
        "no",
        expected_params=_ecr_params({"imageTag": "v2"}),
    )
    rows = _rows(
        monkeypatch,
        ecr,
        {
            "a-missing": PinnedImage(ECR_REPOSITORY, "v1"),
            "b-denied": PinnedImage(ECR_REPOSITORY, "v2"),
        },
    )
    assert rows["a-missing"].status == "problem"
    assert rows["b-denied"].status == "problem"
    assert "ecr:BatchGetImage" in rows["b-denied"].detail


def test_overridden_components_are_left_to_the_image_check(
    monkeypatch: pytest.MonkeyPatch, ecr: Stubber
):
    monkeypatch.setattr(
        digests, "platform_images", lambda region: {"x": PinnedImage(ECR_REPOSITORY, "v1")}
    )
    config = SimpleNamespace(region="us-east-1", eks=SimpleNamespace(image_overrides={"x": "y"}))
    assert digest_rows(Context(config, ecr.client)) == []  # type: ignore[arg-type]
