"""Placeholder: replaced by the EKS implementation."""
from __future__ import annotations
from typing import Any
import aws_cdk as cdk
from constructs import Construct
from config.schema import EnvironmentConfig
from stacks.network_stack import NetworkStack
from stacks.storage_stack import StorageStack


class EksStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig,
                 network: NetworkStack, storage: StorageStack, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        cdk.CfnWaitConditionHandle(self, "Placeholder")
