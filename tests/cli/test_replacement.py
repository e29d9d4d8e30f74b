"""hpctl/replacement.py on its own: which property changes replace a resource, intrinsic
values, multi-segment and keyed paths, and the references that carry a replacement on.

tests/cli/test_guard.py runs the same code through `hpctl guard`; these pin each rule so a
wrong version of it fails here (make mutation runs this file against the module).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctl import guard
from hpctl.replacement import (
    CLUSTER_REPLACEMENT_PATHS,
    FSX_REPLACEMENT_PATHS,
    MISSING,
    UnknownResourceTypeError,
    changed_properties,
    create_only_paths,
    dig,
    is_intrinsic,
    references,
    replacement_paths,
    values_at,
)

# --------------------------------------------------------------------------- intrinsics


@pytest.mark.parametrize(
    "value",
    [
        {"Ref": "Vpc"},
        {"Fn::If": ["Prod", "a", "b"]},
        {"Fn::ImportValue": "export"},
        {"Fn::GetAtt": ["Key", "Arn"]},
    ],
)
def test_intrinsics_are_single_key_ref_or_fn(value: object) -> None:
    assert is_intrinsic(value) is True


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"Ref": "Vpc", "Extra": 1},
        {"Subnets": ["a"]},
        {"Condition": "Prod"},
        {"Fn:If": []},
        {"Refs": "Vpc"},
        ["Ref"],
        "Ref",
        None,
    ],
)
def test_other_values_are_not_intrinsic(value: object) -> None:
    assert is_intrinsic(value) is False


def test_a_nested_property_under_fn_if_is_compared_whole() -> None:
    """An Fn::If choosing the whole LustreConfiguration hides DeploymentType one level down:
    the guard must compare the conditional value itself, not look inside it for keys."""
    path = [("LustreConfiguration", "DeploymentType")]

    def conditional(deployment: str) -> dict[str, Any]:
        choice = {"DeploymentType": deployment, "PerUnitStorageThroughput": 500}
        return {"LustreConfiguration": {"Fn::If": ["Prod", choice, {"Ref": "AWS::NoValue"}]}}

    before = conditional("PERSISTENT_2")
    assert changed_properties(path, before, conditional("SCRATCH_2")) == ["LustreConfiguration"]
    assert changed_properties(path, before, conditional("PERSISTENT_2")) == []
    # From a plain value to a computed one: also a change of the whole property.
    plain = {"LustreConfiguration": {"DeploymentType": "PERSISTENT_2"}}
    assert changed_properties(path, plain, before) == ["LustreConfiguration"]
    assert changed_properties(path, before, plain) == ["LustreConfiguration"]


def test_a_vpc_config_under_fn_if_whose_subnets_change_is_reported() -> None:
    path = [("VpcConfig", "Subnets")]

    def cluster(subnets: list[str]) -> dict[str, Any]:
        vpc = {"Subnets": subnets, "SecurityGroupIds": ["sg-1"]}
        return {"VpcConfig": {"Fn::If": ["UseVpc", vpc, {"Ref": "AWS::NoValue"}]}}

    assert changed_properties(path, cluster(["a"]), cluster(["b"])) == ["VpcConfig"]
    assert changed_properties(path, cluster(["a"]), cluster(["a"])) == []


# --------------------------------------------------------------------------- paths


def test_plain_paths_compare_the_value_at_the_end() -> None:
    path = [("LustreConfiguration", "DeploymentType")]
    before = {"LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "Throughput": 500}}
    throughput = {"LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "Throughput": 1000}}
    assert changed_properties(path, before, throughput) == []
    scratch = {"LustreConfiguration": {"DeploymentType": "SCRATCH_2", "Throughput": 500}}
    assert changed_properties(path, before, scratch) == ["LustreConfiguration.DeploymentType"]


def test_absent_on_both_sides_is_no_change_and_on_one_side_is() -> None:
    path = [("KmsKeyId",)]
    assert changed_properties(path, {}, {}) == []
    assert changed_properties(path, {}, {"KmsKeyId": "k"}) == ["KmsKeyId"]
    assert changed_properties(path, {"KmsKeyId": "k"}, {}) == ["KmsKeyId"]
    # An explicit null differs from an absent property.
    assert changed_properties(path, {}, {"KmsKeyId": None}) == ["KmsKeyId"]
    nested = [("LustreConfiguration", "DeploymentType")]
    assert changed_properties(nested, {"LustreConfiguration": {"DeploymentType": "A"}}, {}) == [
        "LustreConfiguration.DeploymentType"
    ]


def test_a_reordered_list_is_a_change() -> None:
    assert changed_properties(
        [("SubnetIds",)], {"SubnetIds": ["a", "b"]}, {"SubnetIds": ["b", "a"]}
    ) == ["SubnetIds"]


def test_a_wildcard_over_a_value_that_is_not_a_list_compares_it_whole() -> None:
    path = [("Rules", "*", "Name")]
    assert changed_properties(path, {"Rules": "a"}, {"Rules": "b"}) == ["Rules"]
    assert changed_properties(path, {"Rules": "a"}, {"Rules": "a"}) == []
    assert changed_properties(path, {"Rules": [{"Name": "a"}]}, {"Rules": "a"}) == ["Rules"]
    # Under a keyed segment too.
    keyed = [("Groups", "[Name]", "Subnets")]
    assert changed_properties(keyed, {"Groups": "a"}, {"Groups": "b"}) == ["Groups"]


def test_a_list_that_appears_or_disappears_has_no_element_to_compare() -> None:
    path = [("Rules", "*", "Name")]
    assert changed_properties(path, {"Rules": [{"Name": "a"}]}, {}) == []
    assert changed_properties(path, {}, {"Rules": [{"Name": "a"}]}) == []


def test_wildcard_elements_are_compared_position_by_position() -> None:
    path = [("Rules", "*", "Name")]
    before = {"Rules": [{"Name": "a"}, {"Name": "b"}]}
    assert changed_properties(path, before, {"Rules": [{"Name": "x"}, {"Name": "b"}]}) == [
        "Rules[0].Name"
    ]


def test_keyed_elements_are_matched_by_key_and_the_rest_by_position() -> None:
    path = [("Groups", "[Name]", "Subnets")]
    before = {"Groups": [{"Name": "x", "Subnets": ["a"]}, {"Subnets": ["p"]}, "loose"]}
    after = {"Groups": [{"Name": "new"}, {"Subnets": ["q"]}, {"Name": "x", "Subnets": ["b"]}]}
    # x moved and changed; #1 (no name) is compared with the element now at position 1, and
    # #2 has no counterpart.
    assert changed_properties(path, before, after) == ["Groups[x].Subnets", "Groups[#1].Subnets"]


def test_every_changed_property_is_named_once_in_path_order() -> None:
    paths = [("B",), ("A",), ("B",)]
    assert changed_properties(paths, {"A": 1, "B": 1}, {"A": 2, "B": 2}) == ["B", "A"]


def test_instance_group_subnets_are_compared_by_group_name() -> None:
    path = list(CLUSTER_REPLACEMENT_PATHS)

    def groups(*specs: tuple[str, list[str]]) -> dict[str, Any]:
        return {
            "InstanceGroups": [
                {"InstanceGroupName": name, "OverrideVpcConfig": {"Subnets": subnets}}
                for name, subnets in specs
            ]
        }

    before = groups(("gpu", ["a"]), ("cpu", ["b"]))
    assert (
        changed_properties(path, before, groups(("new", ["c"]), *[("gpu", ["a"]), ("cpu", ["b"])]))
        == []
    )
    assert changed_properties(path, before, groups(("gpu", ["a"]), ("cpu", ["c"]))) == [
        "InstanceGroups[cpu].OverrideVpcConfig"
    ]


def test_dig_reads_plain_paths() -> None:
    properties = {"A": {"B": {"C": 3}}, "L": [1]}
    assert dig(properties, ("A", "B", "C")) == 3
    assert dig(properties, ("A", "B")) == {"C": 3}
    assert dig(properties, ("A", "X")) is None
    assert dig(properties, ("L", "0")) is None
    assert dig(properties, ()) == properties


def test_values_at_follows_multi_segment_paths() -> None:
    properties = {
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2"},
        "SubnetIds": [{"Ref": "A"}, "subnet-2"],
        "Groups": [{"Name": "x", "Sub": {"Ref": "B"}}, {"Sub": "s"}],
        "Computed": {"Fn::If": ["C", [1], [2]]},
        "Scalar": "text",
    }
    assert list(values_at(properties, ("LustreConfiguration", "DeploymentType"))) == [
        ("LustreConfiguration.DeploymentType", "PERSISTENT_2")
    ]
    assert list(values_at(properties, ("SubnetIds", "*"))) == [
        ("SubnetIds[0]", {"Ref": "A"}),
        ("SubnetIds[1]", "subnet-2"),
    ]
    assert list(values_at(properties, ("Groups", "[Name]", "Sub"))) == [
        ("Groups[x].Sub", {"Ref": "B"}),
        ("Groups[#1].Sub", "s"),
    ]
    # An intrinsic part-way stops the walk there; a wildcard over a scalar yields it.
    assert list(values_at(properties, ("Computed", "*", "X"))) == [
        ("Computed", {"Fn::If": ["C", [1], [2]]})
    ]
    assert list(values_at(properties, ("Scalar", "*"))) == [("Scalar", "text")]
    conditional = {"Lustre": {"Fn::If": ["C", {"DeploymentType": "A"}, {"Ref": "AWS::NoValue"}]}}
    assert list(values_at(conditional, ("Lustre", "DeploymentType"))) == [
        ("Lustre", conditional["Lustre"])
    ]
    # Nothing where the path does not reach.
    assert list(values_at(properties, ("Missing", "X"))) == []
    assert list(values_at(properties, ("Scalar", "X"))) == []
    assert list(values_at(properties, ("Groups", "*", "Missing"))) == []
    assert list(values_at(properties, ())) == [("", properties)]


# --------------------------------------------------------------------------- references


def test_references_nested_in_objects_and_lists() -> None:
    value = {
        "Subnets": [{"Fn::Join": ["", ["x-", {"Ref": "A"}]]}, [[{"Fn::GetAtt": ["B", "Arn"]}]]],
        "Deep": {"Deeper": {"Fn::Select": [0, {"Fn::GetAtt": "C.Ids"}]}},
        "Plain": "text",
        "Number": 3,
    }
    assert references(value) == {"A", "B", "C"}
    assert references([{"Ref": "A"}, {"Ref": "B"}]) == {"A", "B"}
    assert references({"X": {"Ref": "A"}, "Y": {"Ref": "B"}}) == {"A", "B"}
    # Fn::Sub among other keys adds to what those keys reference.
    assert references({"X": {"Ref": "A"}, "Fn::Sub": "${B}"}) == {"A", "B"}


def test_getatt_names_the_resource_before_the_first_dot() -> None:
    assert references({"Fn::GetAtt": "Db.Endpoint.Address"}) == {"Db"}
    assert references({"Fn::GetAtt": ["Db", "Endpoint.Address"]}) == {"Db"}


def test_sub_with_a_variable_map_follows_both_parts() -> None:
    value = {"Fn::Sub": ["${Bucket}/${Name}", {"Name": {"Ref": "Other"}}]}
    assert references(value) == {"Bucket", "Name", "Other"}
    assert references({"Fn::Sub": ["${Bucket}"]}) == {"Bucket"}
    assert references({"Fn::Sub": "${Bucket.Arn}-${!Escaped}-${AWS::Region}"}) == {"Bucket"}


def test_references_ignore_pseudo_parameters_and_malformed_intrinsics() -> None:
    assert references({"Ref": "AWS::Region"}) == set()
    assert references({"Ref": ["Vpc"]}) == set()
    assert references({"Fn::GetAtt": []}) == set()
    assert references({"Fn::GetAtt": [3, "Arn"]}) == set()
    assert references({"Fn::Sub": []}) == set()
    assert references({"Fn::Sub": 3}) == set()
    assert references("Vpc") == set()


# --------------------------------------------------------------------------- schemas


def test_replacement_paths_add_the_ones_the_schemas_omit_sorted_once() -> None:
    paths = replacement_paths("AWS::FSx::FileSystem")
    assert paths == sorted(set(paths))
    assert set(FSX_REPLACEMENT_PATHS) <= set(paths)
    assert set(create_only_paths("AWS::FSx::FileSystem")) <= set(paths)
    assert replacement_paths("AWS::EC2::VPC") == sorted(set(create_only_paths("AWS::EC2::VPC")))
    assert ("CidrBlock",) in replacement_paths("AWS::EC2::VPC")


def test_create_only_paths_drop_the_properties_prefix_and_keep_wildcards() -> None:
    for path in create_only_paths("AWS::SageMaker::Cluster"):
        assert path and "properties" not in path and all(path), path
    assert ("VpcConfig",) in create_only_paths("AWS::SageMaker::Cluster")


def test_a_type_without_a_provider_schema_is_named() -> None:
    with pytest.raises(UnknownResourceTypeError, match="AWS::Nothing::Here"):
        create_only_paths("AWS::Nothing::Here")


def test_missing_is_shown_as_missing() -> None:
    assert repr(MISSING) == "<missing>"


# --------------------------------------------------------------------------- properties


def _assembly() -> dict[str, dict[str, Any]]:
    def subnet(cidr: str) -> dict[str, Any]:
        return {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": cidr},
        }

    return {
        "net": {
            "Resources": {
                "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
                "SubnetA": subnet("10.0.0.0/24"),
                "SubnetB": subnet("10.0.1.0/24"),
                "FileSystem": {
                    "Type": "AWS::FSx::FileSystem",
                    "Properties": {"FileSystemType": "LUSTRE", "SubnetIds": [{"Ref": "SubnetA"}]},
                },
                "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 7}},
            }
        }
    }


EDITS = {
    "vpc-cidr": lambda a: a["net"]["Resources"]["Vpc"]["Properties"].update(
        CidrBlock="10.1.0.0/16"
    ),
    "subnet-cidr": lambda a: a["net"]["Resources"]["SubnetA"]["Properties"].update(
        CidrBlock="10.0.9.0/24"
    ),
    "drop-subnet-b": lambda a: a["net"]["Resources"].pop("SubnetB"),
    "retention": lambda a: a["net"]["Resources"]["Logs"]["Properties"].update(RetentionInDays=30),
    "fsx-type": lambda a: a["net"]["Resources"]["FileSystem"].update(Type="AWS::FSx::Volume"),
}


def _shuffled(assembly: dict[str, dict[str, Any]], order: list[int]) -> dict[str, dict[str, Any]]:
    resources = list(assembly["net"]["Resources"].items())
    ranked = [resources[i] for i in order if i < len(resources)]
    ranked += [item for item in resources if item not in ranked]
    return {"net": {"Resources": dict(ranked)}}


def _verdict(report: guard.GuardReport) -> list[str]:
    return sorted(json.dumps(f.as_dict(), sort_keys=True) for f in report.findings)


@given(
    edits=st.lists(st.sampled_from(sorted(EDITS)), unique=True, max_size=len(EDITS)),
    old_order=st.permutations(range(5)),
    new_order=st.permutations(range(5)),
)
def test_the_verdict_does_not_depend_on_the_order_of_resources(
    edits: list[str], old_order: list[int], new_order: list[int]
) -> None:
    old = _assembly()
    new = copy.deepcopy(old)
    for name in edits:
        EDITS[name](new)
    expected = guard.compare(old, new)
    reordered = guard.compare(_shuffled(old, old_order), _shuffled(new, new_order))
    assert _verdict(reordered) == _verdict(expected)
    assert reordered.checked == expected.checked
    # A replaced VPC carries on to every subnet that references it, whatever the order.
    if "vpc-cidr" in edits:
        replaced = {f.logical_id for f in reordered.findings}
        assert {"Vpc", "SubnetA", "FileSystem"} <= replaced
