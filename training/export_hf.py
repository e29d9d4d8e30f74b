"""Export the trainer's weights as a Hugging Face Llama checkpoint (safetensors, sharded).

    python -m training.export_hf <checkpoint> <out dir> [--max-shard-mb 5000] [--dtype bf16]

<checkpoint> is a committed checkpoint directory (``.../ckpt/durable/step_00000040``: the model
config comes from its manifest's run identity) or the final export ``<out>/final/model.pt``
(then ``--preset``/``--set`` give the model config, as for training). The output is what
``LlamaForCausalLM.from_pretrained`` reads: config.json, model-0000k-of-0000n.safetensors and
model.safetensors.index.json, with the query/key rows in Hugging Face's order
(training/hf_llama.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from training import fileio
from training.cli import USAGE_EXIT_CODE, OneLineErrorParser
from training.config import ModelConfig
from training.config_parsing import ConfigError
from training.hf_llama import CONFIG_FILE, INDEX_FILE, hf_config, hf_tensor, to_hf_rows
from training.presets import PRESETS, build_config

# The key prefix of the model's parameters in a DCP checkpoint (Trainer's app state).
DCP_MODEL_PREFIX = "model_optim.model."
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def to_hf_state_dict(
    state: dict[str, torch.Tensor], cfg: ModelConfig, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        t = hf_tensor(name, cfg)
        v = value.detach().to("cpu", torch.float32)
        if t.permuted_heads is not None:
            v = to_hf_rows(v, t.permuted_heads)
        out[t.name] = v.to(dtype).contiguous()
    return out


def save_hf(
    state: dict[str, torch.Tensor],
    cfg: ModelConfig,
    out: Path,
    *,
    max_shard_bytes: int = 5 * 10**9,
    dtype: torch.dtype = torch.bfloat16,
) -> list[Path]:
    """Writes `state` (the trainer's parameter names, full tensors) as a Hugging Face
    checkpoint in `out`; returns the shard paths."""
    from safetensors.torch import save_file

    hf = to_hf_state_dict(state, cfg, dtype)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, value in hf.items():
        nbytes = value.numel() * value.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = value
        size += nbytes
    out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    paths: list[Path] = []
    for i, shard in enumerate(shards, 1):
        path = out / f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(path), metadata={"format": "pt"})
        paths.append(path)
        weight_map.update(dict.fromkeys(shard, path.name))
    total = sum(v.numel() * v.element_size() for v in hf.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    dtype_name = str(dtype).removeprefix("torch.")
    for name, doc in ((INDEX_FILE, index), (CONFIG_FILE, hf_config(cfg, torch_dtype=dtype_name))):
        tmp = fileio.part_path(out / name)
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        fileio.replace_durably(tmp, out / name)
    return paths


def load_dcp_model(ckpt_dir: Path) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    """The model's full tensors from a committed DCP checkpoint, and its model config (from
    the manifest's run identity), without a process group."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    from training.checkpoint.format import read_manifest

    manifest = read_manifest(ckpt_dir)
    if "run" not in manifest:
        raise ConfigError(f"{ckpt_dir}: the manifest has no run identity (model config)")
    cfg = ModelConfig(**manifest["run"]["config"]["model"])
    reader = FileSystemReader(str(ckpt_dir))
    meta = reader.read_metadata().state_dict_metadata
    model: dict[str, torch.Tensor] = {}
    for key, item in meta.items():
        if key.startswith(DCP_MODEL_PREFIX) and isinstance(item, TensorStorageMetadata):
            model[key.removeprefix(DCP_MODEL_PREFIX)] = torch.empty(
                tuple(item.size), dtype=item.properties.dtype
            )
    if not model:
        raise ConfigError(f"{ckpt_dir}: no model tensors ({DCP_MODEL_PREFIX}*) in the checkpoint")
    dcp_load({"model_optim": {"model": model}}, storage_reader=reader, no_dist=True)
    return model, cfg


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(
        prog="python -m training.export_hf",
        description="export a checkpoint as a Hugging Face LlamaForCausalLM (safetensors)",
    )
    p.add_argument("checkpoint", type=Path, help="committed step directory or final model.pt")
    p.add_argument("out", type=Path, help="output directory")
    p.add_argument("--max-shard-mb", type=int, default=5000, help="largest shard file, MB")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="tensor dtype")
    p.add_argument("--preset", choices=list(PRESETS), default="tiny", help="for model.pt only")
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if args.max_shard_mb < 1:
        p.error("--max-shard-mb must be >= 1")
    try:
        state: dict[str, Any]
        if args.checkpoint.is_dir():
            state, cfg = load_dcp_model(args.checkpoint)
        elif args.checkpoint.is_file():
            cfg = build_config(args.preset, args.overrides).model
            state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        else:
            raise ConfigError(f"checkpoint {args.checkpoint} does not exist")
        paths = save_hf(
            state,
            cfg,
            args.out,
            max_shard_bytes=args.max_shard_mb * 10**6,
            dtype=DTYPES[args.dtype],
        )
    except (ConfigError, OSError, KeyError, ValueError) as e:
        sys.stderr.write(f"error: {e}\n")
        return USAGE_EXIT_CODE
    print(f"exported {len(state)} tensors in {len(paths)} shards to {os.fspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
