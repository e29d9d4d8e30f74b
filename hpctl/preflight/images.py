"""image: each eks.image_overrides image in this account's ECR in the environment's Region
exists (repository and tag or digest) and is not archived."""

from __future__ import annotations

import re

from hpctl.aws import AwsCallError, call
from hpctl.preflight.context import OK, PROBLEM, SKIPPED, CheckContext, Row, failure_row

# <account>.dkr.ecr.<region>.amazonaws.com[.cn]/<repository>(:<tag>|@<digest>)
_ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/"
    r"(?P<repository>[^:@]+)(:(?P<tag>[^:@/]+)|@(?P<digest>sha256:[0-9a-f]{64}))$"
)

IMAGE = "image"


def image_rows(context: CheckContext) -> list[Row]:
    config = context.config
    overrides = config.eks.image_overrides
    if not overrides:
        return [Row(IMAGE, "-", SKIPPED, "no eks.image_overrides")]
    rows = []
    for component, image in sorted(overrides.items()):
        subject = component
        match = _ECR_IMAGE.match(image)
        if match is None or (match["account"], match["region"]) != (config.account, config.region):
            rows.append(
                Row(
                    IMAGE,
                    subject,
                    SKIPPED,
                    f"{image} is not in the ECR of {config.account} in {config.region}; not checked",
                )
            )
            continue
        repository = match["repository"]
        reference = match["tag"] or match["digest"]
        image_id = {"imageTag": match["tag"]} if match["tag"] else {"imageDigest": match["digest"]}
        try:
            found = call(
                context.client("ecr"),
                "describe_images",
                repositoryName=repository,
                imageIds=[image_id],
            )["imageDetails"]
        except AwsCallError as failure:
            if failure.code == "RepositoryNotFoundException":
                rows.append(
                    Row(
                        IMAGE,
                        subject,
                        PROBLEM,
                        f"repository {repository} does not exist in {config.account} "
                        f"({config.region})",
                        f"create it and push {repository}:{reference}, or correct "
                        f"eks.image_overrides.{component}",
                    )
                )
                continue
            if failure.code != "ImageNotFoundException":
                rows.append(failure_row(failure, IMAGE, subject))
                continue
            found = []  # the image is not in the repository: as if none were listed
        archived = [d for d in found if d.get("imageStatus") == "ARCHIVED"]
        if not found:
            rows.append(
                Row(
                    IMAGE,
                    subject,
                    PROBLEM,
                    f"{reference} is not in repository {repository}",
                    f"push {repository}:{reference} or correct eks.image_overrides.{component}",
                )
            )
        elif archived:
            rows.append(
                Row(
                    IMAGE,
                    subject,
                    PROBLEM,
                    f"{reference} in {repository} is archived: nodes cannot pull it",
                    "restore the image (ECR UpdateImageStorageClass to STANDARD)",
                )
            )
        else:
            digest = str(found[0].get("imageDigest", ""))
            rows.append(Row(IMAGE, subject, OK, f"{image} exists ({digest[:19] or 'no digest'})"))
    return rows
