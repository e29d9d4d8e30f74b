"""What every preflight check shares: the row it reports, the context it checks (the
environment's config, the account's clients, the time) and how an AWS failure becomes a row."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from config.schema import EnvironmentConfig
from hpctl import aws
from hpctl.aws import (
    ACCESS_DENIED_CODES,
    CREDENTIAL_CODES,
    THROTTLING_CODES,
    AwsCallError,
    call,
    paginate,
)
from hpctl.options import utc_now

Status = Literal["ok", "problem", "warning", "skipped"]
OK: Status = "ok"
PROBLEM: Status = "problem"
# Deploying works, but something outside the platform will notice: reported, exit 0.
WARNING: Status = "warning"
SKIPPED: Status = "skipped"
STATUSES: tuple[Status, ...] = (OK, PROBLEM, WARNING, SKIPPED)

# The clock plan end times are compared with; tests may replace it.
clock: Callable[[], datetime] = utc_now


@dataclass(frozen=True)
class Row:
    """One line of the report."""

    check: str
    subject: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def failure_row(failure: AwsCallError, check: str, subject: str) -> Row:
    """The row of a check that could not be made."""
    if failure.code in ACCESS_DENIED_CODES:
        return Row(
            check,
            subject,
            PROBLEM,
            f"{failure.code}: needs {failure.action}",
            f"allow {failure.action} to the identity running preflight",
        )
    if failure.code in THROTTLING_CODES:
        return Row(
            check,
            subject,
            PROBLEM,
            f"{failure.code}: {failure.action} was still throttled after retries",
            "run preflight again in a few minutes",
        )
    fix = (
        "configure current AWS credentials for the environment's account (e.g. AWS_PROFILE)"
        if failure.code in CREDENTIAL_CODES
        else ""
    )
    return Row(
        check, subject, PROBLEM, f"{failure.code}: {failure.message} ({failure.action})", fix
    )


@dataclass
class CheckContext:
    """What the checks look at: the environment's config, one client per service (from the
    command's checked connection) and the quota look-ups shared by the quota rows."""

    config: EnvironmentConfig
    connection: aws.Connection
    now: datetime = field(default_factory=lambda: clock())
    _clients: dict[str, Any] = field(default_factory=dict)
    _quota_lists: dict[tuple[str, str], list[dict[str, Any]] | AwsCallError] = field(
        default_factory=dict
    )

    @property
    def region(self) -> str:
        return self.config.region

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.connection.client(service)
        return self._clients[service]

    def quota_by_code(self, service_code: str, quota_code: str) -> dict[str, Any] | None:
        """The applied quota, else the AWS default (quotas never raised have no applied
        value for some services), else None."""
        quotas = self.client("service-quotas")
        for method in ("get_service_quota", "get_aws_default_service_quota"):
            try:
                quota: dict[str, Any] = call(
                    quotas, method, ServiceCode=service_code, QuotaCode=quota_code
                )["Quota"]
            except AwsCallError as failure:
                if failure.code == "NoSuchResourceException":
                    continue
                raise
            return quota
        return None

    def quota_by_name(self, service_code: str, name: str) -> dict[str, Any] | None:
        """The quota of `service_code` named `name` (case-insensitive), applied values first,
        then the AWS defaults; None when neither lists it."""
        wanted = name.casefold()
        for method in ("list_service_quotas", "list_aws_default_service_quotas"):
            for quota in self._quota_list(method, service_code):
                if str(quota.get("QuotaName", "")).strip().casefold() == wanted:
                    return quota
        return None

    def _quota_list(self, method: str, service_code: str) -> list[dict[str, Any]]:
        key = (method, service_code)
        if key not in self._quota_lists:
            try:
                found: list[dict[str, Any]] | AwsCallError = paginate(
                    self.client("service-quotas"), method, "Quotas", ServiceCode=service_code
                )
            except AwsCallError as failure:
                found = failure
            self._quota_lists[key] = found
        cached = self._quota_lists[key]
        if isinstance(cached, AwsCallError):
            raise cached
        return cached


# ------------------------------------------------------------------ formatting helpers


def day(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d") if value else "unknown"


def minute(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def joined(items: Iterable[str]) -> str:
    return ", ".join(sorted(set(items)))
