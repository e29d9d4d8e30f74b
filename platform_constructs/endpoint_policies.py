"""The VPC endpoints' policies: what traffic through the S3 gateway endpoint and the ECR
interface endpoints may reach (platform_constructs/network.py attaches them). Without a
policy an endpoint reaches every account's buckets and registries; with these, nothing leaves
the closed network for another account but the reads nodes need of AWS-owned buckets and
registries."""

from __future__ import annotations

from aws_cdk import aws_iam as iam

ECR_ENDPOINTS = ("ecr.api", "ecr.dkr")
# ECR's pulls (and the token every ECR call needs): open to every registry, since add-on and
# HyperPod images live in AWS's accounts. Anything else (pushes, deletes, policies) only on
# this account's repositories: no image leaves the closed network for another account.
ECR_PULL_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetAuthorizationToken",
    "ecr:GetDownloadUrlForLayer",
)


def s3_endpoint_statements(partition: str, region: str, account: str) -> list[iam.PolicyStatement]:
    """The S3 gateway endpoint's policy: any S3 action on this account's buckets; reads of
    the AWS-owned buckets nodes use: ECR's image layers ("Amazon ECR interface VPC
    endpoints", the starport layer bucket), Amazon Linux package repositories (AL2023 and
    AL2 user guides, "S3 gateway endpoint"), and the SSM agent's buckets ("Step 6: Create
    a VPC endpoint policy", Systems Manager User Guide)."""

    def objects(*buckets: str) -> list[str]:
        return [f"arn:{partition}:s3:::{bucket}/*" for bucket in buckets]

    anyone = [iam.AnyPrincipal()]
    return [
        iam.PolicyStatement(
            sid="ThisAccountsBuckets",
            principals=anyone,
            actions=["s3:*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:ResourceAccount": account}},
        ),
        iam.PolicyStatement(
            sid="EcrImageLayers",
            principals=anyone,
            actions=["s3:GetObject"],
            resources=objects(f"prod-{region}-starport-layer-bucket"),
        ),
        iam.PolicyStatement(
            sid="AmazonLinuxRepositories",
            principals=anyone,
            actions=["s3:GetObject"],
            resources=objects(f"al2023-repos-{region}-de612dc2", f"amazonlinux-2-repos-{region}"),
        ),
        iam.PolicyStatement(
            sid="SsmAgent",
            principals=anyone,
            actions=["s3:GetObject"],
            resources=objects(
                f"aws-ssm-{region}",
                f"amazon-ssm-{region}",
                f"amazon-ssm-packages-{region}",
                f"{region}-birdwatcher-prod",
                f"aws-ssm-document-attachments-{region}",
                f"patch-baseline-snapshot-{region}",
            ),
        ),
    ]


def ecr_endpoint_statements(account: str) -> list[iam.PolicyStatement]:
    anyone = [iam.AnyPrincipal()]
    return [
        iam.PolicyStatement(
            sid="PullFromAnyRegistry",
            principals=anyone,
            actions=list(ECR_PULL_ACTIONS),
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="EverythingElseInThisAccount",
            principals=anyone,
            actions=["ecr:*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:ResourceAccount": account}},
        ),
    ]
