"""digest: every image of the platform's table (config/images.py) is served by its registry
at its recorded digest; an image recorded by tag only is a problem whose fix names the
digest the registry serves for the tag.

ECR-hosted images (the account's own or AWS's registries) are asked through ECR's API
(BatchGetImage, the pull permission nodes already use); public registries through the
OCI distribution API: a HEAD of the manifest, with the anonymous bearer token the registry
asks for (its WWW-Authenticate challenge). The HTTP opener is injectable for tests.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from config.images import PinnedImage, platform_images
from hpctl.aws import AwsCallError, call
from hpctl.preflight.context import OK, PROBLEM, SKIPPED, CheckContext, Row, failure_row

DIGEST = "digest"
# What a manifest HEAD accepts: multi-platform indexes first (a digest pins the index).
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DIGEST_HEADER = "Docker-Content-Digest"
SCHEMES = ("https", "http")
TIMEOUT_S = 15
DOCKER_HUB = "registry-1.docker.io"
_ECR = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/"
    r"(?P<repository>.+)$"
)
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')

Opener = Callable[..., Any]  # urllib's OpenerDirector.open(request, timeout=...)
# How the check reaches public registries (tests put a local registry here).
open_url: Opener = urllib.request.build_opener().open


class RegistryError(Exception):
    """A registry that could not be asked (network, an unexpected status, no digest)."""


@dataclass(frozen=True)
class Location:
    """Where a repository lives: the registry host and the repository path in it."""

    registry: str
    path: str


def location(repository: str) -> Location:
    """Docker's reference rules: a first part with a '.' or ':' (or localhost) is a
    registry; otherwise Docker Hub, where one-part names live under library/."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return Location(first, rest)
    return Location(DOCKER_HUB, repository if rest else f"library/{repository}")


def _token(challenge: str, opener: Opener) -> str:
    fields = dict(_CHALLENGE.findall(challenge))
    if not challenge.lower().startswith("bearer") or "realm" not in fields:
        raise RegistryError(f"unsupported authentication challenge {challenge!r}")
    if urllib.parse.urlsplit(fields["realm"]).scheme not in SCHEMES:
        raise RegistryError(f"token realm {fields['realm']!r} is not an HTTP(S) URL")
    query = {k: v for k, v in fields.items() if k in ("service", "scope")}
    url = f"{fields['realm']}?{urllib.parse.urlencode(query)}"
    try:
        request = urllib.request.Request(url)  # noqa: S310 - scheme checked above
        with opener(request, timeout=TIMEOUT_S) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, ValueError) as error:
        raise RegistryError(f"token from {fields['realm']}: {error}") from error
    token = body.get("token") or body.get("access_token")
    if not token:
        raise RegistryError(f"{fields['realm']} returned no token")
    return str(token)


def manifest_digest(
    repository: str,
    reference: str,
    *,
    opener: Opener | None = None,
    scheme: str = "https",
) -> str | None:
    """The digest the registry serves for `reference` (a tag or a digest) of `repository`;
    None when it serves no such manifest."""
    opener = opener or open_url
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r}: use https (http for a local test registry)")
    where = location(repository)
    url = f"{scheme}://{where.registry}/v2/{where.path}/manifests/{reference}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    for attempt in range(2):
        request = urllib.request.Request(  # noqa: S310 - scheme checked above
            url, method="HEAD", headers=headers
        )
        try:
            with opener(request, timeout=TIMEOUT_S) as response:
                digest = response.headers.get(DIGEST_HEADER)
                if not digest:
                    raise RegistryError(f"{url}: no {DIGEST_HEADER} header")
                return str(digest)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code == 401 and attempt == 0:
                challenge = error.headers.get("WWW-Authenticate", "")
                headers["Authorization"] = f"Bearer {_token(challenge, opener)}"
                continue
            raise RegistryError(f"{url}: HTTP {error.code}") from error
        except urllib.error.URLError as error:
            raise RegistryError(f"{url}: {error.reason}") from error
    raise RegistryError(f"{url}: refused with the registry's own token")


def ecr_digest(context: CheckContext, image: PinnedImage) -> str | None:
    """The digest ECR serves for the image's digest (or tag); None when it serves none."""
    match = _ECR.match(image.repository)
    if match is None:
        raise ValueError(f"{image.repository} is not an ECR repository")
    image_id = {"imageDigest": image.digest} if image.digest else {"imageTag": image.tag}
    response = call(
        context.client("ecr"),
        "batch_get_image",
        registryId=match["account"],
        repositoryName=match["repository"],
        imageIds=[image_id],
        acceptedMediaTypes=list(MANIFEST_TYPES),
    )
    images = response.get("images", [])
    return str(images[0]["imageId"]["imageDigest"]) if images else None


def digest_rows(
    context: CheckContext, *, opener: Opener | None = None, scheme: str = "https"
) -> list[Row]:
    config = context.config
    rows = []
    overridden = set(config.eks.image_overrides)
    for name, image in sorted(platform_images(config.region).items()):
        if name in overridden:
            continue  # the override's own check (image) covers it
        reference = image.digest or image.tag
        try:
            if _ECR.match(image.repository):
                served = ecr_digest(context, image)
            else:
                served = manifest_digest(image.repository, reference, opener=opener, scheme=scheme)
        except AwsCallError as failure:
            rows.append(failure_row(failure, DIGEST, name))
            continue
        except RegistryError as error:
            rows.append(Row(DIGEST, name, PROBLEM, f"registry not reachable: {error}"))
            continue
        if served is None:
            rows.append(
                Row(
                    DIGEST,
                    name,
                    PROBLEM,
                    f"{image.repository} serves no {reference}",
                    f"record the digest the registry serves now for {image.tag} in "
                    "config/images.py, after reviewing that image",
                )
            )
        elif image.digest is None:
            # Not blocking: the tag is served; the fix names the digest to review and record.
            rows.append(
                Row(
                    DIGEST,
                    name,
                    SKIPPED,
                    f"{image.reference} is pinned by tag only (the registry serves {served})",
                    f"record digest {served} for {name} in config/images.py",
                )
            )
        else:
            rows.append(Row(DIGEST, name, OK, f"{image.reference} is served"))
    return rows
