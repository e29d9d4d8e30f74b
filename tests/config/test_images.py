"""The pinned image table and the pull-path rules config validation runs before synth."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from config import images
from config.images import (
    COMPONENTS,
    EFA_DEVICE_PLUGIN,
    HEALTH_MONITORING_AGENT,
    HEALTH_MONITORING_AGENT_ACCOUNTS,
    NEURON_DEVICE_PLUGIN,
    NVIDIA_DEVICE_PLUGIN,
    TEAM_DIRECTORIES,
    image_problems,
    is_private_ecr_in,
    pinned_images,
)
from tests.support import eks_config

PINNED = re.compile(r"^[a-z0-9.-]+(:\d+)?(/[a-z0-9._-]+)+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
REGION = re.compile(r"^[a-z]{2}-[a-z]+-\d$")
MIRROR = "111111111111.dkr.ecr.us-west-2.amazonaws.com/mirror/image:v1"


def problems(
    *,
    region: str = "us-west-2",
    accelerators: set[str] | None = None,
    efa: bool = False,
    overrides: dict[str, str] | None = None,
    https_egress: bool = False,
    teams: bool = False,
) -> list[tuple[str, str]]:
    return image_problems(
        region=region,
        accelerators=set() if accelerators is None else accelerators,
        efa=efa,
        overrides=overrides or {},
        https_egress=https_egress,
        teams=teams,
    )


# --------------------------------------------------------------------- the table


def test_module_is_pure_data():
    """Config validation imports it: no CDK (or any third-party) import."""
    tree = ast.parse(Path(images.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"__future__", "re", "collections", "dataclasses"}, imported


def test_component_names_are_the_override_keys_the_schema_accepts():
    accepted = eks_config(image_overrides=dict.fromkeys(COMPONENTS, MIRROR))
    assert set(accepted.image_overrides) == set(COMPONENTS)
    with pytest.raises(ValueError, match="'gpu-plugin' is not a HyperPod dependency component"):
        eks_config(image_overrides={"gpu-plugin": MIRROR})


@pytest.mark.parametrize("region", sorted(HEALTH_MONITORING_AGENT_ACCOUNTS))
def test_every_pinned_image_has_an_exact_tag(region):
    table = pinned_images(region)
    assert set(table) == set(COMPONENTS)
    for name, image in table.items():
        assert PINNED.match(image), (name, image)
        assert not image.endswith(":latest"), (name, image)


def test_regional_images_are_private_ecr_of_their_region():
    for region, account in HEALTH_MONITORING_AGENT_ACCOUNTS.items():
        assert REGION.match(region), region
        assert re.fullmatch(r"\d{12}", account), (region, account)
        table = pinned_images(region)
        assert table[HEALTH_MONITORING_AGENT].startswith(
            f"{account}.dkr.ecr.{region}.amazonaws.com/"
        )
        assert is_private_ecr_in(table[HEALTH_MONITORING_AGENT], region)
        assert is_private_ecr_in(table[EFA_DEVICE_PLUGIN], region)
    assert len(set(HEALTH_MONITORING_AGENT_ACCOUNTS.values())) == len(
        HEALTH_MONITORING_AGENT_ACCOUNTS
    )


def test_region_without_a_published_agent_has_no_regional_defaults():
    assert set(pinned_images("af-south-1")) == {
        NVIDIA_DEVICE_PLUGIN,
        NEURON_DEVICE_PLUGIN,
        TEAM_DIRECTORIES,
    }


def test_private_ecr_means_this_region():
    assert is_private_ecr_in(MIRROR, "us-west-2")
    assert not is_private_ecr_in(MIRROR, "us-east-1")
    assert not is_private_ecr_in(
        "public.ecr.aws/neuron/neuron-device-plugin:2.19.16.0", "us-west-2"
    )
    assert not is_private_ecr_in("nvcr.io/nvidia/k8s-device-plugin:v0.16.1", "us-west-2")


# ------------------------------------------------ rule (a): no pinned image for the Region


def test_no_agent_for_the_region_without_override_is_a_problem():
    found = problems(region="af-south-1", accelerators={"nvidia"}, https_egress=True)
    assert found == [
        (
            "eks.image_overrides",
            "no pinned health-monitoring-agent image for af-south-1; set "
            "eks.image_overrides.health-monitoring-agent to a pinned copy in ECR",
        )
    ]


def test_no_agent_for_the_region_is_fine_with_an_override():
    overrides = {HEALTH_MONITORING_AGENT: "111111111111.dkr.ecr.af-south-1.amazonaws.com/hma:1"}
    assert (
        problems(
            region="af-south-1", accelerators={"nvidia"}, overrides=overrides, https_egress=True
        )
        == []
    )


def test_no_agent_is_needed_without_accelerators():
    assert problems(region="af-south-1") == []


def test_no_efa_plugin_for_the_region_is_a_problem_when_efa_is_used():
    (found,) = problems(region="af-south-1", efa=True)
    assert found[0] == "eks.image_overrides"
    assert "aws-efa-k8s-device-plugin" in found[1] and "af-south-1" in found[1]


# -------------------------------------------- rule (b): registries nodes cannot reach


def test_nvidia_plugin_from_nvcr_without_egress_is_a_problem():
    found = problems(accelerators={"nvidia"})
    assert found == [
        (
            "eks.image_overrides.nvidia-device-plugin",
            "nodes have no internet egress, so nvcr.io/nvidia/k8s-device-plugin:v0.16.1 cannot "
            "be pulled; copy it into ECR and set eks.image_overrides.nvidia-device-plugin, or "
            "allow a registry proxy in network.https_egress_cidrs",
        )
    ]


def test_neuron_plugin_from_public_ecr_without_egress_is_a_problem():
    (found,) = problems(accelerators={"neuron"})
    assert found[0] == "eks.image_overrides.neuron-device-plugin"
    assert "public.ecr.aws/neuron/neuron-device-plugin" in found[1]


def test_images_from_the_regions_private_ecr_need_no_egress():
    # The agent and the EFA plugin are pulled through the VPC's ECR endpoints.
    assert (
        problems(accelerators={"nvidia"}, efa=True, overrides={NVIDIA_DEVICE_PLUGIN: MIRROR}) == []
    )


def test_override_resolves_the_problem():
    assert (
        problems(
            accelerators={"nvidia", "neuron"},
            overrides={
                NVIDIA_DEVICE_PLUGIN: MIRROR,
                NEURON_DEVICE_PLUGIN: MIRROR,
            },
        )
        == []
    )


def test_https_egress_allows_external_registries():
    assert problems(accelerators={"nvidia", "neuron"}, efa=True, https_egress=True) == []


def test_only_needed_images_are_checked():
    assert problems(accelerators={"none-such"}) == []
    assert problems(efa=True) == []
    paths = [path for path, _ in problems(accelerators={"nvidia", "neuron"}, efa=True)]
    assert paths == [
        "eks.image_overrides.nvidia-device-plugin",
        "eks.image_overrides.neuron-device-plugin",
    ]


def test_messages_are_one_line():
    found = problems(region="af-south-1", accelerators={"nvidia", "neuron"}, efa=True)
    assert len(found) == 4
    for path, message in found:
        assert path.startswith("eks.image_overrides")
        assert "\n" not in message


def test_team_directory_image_is_needed_only_with_teams():
    # Governance teams each get a directory Job; its public image needs egress or a copy.
    assert problems() == []
    ((path, message),) = problems(teams=True)
    assert path == "eks.image_overrides.team-directories"
    assert "public.ecr.aws/docker/library/busybox:1.37.0 cannot be pulled" in message
    assert problems(teams=True, overrides={TEAM_DIRECTORIES: MIRROR}) == []
    assert problems(teams=True, https_egress=True) == []


def test_the_dockerfile_builds_from_the_tables_base_image():
    from config.images import TRAINING_BASE, TRAINING_BASE_IMAGE, platform_images

    dockerfile = (Path(__file__).resolve().parents[2] / "training" / "Dockerfile").read_text()
    (line,) = [x for x in dockerfile.splitlines() if x.startswith("FROM ")]
    assert line == f"FROM {TRAINING_BASE_IMAGE.reference}"
    assert TRAINING_BASE_IMAGE.digest is not None  # by digest, not by tag
    assert platform_images("us-east-1")[TRAINING_BASE] == TRAINING_BASE_IMAGE


def test_manifests_use_the_tables_references():
    from config.images import COMPONENTS, pinned_images, platform_images

    table = platform_images("us-east-1")
    assert pinned_images("us-east-1") == {
        name: image.reference for name, image in table.items() if name in COMPONENTS
    }
    assert set(table) - set(COMPONENTS) == {"training-base"}
