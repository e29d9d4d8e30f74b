"""Placeholder: replaced by the node-dependent add-ons implementation."""
from __future__ import annotations
from typing import Any
import aws_cdk as cdk
from constructs import Construct
from config.schema import EnvironmentConfig
from stacks.eks_stack import EksStack
from stacks.hyperpod_stack import HyperPodStack
from stacks.storage_stack import StorageStack


class ClusterAddonsStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: EnvironmentConfig,
                 storage: StorageStack, eks: EksStack, hyperpod: HyperPodStack,
                 **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        cdk.CfnWaitConditionHandle(self, "Placeholder")
