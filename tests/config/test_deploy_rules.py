"""One test per rule for values that validate by shape but that AWS rejects at deploy time:
tag characters, AZ letters a Region does not have, interface endpoint services that do not
exist, and image overrides nodes cannot pull through the VPC's endpoints. Each planted
violation gives exactly one line naming the field."""

from __future__ import annotations

import pytest

from config.images import HEALTH_MONITORING_AGENT_ACCOUNTS, NVIDIA_DEVICE_PLUGIN, is_private_ecr_in
from config.regions import AZ_LETTERS, INTERFACE_ENDPOINT_SERVICES, availability_zones
from config.schema import REQUIRED_ENDPOINTS, NetworkConfig
from config.schema.governance import GOVERNANCE_REGIONS
from tests.support import ENVIRONMENTS, environment_data, loaded_from, one_error_on

ALLOWED = "use only letters, digits, spaces and _ . : / = + - @"


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"team": "ml#1"}, f"'team': value 'ml#1' has '#', which AWS tags do not take; {ALLOWED}"),
        ({"cost*center": "x"}, f"key 'cost*center' has '*', which AWS tags do not take; {ALLOWED}"),
        (
            {"owner": "a\tb"},
            f"'owner': value 'a\\tb' has '\\t', which AWS tags do not take; {ALLOWED}",
        ),
    ],
    ids=["value", "key", "tab"],
)
def test_tag_characters_outside_the_aws_set_are_refused(tags, message):
    assert one_error_on("tags", lambda d: d["tags"].update(tags)) == f"tags: {message}"


def test_tags_take_unicode_letters_spaces_and_the_allowed_punctuation():
    data = environment_data("dev")
    data["tags"] = {"équipe": "données ml", "path": "a/b=c+d-e@f:g.h_i 2"}
    assert loaded_from(data).config.tags == data["tags"]


def test_an_az_letter_the_region_lacks_is_refused():
    # us-east-1 has a-f: g still has a subnet slot (a-h), so only the Region table stops it.
    line = one_error_on(
        "network.availability_zones[2]",
        lambda d: d["network"].update(
            availability_zones=["us-east-1a", "us-east-1b", "us-east-1g"]
        ),
    )
    assert line == (
        "network.availability_zones[2]: us-east-1g does not exist: us-east-1 has us-east-1a, "
        "us-east-1b, us-east-1c, us-east-1d, us-east-1e, us-east-1f; use one of those"
    )


def test_the_az_table_covers_the_regions_the_project_uses_and_skips_the_others():
    shipped = {environment_data(name)["region"] for name in ENVIRONMENTS}
    agent_regions = set(HEALTH_MONITORING_AGENT_ACCOUNTS)
    assert shipped | agent_regions <= set(AZ_LETTERS)
    assert {"us-east-1", "ap-south-1", "eu-central-1"} <= GOVERNANCE_REGIONS & set(AZ_LETTERS)
    for region, letters in AZ_LETTERS.items():
        assert letters == "".join(sorted(set(letters))) and set(letters) <= set("abcdefgh"), region
    assert availability_zones("ap-northeast-1") == (
        "ap-northeast-1a",
        "ap-northeast-1c",
        "ap-northeast-1d",
    )
    assert availability_zones("xx-nowhere-1") is None  # not in the table: not checked


def test_an_interface_endpoint_service_that_does_not_exist_is_refused():
    services = [*REQUIRED_ENDPOINTS, "sagemaker.apii"]
    line = one_error_on(
        "network.interface_endpoints",
        lambda d: d["network"].update(interface_endpoints=services),
    )
    assert line.startswith(
        "network.interface_endpoints: 'sagemaker.apii' is not a known interface endpoint "
        "service (did you mean sagemaker.api"
    )
    assert "com.amazonaws.<region>.sagemaker.apii" in line


def test_the_endpoint_table_knows_every_default_endpoint():
    defaults = NetworkConfig.model_fields["interface_endpoints"].default_factory()
    assert set(defaults) | set(REQUIRED_ENDPOINTS) <= INTERFACE_ENDPOINT_SERVICES
    for name in ENVIRONMENTS:
        listed = environment_data(name)["network"].get("interface_endpoints", [])
        assert set(listed) <= INTERFACE_ENDPOINT_SERVICES, name


@pytest.mark.parametrize(
    ("image", "where"),
    [
        (
            "111111111111.dkr.ecr.us-west-2.amazonaws.com/nvidia/k8s-device-plugin:v0.16.1",
            "us-west-2",
        ),
        (
            "111111111111.dkr.ecr.cn-north-1.amazonaws.com.cn/nvidia/k8s-device-plugin:v0.16.1",
            "cn-north-1, another partition (amazonaws.com.cn)",
        ),
    ],
    ids=["other-region", "other-partition"],
)
def test_an_image_override_in_another_regions_ecr_is_refused(image, where):
    field = f"eks.image_overrides.{NVIDIA_DEVICE_PLUGIN}"
    line = one_error_on(
        field, lambda d: d["eks"]["image_overrides"].update({NVIDIA_DEVICE_PLUGIN: image})
    )
    assert line == (
        f"{field}: {image} is in the ECR of {where}, which nodes in us-east-1 cannot pull "
        "through this VPC's ECR endpoints; copy it into ECR in us-east-1 "
        "(111111111111.dkr.ecr.us-east-1.amazonaws.com) and point the override there"
    )


def test_private_ecr_means_this_region_and_its_partition():
    image = "111111111111.dkr.ecr.{}/repo:v1"
    assert is_private_ecr_in(image.format("cn-north-1.amazonaws.com.cn"), "cn-north-1")
    assert not is_private_ecr_in(image.format("cn-north-1.amazonaws.com"), "cn-north-1")
    assert not is_private_ecr_in(image.format("us-east-1.amazonaws.com.cn"), "us-east-1")
    assert is_private_ecr_in(image.format("us-gov-west-1.amazonaws.com"), "us-gov-west-1")
