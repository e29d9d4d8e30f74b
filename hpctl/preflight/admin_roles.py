"""admin-role: each eks.admin_role_arns role of this account exists with exactly that ARN."""

from __future__ import annotations

import re

from hpctl.aws import AwsCallError, call
from hpctl.preflight.context import OK, PROBLEM, SKIPPED, CheckContext, Row, failure_row

_ROLE_ARN = re.compile(r"^arn:[a-z-]+:iam::(?P<account>\d{12}):role/(?P<path>.*/)?(?P<name>[^/]+)$")

ADMIN_ROLE = "admin-role"


def admin_role_rows(context: CheckContext) -> list[Row]:
    config = context.config
    rows = []
    for arn in config.eks.admin_role_arns:
        match = _ROLE_ARN.match(arn)
        if match is None:  # the config schema only accepts role ARNs
            rows.append(Row(ADMIN_ROLE, arn, PROBLEM, "not an IAM role ARN"))
            continue
        if match["account"] != config.account:
            rows.append(
                Row(
                    ADMIN_ROLE,
                    arn,
                    SKIPPED,
                    f"role of account {match['account']}, not {config.account}: not readable here",
                )
            )
            continue
        name = match["name"]
        try:
            role = call(context.client("iam"), "get_role", RoleName=name)["Role"]
        except AwsCallError as failure:
            if failure.code == "NoSuchEntity":
                rows.append(
                    Row(
                        ADMIN_ROLE,
                        arn,
                        PROBLEM,
                        f"no role named {name} in account {config.account}",
                        "create the role or remove it from eks.admin_role_arns",
                    )
                )
            else:
                rows.append(failure_row(failure, ADMIN_ROLE, arn))
            continue
        if role["Arn"] != arn:
            rows.append(
                Row(
                    ADMIN_ROLE,
                    arn,
                    PROBLEM,
                    f"the role named {name} is {role['Arn']} (path {role.get('Path', '/')})",
                    f"use {role['Arn']} in eks.admin_role_arns",
                )
            )
        else:
            rows.append(Row(ADMIN_ROLE, arn, OK, f"exists ({role.get('RoleId', 'no id')})"))
    return rows
