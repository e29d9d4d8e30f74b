"""What CloudFormation cannot change in place: the create-only properties of a resource type
(from the provider schemas cfn-lint ships) plus the FSx ones those schemas leave out, and the
FSx values of a synthesized environment at those paths."""

from __future__ import annotations

import functools
from typing import Any

from tests.support import SynthResult

# AWS::FSx::FileSystem properties whose change replaces the file system (CloudFormation
# reference, "Update requires: Replacement"), plus FileSystemTypeVersion, treated the same
# here: a Lustre version change is an operation to plan, never a side effect of a deploy.
# The provider schema's createOnlyProperties lists only the top-level ones; a test checks
# this list still covers them.
FSX_REPLACEMENT_PATHS: tuple[tuple[str, ...], ...] = (
    ("FileSystemType",),
    ("FileSystemTypeVersion",),
    ("StorageType",),
    ("SubnetIds",),
    ("SecurityGroupIds",),
    ("KmsKeyId",),
    ("BackupId",),
    ("LustreConfiguration", "DeploymentType"),
    ("LustreConfiguration", "EfaEnabled"),
    ("LustreConfiguration", "DriveCacheType"),
    ("LustreConfiguration", "ImportPath"),
    ("LustreConfiguration", "ExportPath"),
    ("LustreConfiguration", "ImportedFileChunkSize"),
)
DRA_REPLACEMENT_PATHS: tuple[tuple[str, ...], ...] = (
    ("FileSystemId",),
    ("FileSystemPath",),
    ("DataRepositoryPath",),
    ("BatchImportMetaDataOnCreate",),
)


def dig(properties: dict[str, Any], path: tuple[str, ...]) -> object:
    value: object = properties
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


@functools.cache
def create_only_paths(type_: str) -> list[tuple[str, ...]]:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(region="us-east-1", resource_type=type_)
    paths = schema.schema.get("createOnlyProperties") or []
    return [tuple(p.removeprefix("/properties/").split("/")) for p in paths]


def replacement_paths(type_: str) -> list[tuple[str, ...]]:
    """The provider schema's create-only properties, plus the nested FSx ones it omits."""
    extra = {
        "AWS::FSx::FileSystem": FSX_REPLACEMENT_PATHS,
        "AWS::FSx::DataRepositoryAssociation": DRA_REPLACEMENT_PATHS,
    }.get(type_, ())
    return sorted(set(create_only_paths(type_)) | set(extra))


def fsx_replacement_values(result: SynthResult) -> dict[str, object]:
    """The FSx replacement-only values, references resolved to what they name."""
    storage = result.stacks["storage"]
    file_system = result.templates["storage"]["Resources"][
        result.logical_id("storage", storage.file_system.resource)
    ]
    props = file_system["Properties"]
    network = result.stacks["network"]
    subnet_by_id = {
        result.logical_id("network", s): az for az, s in network.cluster_subnets.items()
    }
    values: dict[str, object] = {".".join(path): dig(props, path) for path in FSX_REPLACEMENT_PATHS}
    (subnet,) = values["SubnetIds"]
    short, ref = result.exported(subnet)
    assert short == "network"
    values["SubnetIds"] = f"cluster subnet {subnet_by_id[ref['Ref']]}"
    (group,) = values["SecurityGroupIds"]
    efa = result.logical_id("network", network.efa_security_group)
    assert result.exported(group) == ("network", {"Fn::GetAtt": [efa, "GroupId"]})
    values["SecurityGroupIds"] = "EFA security group"
    return values
