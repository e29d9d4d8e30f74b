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

import argparse
import json
import os
import pickle
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import torch

from training import fileio
from training.cli import USAGE_EXIT_CODE, OneLineErrorParser
from training.config import ModelConfig, apply_override
from training.config_parsing import ConfigError
from training.hf_llama import CONFIG_FILE, INDEX_FILE, hf_config, hf_tensor, to_hf_rows
from training.presets import PRESETS, build_config

# The key prefix of the model's parameters in a DCP checkpoint (Trainer's app state).
DCP_MODEL_PREFIX = "model_optim.model."
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# The model config of a model.pt exported without --preset.
DEFAULT_PRESET = "tiny"


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


class ExportError(ConfigError):
    """A checkpoint or option export cannot use; the message is one line naming it."""


def _manifest_model(ckpt_dir: Path) -> ModelConfig:
    """The model config of the run that wrote `ckpt_dir` (its manifest's run identity)."""
    from training.checkpoint.format import read_manifest

    try:
        manifest = read_manifest(ckpt_dir)
    except (OSError, ValueError) as e:
        raise ExportError(f"checkpoint {ckpt_dir}: manifest unreadable ({e})") from None
    if manifest.get("backend") is not None:
        raise ExportError(
            f"checkpoint {ckpt_dir} was written through the {manifest['backend']} backend, "
            "whose files are not here: export a checkpoint of a file tier (durable)"
        )
    try:
        return ModelConfig(**manifest["run"]["config"]["model"])
    except (KeyError, TypeError) as e:
        raise ExportError(
            f"checkpoint {ckpt_dir}: the manifest has no usable run identity (model config: {e})"
        ) from None


def load_dcp_model(ckpt_dir: Path) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    """The model's full tensors from a committed DCP checkpoint, and its model config (from
    the manifest's run identity), without a process group. Read as resume reads: metadata
    through the restricted unpickler, every file the load reads a plain name listed in the
    manifest with its size and checksum verified, before a byte of it is used."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    from training.checkpoint.format import validate_checkpoint
    from training.checkpoint.planning import files_read_by
    from training.checkpoint.safe_load import SafeFileSystemReader, SafeLoadPlanner

    cfg = _manifest_model(ckpt_dir)
    reader = SafeFileSystemReader(str(ckpt_dir))
    try:
        meta = reader.read_metadata().state_dict_metadata
        model: dict[str, torch.Tensor] = {}
        for key, item in meta.items():
            if key.startswith(DCP_MODEL_PREFIX) and isinstance(item, TensorStorageMetadata):
                model[key.removeprefix(DCP_MODEL_PREFIX)] = torch.empty(
                    tuple(item.size), dtype=item.properties.dtype
                )
        state = {"model_optim": {"model": model}}
        reads = files_read_by(ckpt_dir, state)
    except Exception as e:  # noqa: BLE001 - any metadata that does not load is refused
        raise ExportError(f"checkpoint {ckpt_dir}: DCP metadata does not load ({e})") from None
    if not model:
        raise ExportError(f"checkpoint {ckpt_dir}: no model tensors ({DCP_MODEL_PREFIX}*) in it")
    strays = sorted(name for name in reads if not fileio.is_plain_file_name(name))
    ok, why = (False, f"{strays[0]} is not a file of the checkpoint") if strays else (True, "")
    if ok:
        ok, why = validate_checkpoint(ckpt_dir, 0, verify_checksums=True, reads=reads)
    if not ok:
        raise ExportError(f"checkpoint {ckpt_dir} is not intact: {why}; export another one")
    check_model_state(model, cfg, f"checkpoint {ckpt_dir}")
    dcp_load(state, storage_reader=reader, planner=SafeLoadPlanner(), no_dist=True)
    return model, cfg


def check_model_state(state: dict[str, Any], cfg: ModelConfig, where: str) -> None:
    """Every parameter of the model `cfg` describes, with its shape, and nothing else: what
    makes the written config.json true of the written tensors."""
    from training.model import Transformer

    with torch.device("meta"):
        expected = {
            k: tuple(v.shape) for k, v in Transformer(cfg, max_seq_len=1).state_dict().items()
        }
    names = [k for k in state if not isinstance(state[k], torch.Tensor) or k not in expected]
    missing = sorted(set(expected) - set(state))
    if names or missing:
        extra = f"{names[0]!r} is not a parameter of the model" if names else ""
        lack = f"{missing[0]} is missing" if missing else ""
        raise ExportError(
            f"{where}: {extra or lack} (model: {_describe(cfg)}); give the --preset and --set "
            "the run trained with"
        )
    for name, shape in expected.items():
        have = tuple(state[name].shape)
        if have != shape:
            raise ExportError(
                f"{where}: {name} has shape {list(have)}, the model of --preset/--set has "
                f"{list(shape)} (model: {_describe(cfg)}); give the --preset and --set the run "
                "trained with"
            )


def _describe(cfg: ModelConfig) -> str:
    return f"dim={cfg.dim} n_layers={cfg.n_layers} vocab_size={cfg.vocab_size}"


def check_overrides(cfg: ModelConfig, preset: str | None, overrides: list[str], where: str) -> None:
    """A committed checkpoint carries its model config: --preset cannot replace it, and a
    --set may only repeat what it says."""
    if preset is not None:
        raise ExportError(
            f"--preset {preset}: {where} carries its own model config (its manifest); drop "
            "--preset (it is for model.pt)"
        )
    job = build_config(next(iter(PRESETS)))
    job.model = replace(cfg)
    for assignment in overrides:
        apply_override(job, assignment)
        for f in fields(ModelConfig):
            if getattr(job.model, f.name) != getattr(cfg, f.name):
                raise ExportError(
                    f"--set {assignment}: {where} was trained with model.{f.name}="
                    f"{getattr(cfg, f.name)} (its manifest); drop the --set"
                )


def load_model_file(path: Path, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The trainer's final export (`<out>/final/model.pt`): tensors only (weights_only), each
    the shape the model of `cfg` has."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ExportError(
            f"{path} is not a model state the trainer saved ({first:.200}); export its "
            "committed checkpoint directory instead, or a complete model.pt"
        ) from None
    if not isinstance(state, dict):
        raise ExportError(
            f"{path} holds a {type(state).__name__}, not the trainer's model state (a dict of "
            "tensors)"
        )
    check_model_state(state, cfg, str(path))
    return state


def _load(args: argparse.Namespace) -> tuple[dict[str, torch.Tensor], ModelConfig]:
    if args.checkpoint.is_dir():
        cfg = _manifest_model(args.checkpoint)
        check_overrides(cfg, args.preset, args.overrides, f"checkpoint {args.checkpoint}")
        return load_dcp_model(args.checkpoint)
    if args.checkpoint.is_file():
        cfg = build_config(args.preset or DEFAULT_PRESET, args.overrides).model
        return load_model_file(args.checkpoint, cfg), cfg
    raise ExportError(f"checkpoint {args.checkpoint} does not exist")


def main(argv: list[str] | None = None) -> int:
    p = OneLineErrorParser(
        prog="python -m training.export_hf",
        description="export a checkpoint as a Hugging Face LlamaForCausalLM (safetensors)",
    )
    p.add_argument("checkpoint", type=Path, help="committed step directory or final model.pt")
    p.add_argument("out", type=Path, help="output directory")
    p.add_argument("--max-shard-mb", type=int, default=5000, help="largest shard file, MB")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="tensor dtype")
    p.add_argument(
        "--preset", choices=list(PRESETS), default=None, help=f"model.pt only ({DEFAULT_PRESET})"
    )
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if args.max_shard_mb < 1:
        p.error("--max-shard-mb must be >= 1")
    problem = fileio.writable_problem(args.out)
    if problem is not None:
        p.error(f"out {args.out}: cannot write there ({problem}); name a writable directory")
    try:
        state, cfg = _load(args)
        paths = save_hf(
            state,
            cfg,
            args.out,
            max_shard_bytes=args.max_shard_mb * 10**6,
            dtype=DTYPES[args.dtype],
        )
    except ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        return USAGE_EXIT_CODE
    except OSError as e:  # a full disk, a failing file system: may not happen again
        sys.stderr.write(f"error: {e.filename or args.out}: {e.strerror or e}\n")
        return 1
    print(f"exported {len(state)} tensors in {len(paths)} shards to {os.fspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
