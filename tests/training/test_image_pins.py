"""The packages the trainer's new modules import are pinned alike in the image and the
project's training extra (the CPU tests run the extra's versions)."""

from __future__ import annotations

import tomllib

import pytest

from tests.training.conftest import REPO

PACKAGES = ("safetensors", "tokenizers", "s3torchconnector", "mlflow-skinny", "tqdm")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_image_pins_the_extras_version(package: str) -> None:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["training"]
    image = (REPO / "training" / "requirements-container.txt").read_text().splitlines()
    (pin,) = [line for line in extra if line.startswith(f"{package}==")]
    assert pin in image


def test_the_image_has_the_sagemaker_mlflow_auth_plugin() -> None:
    """A tracking URI that is a SageMaker server's ARN needs the plugin's `arn` stores."""
    image = (REPO / "training" / "requirements-container.txt").read_text().splitlines()
    assert [line for line in image if line.startswith("sagemaker-mlflow==")] == [
        "sagemaker-mlflow==0.5.0"
    ]
