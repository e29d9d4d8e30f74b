"""The typed schema every environment file (config/<env>.yaml) must satisfy.

One module per section (network, storage, eks, hyperpod) and one for the whole file
(environment), where the rules that span sections live. Every rule raises a message that
says what is wrong and how to fix it; `config.errors.problem_lines` words them as one line
per problem, prefixed with the field's dotted path.
"""

from config.schema.eks import SUPPORTED_KUBERNETES_VERSIONS, EksConfig
from config.schema.environment import EnvironmentConfig
from config.schema.hyperpod import (
    HyperPodConfig,
    InstanceGroupConfig,
    TieredStorageConfig,
    TrainingPlanConfig,
)
from config.schema.network import REQUIRED_ENDPOINTS, NetworkConfig
from config.schema.storage import (
    BucketsConfig,
    DataRepositoryConfig,
    FsxConfig,
    StorageConfig,
)

__all__ = [
    "REQUIRED_ENDPOINTS",
    "SUPPORTED_KUBERNETES_VERSIONS",
    "BucketsConfig",
    "DataRepositoryConfig",
    "EksConfig",
    "EnvironmentConfig",
    "FsxConfig",
    "HyperPodConfig",
    "InstanceGroupConfig",
    "NetworkConfig",
    "StorageConfig",
    "TieredStorageConfig",
    "TrainingPlanConfig",
]
