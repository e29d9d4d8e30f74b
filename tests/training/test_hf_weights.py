"""Pretrained weights: a Hugging Face LlamaForCausalLM loaded into the trainer's model
(training.init_from) and exported back (training.export_hf), compared by their logits."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.training.conftest import S3Server, launch
from training.config import ModelConfig
from training.export_hf import main as export_main
from training.export_hf import save_hf
from training.hf_llama import INDEX_FILE, UNTIE_HINT, from_hf_rows, hf_config, to_hf_rows
from training.init_from import InitFromError, load_pretrained
from training.model import Transformer
from training.presets import build_config

# fp32 on CPU: the two implementations differ only in the order of a few float operations
# (RoPE's rotation, RMSNorm's scaling), far below this.
LOGITS_ATOL = 1e-5
SEQ = 24
# Grouped-query attention, a non-default rope_theta and an uneven FFN width, so that each
# mapping (k with fewer heads, theta, w1/w3 shapes) is exercised.
CFG = ModelConfig(
    dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=320, ffn_hidden=96, rope_theta=5e5
)


def hf_model(cfg: ModelConfig, seed: int = 0, **overrides: object) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    fields = hf_config(cfg)
    fields.pop("architectures")
    fields.pop("torch_dtype")
    fields.update(overrides)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**fields)).eval()
    # Hugging Face initialises norms to one: randomise them so a swapped norm is caught.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def save_sharded(model: torch.nn.Module, path: Path) -> Path:
    model.save_pretrained(path, max_shard_size="40KB")  # type: ignore[operator]
    return path


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_sharded(hf_model(CFG), tmp_path_factory.mktemp("hf"))


def tokens(vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (2, SEQ), generator=torch.Generator().manual_seed(1))


def trainer_logits(model: Transformer, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model.eval()(x)
        return out


def hf_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(x).logits
        return out


def loaded(location: str | Path, cfg: ModelConfig = CFG) -> Transformer:
    model = Transformer(cfg, max_seq_len=SEQ)
    load_pretrained(model, str(location), cfg)
    return model


def test_the_checkpoint_is_sharded(hf_dir: Path) -> None:
    files = set(json.loads((hf_dir / INDEX_FILE).read_text())["weight_map"].values())
    assert len(files) > 3


def test_loaded_weights_give_hugging_face_logits(hf_dir: Path) -> None:
    x = tokens(CFG.vocab_size)
    expected = hf_logits(hf_model(CFG), x)
    torch.testing.assert_close(
        trainer_logits(loaded(hf_dir), x), expected, atol=LOGITS_ATOL, rtol=0
    )


def test_without_unpermuting_q_and_k_the_logits_differ(
    hf_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rotate-half -> interleaved reordering is what makes the logits match."""
    monkeypatch.setattr("training.init_from.from_hf_rows", lambda w, heads: w)
    x = tokens(CFG.vocab_size)
    diff = (trainer_logits(loaded(hf_dir), x) - hf_logits(hf_model(CFG), x)).abs().max()
    assert diff > 100 * LOGITS_ATOL


def test_the_row_reordering_is_hugging_faces_permute_and_its_inverse() -> None:
    w = torch.arange(2 * 8 * 3, dtype=torch.float32).reshape(16, 3)
    # transformers' convert_llama_weights_to_hf.permute, for 2 heads of 8 dims.
    hf = w.view(2, 8 // 2, 2, 3).transpose(1, 2).reshape(16, 3)
    assert torch.equal(to_hf_rows(w, 2), hf)
    assert torch.equal(from_hf_rows(hf, 2), w)


def test_tied_embeddings_are_refused_and_the_untying_it_names_loads(tmp_path: Path) -> None:
    """The model has its own output layer: loading a tied checkpoint would train the two
    apart and export them untied, so it is refused with the way to untie it, which then
    loads with the tied model's logits."""
    from transformers import LlamaForCausalLM

    hf = hf_model(CFG, tie_word_embeddings=True)
    save_sharded(hf, tmp_path / "tied")
    assert (
        "lm_head.weight"
        not in json.loads((tmp_path / "tied" / INDEX_FILE).read_text())["weight_map"]
    )
    with pytest.raises(
        InitFromError, match=f"tie_word_embeddings true: .*; {re.escape(UNTIE_HINT)}$"
    ):
        loaded(tmp_path / "tied")
    # UNTIE_HINT, step by step.
    untied = LlamaForCausalLM.from_pretrained(tmp_path / "tied")
    untied.config.tie_word_embeddings = False
    untied.lm_head.weight = torch.nn.Parameter(untied.get_input_embeddings().weight.clone())
    save_sharded(untied, tmp_path / "untied")
    x = tokens(CFG.vocab_size)
    torch.testing.assert_close(
        trainer_logits(loaded(tmp_path / "untied"), x), hf_logits(hf, x), atol=LOGITS_ATOL, rtol=0
    )


def test_a_vocabulary_mismatch_names_the_field_and_the_fix(hf_dir: Path) -> None:
    with pytest.raises(InitFromError) as e:
        loaded(hf_dir, replace(CFG, vocab_size=256))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.endswith(
        "config.json differs from the model: vocab_size 320, the model's model.vocab_size 256 "
        "(set model.vocab_size=320)"
    )


def test_a_width_mismatch_names_the_field_and_the_fix(hf_dir: Path) -> None:
    with pytest.raises(
        InitFromError,
        match=r"intermediate_size 96, the model's model.ffn_hidden 128 \(set model.ffn_hidden=96\)$",
    ):
        loaded(hf_dir, replace(CFG, ffn_hidden=128))


def test_a_config_the_model_would_not_reproduce_is_refused(hf_dir: Path) -> None:
    with pytest.raises(InitFromError, match=r"rope_theta 500000.0 \(set model.rope_theta="):
        loaded(hf_dir, replace(CFG, rope_theta=1e4))


def test_a_directory_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InitFromError, match=r"neither model\.safetensors\.index\.json nor"):
        loaded(tmp_path)


def test_loading_from_s3_reads_the_same_weights(hf_dir: Path, s3_server: S3Server) -> None:
    url = s3_server.upload_dir(hf_dir, "weights/llama")
    x = tokens(CFG.vocab_size)
    model = Transformer(CFG, max_seq_len=SEQ)
    report = load_pretrained(model, url, CFG)
    assert (
        report.elements_read == report.elements_total == sum(p.numel() for p in model.parameters())
    )
    torch.testing.assert_close(
        trainer_logits(model, x), hf_logits(hf_model(CFG), x), atol=LOGITS_ATOL, rtol=0
    )


def test_an_export_loads_in_transformers_with_the_same_logits(hf_dir: Path, tmp_path: Path) -> None:
    from transformers import LlamaForCausalLM

    model = loaded(hf_dir)
    with torch.no_grad():  # moved off the pretrained weights: the export must carry these
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    paths = save_hf(
        dict(model.state_dict()), CFG, tmp_path, max_shard_bytes=30_000, dtype=torch.float32
    )
    assert len(paths) > 3
    back = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    x = tokens(CFG.vocab_size)
    torch.testing.assert_close(
        hf_logits(back, x), trainer_logits(model, x), atol=LOGITS_ATOL, rtol=0
    )


INIT_RE = re.compile(r"^HPTRAIN init_from rank=(\d+) read=(\d+) total=(\d+)")


@pytest.mark.slow
# The export reads the checkpoint here, in one process, as the export command does.
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_two_fsdp_ranks_each_read_their_shard_and_the_export_round_trips(
    tmp_path: Path,
) -> None:
    """2 gloo ranks, FSDP: each reads half of every tensor; the first step's loss is the
    pretrained model's; the durable checkpoint exports to what transformers loads."""
    from transformers import LlamaForCausalLM

    tiny = build_config("tiny").model
    hf = hf_model(tiny)
    hf_dir = save_sharded(hf, tmp_path / "hf")
    result = launch(
        tmp_path / "run",
        steps=2,
        overrides=[f"training.init_from={hf_dir}", "checkpoint.durable_interval=2"],
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reads = {
        int(m[1]): (int(m[2]), int(m[3]))
        for m in map(INIT_RE.match, result.stdout.splitlines())
        if m
    }
    total = sum(p.numel() for p in hf.parameters())
    assert sorted(reads) == [0, 1]
    # Every tensor's rows split evenly in two (q/k in whole heads): exactly half each.
    assert [reads[r] for r in (0, 1)] == [(total // 2, total), (total // 2, total)]

    # The first step's loss is that of the pretrained weights on the first global batch.
    from training.data import ResumableLoader, SyntheticTokenSource

    cfg = build_config("tiny")
    d, t = cfg.data, cfg.training
    source = SyntheticTokenSource(d.synthetic_samples, t.seq_len, tiny.vocab_size, d.seed)
    inputs, labels = ResumableLoader(source, t.global_batch_size, 0, 1, d.seed).next_batch()
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(
            hf(inputs).logits.flatten(0, 1), labels.flatten()
        ).item()
    (first,) = [ln for ln in result.lines("HPTRAIN step=1 ")]
    assert float(re.search(r"loss=([\d.]+)", first)[1]) == pytest.approx(expected, abs=1e-4)  # type: ignore[index]

    # The committed step-2 checkpoint, exported, is the final model.
    ckpt = tmp_path / "run" / "ckpt" / "durable" / "step_00000002"
    export = tmp_path / "export"
    assert export_main([str(ckpt), str(export), "--dtype", "fp32"]) == 0
    final = torch.load(tmp_path / "run" / "final" / "model.pt", weights_only=True)
    trainer = Transformer(tiny, max_seq_len=t.seq_len)
    trainer.load_state_dict(final)
    back = LlamaForCausalLM.from_pretrained(export).eval()
    torch.testing.assert_close(
        hf_logits(back, inputs), trainer_logits(trainer, inputs), atol=LOGITS_ATOL, rtol=0
    )


def test_the_export_command_refuses_a_missing_checkpoint_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export_main([str(tmp_path / "nope"), str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: checkpoint {tmp_path / 'nope'} does not exist"
    ]
