"""training.init_from given checkpoints built to mislead it: files outside its directory,
byte ranges outside the object, architectures whose tensors have the model's shapes, tied
embeddings and corrupt shards. Each is refused in one line before a weight changes."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training import test_hf_weights as weights
from tests.training.conftest import S3Server, launch
from training import s3
from training.hf_llama import CONFIG_FILE, INDEX_FILE, SINGLE_FILE, hf_config
from training.init_from import InitFromError, load_pretrained
from training.model import Transformer
from training.presets import build_config

CFG = weights.CFG


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return weights.save_sharded(weights.hf_model(CFG), tmp_path_factory.mktemp("hf"))


@pytest.fixture
def ckpt(pretrained: Path, tmp_path: Path) -> Path:
    """A private copy of the pretrained checkpoint, for a test to plant something in."""
    return Path(shutil.copytree(pretrained, tmp_path / "ckpt"))


def refusal(location: str | Path, cfg: Any = CFG) -> str:
    """The one-line refusal of loading `location` into a fresh model; the model unchanged."""
    model = Transformer(cfg, max_seq_len=weights.SEQ)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(InitFromError) as caught:
        load_pretrained(model, str(location), cfg)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    message = str(caught.value)
    assert "\n" not in message
    return message


def edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def shard_of(ckpt: Path, tensor: str) -> Path:
    return ckpt / json.loads((ckpt / INDEX_FILE).read_text())["weight_map"][tensor]


def remap(ckpt: Path, tensor: str, to: str) -> None:
    """Points every tensor of `tensor`'s shard at `to` in the index."""
    old = shard_of(ckpt, tensor).name

    def edit(doc: dict[str, Any]) -> None:
        doc["weight_map"] = {k: to if v == old else v for k, v in doc["weight_map"].items()}

    edit_json(ckpt / INDEX_FILE, edit)


# ---- only files named inside the checkpoint's directory -------------------------------------


def test_an_index_naming_an_absolute_path_is_refused(ckpt: Path, tmp_path: Path) -> None:
    # The shard is intact: reading it would load; the name alone is refused.
    outside = tmp_path / "elsewhere.safetensors"
    shutil.copy(shard_of(ckpt, "model.norm.weight"), outside)
    remap(ckpt, "model.norm.weight", str(outside))
    assert f" to '{outside}', which is not a file name in that directory" in refusal(ckpt)


def test_an_index_naming_a_parent_directory_is_refused(ckpt: Path) -> None:
    shutil.copy(shard_of(ckpt, "model.norm.weight"), ckpt.parent / "up.safetensors")
    remap(ckpt, "model.norm.weight", "../up.safetensors")
    assert "'../up.safetensors', which is not a file name in that directory" in refusal(ckpt)


def test_a_shard_that_links_out_of_the_directory_is_refused(ckpt: Path) -> None:
    shard = shard_of(ckpt, "model.norm.weight")
    shutil.move(shard, ckpt.parent / "moved.safetensors")
    shard.symlink_to(ckpt.parent / "moved.safetensors")
    assert f"{shard.name} links outside the checkpoint's directory" in refusal(ckpt)


def test_an_index_that_is_not_json_is_refused(ckpt: Path) -> None:
    (ckpt / INDEX_FILE).write_text("{not json")
    assert "holds no weight_map" in refusal(ckpt)


# ---- the architecture, before any tensor ---------------------------------------------------


def test_a_llama2_config_with_other_heads_but_the_same_shapes_is_refused(tmp_path: Path) -> None:
    """8 heads of 8 and 4 heads of 16 have the same projections: only config.json tells them
    apart, and a Llama-2-era config has no head_dim (it is hidden_size / heads)."""
    other = replace(CFG, n_heads=8, n_kv_heads=4)
    hf = weights.hf_model(other)
    weights.save_sharded(hf, tmp_path)
    edit_json(tmp_path / CONFIG_FILE, lambda doc: doc.pop("head_dim"))
    message = refusal(tmp_path)
    assert "num_attention_heads 8, the model's model.n_heads 4 (set model.n_heads=8)" in message
    assert "num_key_value_heads 4, the model's model.n_kv_heads 2 (set model.n_kv_heads=4)" in (
        message
    )
    # The fix it names loads the checkpoint exactly.
    x = weights.tokens(CFG.vocab_size)
    torch.testing.assert_close(
        weights.trainer_logits(weights.loaded(tmp_path, other), x),
        weights.hf_logits(hf, x),
        atol=weights.LOGITS_ATOL,
        rtol=0,
    )


def test_a_head_dim_other_than_hidden_over_heads_cannot_load(ckpt: Path) -> None:
    edit_json(ckpt / CONFIG_FILE, lambda doc: doc.update(head_dim=32))
    assert "head_dim 32 is not hidden_size / num_attention_heads = 16" in refusal(ckpt)


def test_a_checkpoint_with_more_layers_is_refused(tmp_path: Path) -> None:
    weights.save_sharded(weights.hf_model(replace(CFG, n_layers=3)), tmp_path)
    assert "num_hidden_layers 3, the model's model.n_layers 2 (set model.n_layers=3)" in (
        refusal(tmp_path)
    )


def test_extra_layers_are_refused_even_when_config_json_hides_them(tmp_path: Path) -> None:
    weights.save_sharded(weights.hf_model(replace(CFG, n_layers=3)), tmp_path)
    edit_json(tmp_path / CONFIG_FILE, lambda doc: doc.update(num_hidden_layers=2))
    message = refusal(tmp_path)
    assert "tensors of the checkpoint have no place in the model (first model.layers.2." in message
    assert message.endswith("set model.n_layers=3")


def test_a_shape_config_json_hides_is_refused_by_the_tensor(ckpt: Path) -> None:
    edit_json(ckpt / CONFIG_FILE, lambda doc: doc.update(vocab_size=256))
    message = refusal(ckpt, replace(CFG, vocab_size=256))
    assert "model.embed_tokens.weight has shape [320, 64] in the checkpoint" in message
    assert message.endswith("tok_embeddings.weight has [256, 64]; set model.vocab_size=320")


def test_a_checkpoint_without_config_json_is_refused(ckpt: Path) -> None:
    (ckpt / CONFIG_FILE).unlink()
    assert "no config.json there, so its architecture" in refusal(ckpt)


@pytest.mark.parametrize("bad", [None, "8", 0, True])
def test_an_architecture_field_that_is_not_a_count_is_named(ckpt: Path, bad: object) -> None:
    edit_json(ckpt / CONFIG_FILE, lambda doc: doc.update(num_hidden_layers=bad))
    message = refusal(ckpt)
    if bad is None:
        assert "config.json has no num_hidden_layers" in message
    else:
        assert f"num_hidden_layers {bad!r} is not a positive whole number" in message


def test_a_config_json_that_is_not_an_object_is_refused(ckpt: Path) -> None:
    (ckpt / CONFIG_FILE).write_text("[1, 2]")
    assert "config.json is [1, 2], not a Hugging Face model config" in refusal(ckpt)


# ---- corrupt shards -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated
        lambda data: b"\x00" * 8 + data[8:],  # header length zeroed
        lambda data: b"not a safetensors file",
    ],
    ids=["truncated", "header-length", "foreign"],
)
def test_a_corrupt_shard_is_one_line_naming_it(
    ckpt: Path, damage: Callable[[bytes], bytes]
) -> None:
    shard = shard_of(ckpt, "model.layers.1.mlp.down_proj.weight")
    shard.write_bytes(damage(shard.read_bytes()))
    message = refusal(ckpt)
    assert message.startswith(f"training.init_from: {shard} is not a readable safetensors file (")
    assert message.endswith("replace it with an intact copy of the checkpoint")


def test_a_missing_shard_is_one_line_naming_it(ckpt: Path) -> None:
    shard = shard_of(ckpt, "model.norm.weight")
    shard.unlink()
    assert f"{shard} is not a readable safetensors file" in refusal(ckpt)


# ---- byte ranges on S3 --------------------------------------------------------------------


def safetensors_blob(header_length: int | None, entries: dict[str, Any], data: bytes) -> bytes:
    header = json.dumps(entries).encode()
    length = len(header) if header_length is None else header_length
    return struct.pack("<Q", length) + header + data


EMBED = "model.embed_tokens.weight"
EMBED_BYTES = CFG.vocab_size * CFG.dim * 4


@pytest.fixture
def s3_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every byte range the loader requests from S3."""
    reads: list[tuple[int, int]] = []
    real = s3.read_range

    def recording(bucket: str, key: str, start: int, stop: int) -> bytes:
        reads.append((start, stop))
        return real(bucket, key, start, stop)

    monkeypatch.setattr(s3, "read_range", recording)
    return reads


def planted(s3_server: S3Server, prefix: str, blob: bytes) -> str:
    """A one-file checkpoint (model.safetensors + the model's config.json) on S3."""
    client = s3.client()
    client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{SINGLE_FILE}", Body=blob)
    config = json.dumps(hf_config(CFG)).encode()
    client.put_object(Bucket=s3_server.bucket, Key=f"{prefix}/{CONFIG_FILE}", Body=config)
    return s3_server.url(prefix)


def entry(begin: int, end: int) -> dict[str, Any]:
    return {
        EMBED: {"dtype": "F32", "shape": [CFG.vocab_size, CFG.dim], "data_offsets": [begin, end]}
    }


def test_a_huge_header_length_is_refused_before_it_is_requested(
    s3_server: S3Server, s3_reads: list[tuple[int, int]]
) -> None:
    blob = safetensors_blob(2**62, entry(0, EMBED_BYTES), bytes(EMBED_BYTES))
    url = planted(s3_server, "huge-header", blob)
    message = refusal(url)
    assert f"header length {2**62} in an object of {len(blob)} bytes" in message
    assert s3_reads == [(0, 8)]


def test_a_negative_offset_is_refused_rather_than_reading_the_header(
    s3_server: S3Server, s3_reads: list[tuple[int, int]]
) -> None:
    # The tensor's bytes would start 64 bytes before the data: inside the header.
    blob = safetensors_blob(None, entry(-64, EMBED_BYTES - 64), bytes(EMBED_BYTES))
    url = planted(s3_server, "negative", blob)
    assert f"{EMBED}'s bytes [-64, {EMBED_BYTES - 64}) lie outside its data" in refusal(url)
    assert s3_reads == [(0, 8), (8, len(blob) - EMBED_BYTES)]  # the header only


def test_offsets_past_the_end_of_the_object_are_refused(s3_server: S3Server) -> None:
    blob = safetensors_blob(None, entry(8, EMBED_BYTES + 8), bytes(EMBED_BYTES))
    url = planted(s3_server, "past-end", blob)
    assert f"{EMBED}'s bytes [8, {EMBED_BYTES + 8}) lie outside its data" in refusal(url)


def test_offsets_that_disagree_with_the_shape_are_refused(s3_server: S3Server) -> None:
    blob = safetensors_blob(None, entry(0, 16), bytes(EMBED_BYTES))
    url = planted(s3_server, "short-entry", blob)
    assert f"{EMBED} holds 16 bytes, its shape needs {EMBED_BYTES}" in refusal(url)


def test_an_s3_index_naming_another_prefix_is_refused(
    pretrained: Path, s3_server: S3Server
) -> None:
    url = s3_server.upload_dir(pretrained, "weights/escape")
    index = json.loads((pretrained / INDEX_FILE).read_text())
    name = index["weight_map"]["model.norm.weight"]
    index["weight_map"]["model.norm.weight"] = f"../other/{name}"
    s3.client().put_object(
        Bucket=s3_server.bucket, Key=f"weights/escape/{INDEX_FILE}", Body=json.dumps(index)
    )
    assert f"'../other/{name}', which is not a file name" in refusal(url)


def test_a_missing_s3_checkpoint_is_one_line(s3_server: S3Server) -> None:
    assert "neither model.safetensors.index.json nor model.safetensors" in refusal(
        s3_server.url("no/such/prefix")
    )


# ---- through the launcher: bad input is not retried ----------------------------------------


@pytest.mark.slow
def test_a_corrupt_shard_stops_the_job_without_a_retry(tmp_path: Path) -> None:
    hf_dir = weights.save_sharded(weights.hf_model(build_config("tiny").model), tmp_path / "hf")
    shard = shard_of(hf_dir, "model.norm.weight")
    shard.write_bytes(shard.read_bytes()[:100])
    # One rank: how the launcher stops a group of several on one rank's bad input is the
    # fault-tolerance tests'; here, that this error is bad input.
    r = launch(
        tmp_path / "run",
        "--max-restarts",
        "3",
        steps=2,
        nproc=1,
        overrides=[f"training.init_from={hf_dir}"],
    )
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-3000:]
    launcher = r.summary["launcher"]
    assert (launcher["restarts"], launcher["attempts"][0]["outcome"]) == (0, "bad_input")
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: rank ") and f"{shard} is not a readable safetensors" in line


def test_a_config_json_that_cannot_be_read_is_one_line(ckpt: Path) -> None:
    (ckpt / CONFIG_FILE).unlink()
    (ckpt / CONFIG_FILE).mkdir()
    assert f"cannot read {ckpt / CONFIG_FILE} (Is a directory)" in refusal(ckpt)


def test_a_location_that_is_a_file_is_one_line(ckpt: Path) -> None:
    assert f"cannot read {ckpt / CONFIG_FILE / INDEX_FILE} (Not a directory)" in refusal(
        ckpt / CONFIG_FILE
    )


def test_an_s3_index_that_is_not_text_is_one_line(pretrained: Path, s3_server: S3Server) -> None:
    url = s3_server.upload_dir(pretrained, "weights/binary-index")
    s3.client().put_object(
        Bucket=s3_server.bucket, Key=f"weights/binary-index/{INDEX_FILE}", Body=b"\xff\xfe\x00"
    )
    assert f"cannot read {url}/{INDEX_FILE} (" in refusal(url)
