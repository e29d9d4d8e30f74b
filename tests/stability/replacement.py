"""The FSx values of a synthesized environment at the paths CloudFormation cannot change in
place. The paths themselves, the provider schemas' create-only properties and the FSx ones
those schemas leave out, live in `hpctl.replacement` (what `hpctl guard` checks); they are
re-exported here for the stability tests."""

from __future__ import annotations

from hpctl.replacement import (
    DRA_REPLACEMENT_PATHS,
    FSX_REPLACEMENT_PATHS,
    create_only_paths,
    dig,
    replacement_paths,
)
from tests.support import SynthResult

__all__ = [
    "DRA_REPLACEMENT_PATHS",
    "FSX_REPLACEMENT_PATHS",
    "create_only_paths",
    "dig",
    "fsx_replacement_values",
    "replacement_paths",
]


def fsx_replacement_values(result: SynthResult) -> dict[str, object]:
    """The FSx replacement-only values, references resolved to what they name."""
    storage = result.stacks["storage"]
    file_system = result.templates["storage"]["Resources"][
        result.logical_id("storage", storage.lustre.resource)
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
