"""Placeholder: replaced by the storage implementation."""
from __future__ import annotations
from typing import Any
import aws_cdk as cdk
from constructs import Construct
from config.schema import EnvironmentConfig
from stacks.network_stack import NetworkStack


class StorageStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig,
                 network: NetworkStack, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        cdk.CfnWaitConditionHandle(self, "Placeholder")
