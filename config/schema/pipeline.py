"""`config/pipeline.yaml`: the delivery pipeline that deploys the environments in order."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from config.errors import FieldError
from config.model import Strict
from config.schema.base import PARTITION, REGION_PATTERN, AccountId, Email, unique

ConnectionArn = Annotated[
    str,
    StringConstraints(
        pattern=rf"^arn:{PARTITION}:(codeconnections|codestar-connections):[a-z0-9-]+:\d{{12}}:"
        r"connection/[0-9a-f-]{36}$"
    ),
]
Repository = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]


class SourceConfig(Strict):
    connection_arn: ConnectionArn = Field(
        description="A CodeConnections connection to the git host (created once, by hand: "
        "the host's owner approves it)."
    )
    repository: Repository = Field(description="owner/name on the git host.")
    branch: Annotated[str, StringConstraints(min_length=1, pattern=r"^[^\s~^:?*\[\\]+$")]


class NotifyConfig(Strict):
    emails: list[Email] = Field(default_factory=list)


OidcProviderArn = Annotated[
    str,
    StringConstraints(
        pattern=rf"^arn:{PARTITION}:iam::\d{{12}}:oidc-provider/token\.actions\.githubusercontent\.com$"
    ),
]


class PullRequestConfig(Strict):
    github_oidc_provider_arn: OidcProviderArn | None = Field(
        default=None,
        description="An account has one OIDC provider per URL: name it if it exists already, "
        "or leave it out and the pipeline stack creates it.",
    )
    github_environment_prefix: Annotated[
        str, StringConstraints(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    ] = Field(
        default="plan-",
        description="Each environment's pull-request plan runs in the GitHub environment "
        "<prefix><name> (protect it: required reviewers); only that job may assume the "
        "environment's plan role. The workflow's plan job names the same environment.",
    )


class PipelineConfig(Strict):
    account: AccountId
    region: Annotated[str, StringConstraints(pattern=REGION_PATTERN)]
    source: SourceConfig
    environments: list[str] = Field(
        min_length=1, description="Environment names (config/<name>.yaml), deployed in order."
    )
    approval_before: list[str] = Field(
        default_factory=list,
        description="Environments a person approves before they deploy (after the guard).",
    )
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    pull_requests: PullRequestConfig = Field(default_factory=PullRequestConfig)

    @field_validator("environments")
    @classmethod
    def _unique_environments(cls, value: list[str]) -> list[str]:
        unique(value, "environment")
        return value

    @model_validator(mode="after")
    def _approvals_name_environments(self) -> PipelineConfig:
        for index, name in enumerate(self.approval_before):
            if name not in self.environments:
                raise FieldError(
                    f"approval_before[{index}]",
                    f"{name!r} is not deployed by this pipeline; use one of "
                    f"{', '.join(self.environments)}",
                )
        return self
