"""The delivery pipeline's file (`pipeline.yaml`), loaded with the environments it deploys.

Kept out of config/*.yaml, where every file is an environment (`-c env=<name>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from config.errors import ConfigError, problem_lines
from config.loader import CONFIG_DIR, LoadedEnvironment, load_environment, read_document
from config.schema.pipeline import PipelineConfig

PIPELINE_FILE = Path(__file__).resolve().parent / "pipeline.yaml"


@dataclass(frozen=True)
class LoadedPipeline:
    config: PipelineConfig
    environments: tuple[LoadedEnvironment, ...]
    source: Path


def load_pipeline(path: Path = PIPELINE_FILE, config_dir: Path = CONFIG_DIR) -> LoadedPipeline:
    """The pipeline file and every environment it deploys, each validated like `cdk synth`."""
    source = str(path)
    data, scalar_text = read_document(path)
    if not isinstance(data, dict):
        raise ConfigError(source, ["(top level): expected a mapping of settings"])
    try:
        config = PipelineConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, problem_lines(error, scalar_text=scalar_text)) from None
    environments = tuple(load_environment(name, config_dir) for name in config.environments)
    return LoadedPipeline(config=config, environments=environments, source=path)
