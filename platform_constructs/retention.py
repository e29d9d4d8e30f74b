"""The one mapping from an environment's `retain_stateful` to a removal policy, and from a
retention in days to CDK's enum."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_logs as logs

# logs.RetentionDays by days (its members carry names, not numbers): every period CloudWatch
# Logs accepts (config.regions.LOG_RETENTION_DAYS; a test keeps the two equal).
RETENTION_DAYS: dict[int, logs.RetentionDays] = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def stateful_removal_policy(retain_stateful: bool) -> cdk.RemovalPolicy:
    """RETAIN where the environment keeps stateful resources (required in prod), else DESTROY."""
    return cdk.RemovalPolicy.RETAIN if retain_stateful else cdk.RemovalPolicy.DESTROY
