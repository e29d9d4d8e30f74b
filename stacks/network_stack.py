"""Placeholder: replaced by the network implementation."""
from __future__ import annotations
from typing import Any
import aws_cdk as cdk
from constructs import Construct
from config.capacity import NetworkLayout
from config.schema import EnvironmentConfig


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig,
                 layout: NetworkLayout, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        cdk.CfnWaitConditionHandle(self, "Placeholder")
