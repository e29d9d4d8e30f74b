"""Reaching the CloudFormation (L1) resource under an L2 construct, checked."""

from __future__ import annotations

from typing import TypeVar

from constructs import IConstruct

L1 = TypeVar("L1")


def default_resource(construct: IConstruct, kind: type[L1]) -> L1:
    """`construct`'s default child, which must be a `kind` (e.g. `ec2.CfnSubnet`)."""
    resource = construct.node.default_child
    if not isinstance(resource, kind):
        raise TypeError(
            f"{construct.node.path}: expected a {kind.__name__} default child, "
            f"found {type(resource).__name__}"
        )
    return resource
