"""What CloudFormation cannot change in place, and whether a template change touches it.

A resource is replaced (a new physical resource, the old one deleted or orphaned) when one of
its create-only properties changes. Those come from the CloudFormation provider schemas that
cfn-lint ships (`createOnlyProperties`), never from a hand-written list, plus the few nested
properties the schemas leave out (`EXTRA_REPLACEMENT_PATHS`).

A property path is a tuple of segments:

- a property name (`("VpcConfig",)`, `("LustreConfiguration", "DeploymentType")`);
- `*`, the schemas' wildcard: each element of a list, by position;
- `[Key]`: each element of a list of objects, matched by its `Key` field (instance groups by
  `InstanceGroupName`), so that a group added in front of the others does not read as every
  group changing.

`changed_properties` compares two property dicts at those paths: a value "changed" when its
JSON differs, intrinsic functions included (`{"Ref": ...}`, `Fn::ImportValue` names). Order
counts: a list of subnets that is only reordered is a change (what CloudFormation compares is
the template value; a false alarm is cheaper than a missed replacement). A property absent on
both sides is no change; absent on one side is. Under a wildcard only elements present on both
sides are compared: adding or removing a list element is an update of the parent property,
not a replacement.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

PropertyPath = tuple[str, ...]

# The schema's array wildcard, and `[Key]`: list elements matched by their Key field.
EACH = "*"
_KEYED = re.compile(r"\[(?P<key>[A-Za-z0-9]+)\]")

# The provider schemas are regional; the resource types this project uses have the same
# create-only properties everywhere, so one Region's schemas answer for all.
SCHEMA_REGION = "us-east-1"

# AWS::FSx::FileSystem properties whose change replaces the file system (CloudFormation
# reference, "Update requires: Replacement"), plus FileSystemTypeVersion, treated the same
# here: a Lustre version change is an operation to plan, never a side effect of a deploy.
# The provider schema's createOnlyProperties lists only the top-level ones; a test checks
# this list still covers them.
FSX_REPLACEMENT_PATHS: tuple[PropertyPath, ...] = (
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
DRA_REPLACEMENT_PATHS: tuple[PropertyPath, ...] = (
    ("FileSystemId",),
    ("FileSystemPath",),
    ("DataRepositoryPath",),
    ("BatchImportMetaDataOnCreate",),
)
# A HyperPod instance group's own subnets (OverrideVpcConfig, which a training plan sets to
# its AZ's subnet) are fixed when the group is created, like the cluster's VpcConfig: adding,
# changing or removing them on an existing group is not an in-place update (the schema lists
# only the cluster-level VpcConfig). Groups are matched by name; a new group is free to have
# one.
CLUSTER_REPLACEMENT_PATHS: tuple[PropertyPath, ...] = (
    ("InstanceGroups", "[InstanceGroupName]", "OverrideVpcConfig"),
)
# Create-only properties the provider schemas omit, per resource type.
EXTRA_REPLACEMENT_PATHS: dict[str, tuple[PropertyPath, ...]] = {
    "AWS::FSx::FileSystem": FSX_REPLACEMENT_PATHS,
    "AWS::FSx::DataRepositoryAssociation": DRA_REPLACEMENT_PATHS,
    "AWS::SageMaker::Cluster": CLUSTER_REPLACEMENT_PATHS,
}


class UnknownResourceTypeError(KeyError):
    """cfn-lint ships no provider schema for the type."""


class _Missing:
    """A property that is not there (distinct from an explicit null)."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


def dig(properties: dict[str, Any], path: PropertyPath) -> object:
    """The value at a plain path (property names only), None where it is absent."""
    value: object = properties
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


@functools.cache
def create_only_paths(type_: str) -> list[PropertyPath]:
    """`createOnlyProperties` of the type's provider schema, as paths (`*` kept)."""
    # cfn-lint ships no type information.
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER  # type: ignore[import-untyped]
    from cfnlint.schema._exceptions import ResourceNotFoundError  # type: ignore[import-untyped]

    try:
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema(
            region=SCHEMA_REGION, resource_type=type_
        )
    except ResourceNotFoundError as error:
        raise UnknownResourceTypeError(type_) from error
    paths: list[str] = schema.schema.get("createOnlyProperties") or []
    return [tuple(p.removeprefix("/properties/").split("/")) for p in paths]


def replacement_paths(type_: str) -> list[PropertyPath]:
    """The provider schema's create-only properties, plus those it omits for the type."""
    extra = EXTRA_REPLACEMENT_PATHS.get(type_, ())
    return sorted(set(create_only_paths(type_)) | set(extra))


def is_intrinsic(value: object) -> bool:
    """`{"Ref": ...}`, `{"Fn::If": ...}`, ...: a value CloudFormation computes at deploy time."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    (key,) = value
    return key == "Ref" or str(key).startswith("Fn::")


def _label(shown: str, segment: str) -> str:
    return f"{shown}.{segment}" if shown else segment


def _keyed(items: list[Any], key: str) -> dict[str, Any]:
    """List elements by their `key` field; elements without one keep their position."""
    found: dict[str, Any] = {}
    for index, item in enumerate(items):
        name = item.get(key) if isinstance(item, dict) else None
        found[name if isinstance(name, str) else f"#{index}"] = item
    return found


def _changes(before: object, after: object, path: PropertyPath, shown: str) -> Iterator[str]:
    if not path or is_intrinsic(before) or is_intrinsic(after):
        # The end of the path, or a value computed at deploy time (an Fn::If choosing the
        # whole object): compare what is there.
        if before != after:
            yield shown
        return
    head, rest = path[0], path[1:]
    keyed = _KEYED.fullmatch(head)
    if head == EACH or keyed:
        # A list that is not there has no elements to compare.
        old_items = [] if before is MISSING else before
        new_items = [] if after is MISSING else after
        if not (isinstance(old_items, list) and isinstance(new_items, list)):
            if before != after:
                yield shown
            return
        if keyed:
            old, new = _keyed(old_items, keyed["key"]), _keyed(new_items, keyed["key"])
        else:
            old = {str(i): v for i, v in enumerate(old_items)}
            new = {str(i): v for i, v in enumerate(new_items)}
        for name, value in old.items():
            if name in new:
                yield from _changes(value, new[name], rest, f"{shown}[{name}]")
        return
    old_value = before.get(head, MISSING) if isinstance(before, dict) else MISSING
    new_value = after.get(head, MISSING) if isinstance(after, dict) else MISSING
    yield from _changes(old_value, new_value, rest, _label(shown, head))


def changed_properties(
    paths: list[PropertyPath], before: dict[str, Any], after: dict[str, Any]
) -> list[str]:
    """Each concrete property (`VpcConfig`, `InstanceGroups[system].OverrideVpcConfig`) at
    `paths` whose value differs between the two property dicts, in path order, once."""
    found: dict[str, None] = {}
    for path in paths:
        for shown in _changes(before, after, path, ""):
            found.setdefault(shown, None)
    return list(found)


def values_at(properties: dict[str, Any], path: PropertyPath) -> Iterator[tuple[str, object]]:
    """(concrete property, value) for every place `path` reaches in `properties`."""

    def walk(value: object, rest: PropertyPath, shown: str) -> Iterator[tuple[str, object]]:
        if value is MISSING:
            return
        if not rest or is_intrinsic(value):
            yield shown, value
            return
        head, tail = rest[0], rest[1:]
        keyed = _KEYED.fullmatch(head)
        if head == EACH or keyed:
            if not isinstance(value, list):
                yield shown, value
                return
            items = (
                _keyed(value, keyed["key"]) if keyed else {str(i): v for i, v in enumerate(value)}
            )
            for name, item in items.items():
                yield from walk(item, tail, f"{shown}[{name}]")
            return
        child = value.get(head, MISSING) if isinstance(value, dict) else MISSING
        yield from walk(child, tail, _label(shown, head))

    yield from walk(properties, path, "")


_SUB_NAME = re.compile(r"\$\{(?!!)([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


def references(value: object) -> set[str]:
    """Logical IDs `value` points at through Ref, Fn::GetAtt and Fn::Sub: when one of them
    is replaced, the value changes at deploy time although the template text does not."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= references(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key == "Ref" and isinstance(item, str) and not item.startswith("AWS::"):
                found.add(item)
            elif key == "Fn::GetAtt":
                target = item[0] if isinstance(item, list) and item else item
                if isinstance(target, str):
                    found.add(target.split(".", 1)[0])
            elif key == "Fn::Sub":
                text = item[0] if isinstance(item, list) and item else item
                if isinstance(text, str):
                    found |= set(_SUB_NAME.findall(text))
                if isinstance(item, list) and len(item) > 1:
                    found |= references(item[1])
            else:
                found |= references(item)
    return found
