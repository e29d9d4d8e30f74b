"""The one mapping from an environment's `retain_stateful` to a removal policy."""

from __future__ import annotations

import aws_cdk as cdk


def stateful_removal_policy(retain_stateful: bool) -> cdk.RemovalPolicy:
    """RETAIN where the environment keeps stateful resources (required in prod), else DESTROY."""
    return cdk.RemovalPolicy.RETAIN if retain_stateful else cdk.RemovalPolicy.DESTROY
