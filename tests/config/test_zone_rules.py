"""Zones by name or by ID: an ID becomes this account's name through the mapping
cdk.context.json records (config/zones.py), so both spellings build the same network; IDs are
checked against the Region's table and the zones EKS refuses. One test per rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.errors import ConfigError
from config.loader import parse_config
from config.regions import EKS_UNSUPPORTED_ZONE_IDS, zone_ids
from config.zones import record_zones, recorded_zone_ids
from tests.support import environment, environment_data, loaded_from, one_error_on

PROD_ACCOUNT = "333333333333"


def _names_for_ids(data: dict[str, Any]) -> dict[str, Any]:
    """prod.yaml with every zone ID written as this account's name."""
    names = {
        zone_id: name for name, zone_id in recorded_zone_ids(PROD_ACCOUNT, "us-east-1").items()
    }
    data["network"]["availability_zones"] = [
        names[z] for z in data["network"]["availability_zones"]
    ]
    data["hyperpod"]["availability_zones"] = [
        names[z] for z in data["hyperpod"]["availability_zones"]
    ]
    data["storage"]["fsx"]["availability_zone"] = names[data["storage"]["fsx"]["availability_zone"]]
    for group in data["hyperpod"]["instance_groups"]:
        plan = group.get("training_plan")
        if plan:
            plan["availability_zone"] = names[plan["availability_zone"]]
    return data


def test_prod_names_its_zones_by_id():
    data = environment_data("prod")
    assert all(z.startswith("use1-az") for z in data["network"]["availability_zones"])
    assert data["storage"]["fsx"]["availability_zone"].startswith("use1-az")


def test_zones_by_id_and_by_name_build_the_same_network():
    by_id = environment("prod")
    by_name = loaded_from(_names_for_ids(environment_data("prod")))
    assert by_id.config.network.availability_zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert by_id.config == by_name.config
    assert by_id.layout == by_name.layout
    assert by_id.config.zone_id("us-east-1a") == "use1-az4"


def test_rule_a_zone_id_needs_a_recorded_name():
    with pytest.raises(ConfigError) as caught:
        parse_config(environment_data("prod"), "prod.yaml", zone_ids={})
    first = caught.value.lines[0]
    assert first == (
        "network.availability_zones[0]: use1-az4: cdk.context.json records no AZ name for it "
        "in account 333333333333; run `hpctl zones --env prod --write` with that account's "
        "credentials and commit the file"
    )


def test_rule_a_zone_id_belongs_to_the_region():
    line = one_error_on(
        "network.availability_zones[1]",
        lambda d: d["network"].update(availability_zones=["us-east-1a", "usw2-az1"]),
    )
    assert line.startswith(
        "network.availability_zones[1]: usw2-az1 is not an AZ ID of us-east-1; use one of "
        "use1-az1, use1-az2"
    )


def test_rule_a_zone_id_exists_in_the_region():
    line = one_error_on(
        "network.availability_zones[1]",
        lambda d: d["network"].update(availability_zones=["us-east-1a", "use1-az9"]),
    )
    assert "use1-az9 is not an AZ ID of us-east-1" in line


@pytest.mark.parametrize("spelling", ["us-east-1e", "use1-az3"])
def test_rule_no_network_zone_where_eks_refuses_the_control_plane(spelling):
    # dev's account maps us-east-1e to use1-az3 (cdk.context.json).
    line = one_error_on(
        "network.availability_zones[2]",
        lambda d: d["network"].update(availability_zones=["us-east-1a", "us-east-1b", spelling]),
    )
    assert line == (
        "network.availability_zones[2]: us-east-1e is use1-az3 in account 111111111111, where "
        "EKS cannot place its control plane (every network AZ holds a control-plane subnet); "
        "use another zone"
    )


def test_rule_one_zone_is_listed_once_whichever_way_it_is_written():
    # dev's us-east-1a is use1-az2.
    line = one_error_on(
        "network.availability_zones",
        lambda d: d["network"].update(availability_zones=["us-east-1a", "use1-az2"]),
    )
    assert "listed more than once: us-east-1a" in line


def test_names_work_without_a_recorded_mapping():
    data = environment_data("dev")
    config = parse_config(data, "dev.yaml", zone_ids={})
    assert config.network.availability_zones == ["us-east-1a", "us-east-1b"]
    assert config.zone_id("us-east-1a") is None


def test_the_region_table_knows_the_zones_eks_refuses():
    known = {
        zone
        for region in ("us-east-1", "us-west-1", "ca-central-1")
        for zone in zone_ids(region) or ()
    }
    assert known >= EKS_UNSUPPORTED_ZONE_IDS


def test_recording_keeps_other_entries_and_sorts_keys(tmp_path: Path):
    context = tmp_path / "cdk.context.json"
    context.write_text('{"z-other": 1}\n')
    ids = {"us-east-2b": "use2-az2", "us-east-2a": "use2-az1", "us-east-2c": "use2-az3"}
    # us-east-2c is impaired: CDK's list of names keeps only available zones, as its lookup.
    record_zones("999999999999", "us-east-2", ids, ["us-east-2b", "us-east-2a"], context)
    assert recorded_zone_ids("999999999999", "us-east-2", context) == dict(sorted(ids.items()))
    text = context.read_text()
    assert (
        text.index("availability-zone-ids:")
        < text.index("availability-zones:")
        < text.index("z-other")
    )
    assert '"us-east-2a",\n    "us-east-2b"\n  ]' in text


def test_rule_a_damaged_context_file_is_one_line(tmp_path: Path):
    context = tmp_path / "cdk.context.json"
    context.write_text('{\n<<<<<<< HEAD\n"a": 1\n}\n')
    with pytest.raises(ConfigError) as caught:
        recorded_zone_ids(PROD_ACCOUNT, "us-east-1", context)
    (line,) = caught.value.located_lines()
    assert line.startswith("cdk.context.json: line 2 column 1: ")
    assert line.endswith("fix the JSON (a merge conflict?) or restore it from git")


def test_rule_zone_ids_are_lowercase():
    line = one_error_on(
        "network.availability_zones[1]",
        lambda d: d["network"].update(availability_zones=["us-east-1a", "USE1-AZ4"]),
    )
    assert line.endswith("zone IDs are lowercase; write use1-az4")


def test_account_and_region_are_read_as_the_schema_reads_them():
    # Spaces around the account or Region must not stop IDs from resolving.
    data = environment_data("prod")
    data["account"], data["region"] = f" {PROD_ACCOUNT} ", "us-east-1 "
    assert (
        loaded_from(data).config.network.availability_zones
        == environment("prod").config.network.availability_zones
    )
