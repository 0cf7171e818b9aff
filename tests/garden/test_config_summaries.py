"""`python -m garden.train --summary` on the BERT pretraining configs: the parameter counts it
prints equal those of Hugging Face's BertForPreTraining (and BertModel for the backbone line)
of the published architecture.

The Hugging Face models are built on torch's "meta" device: shapes only, nothing allocated.
Their sizes are written here from the releases (google-research/bert's README: BERT-tiny is
L-2_H-128_A-2, BERT-base L-12_H-768_A-12), not read from the gin files, so a config that
drifts from the published architecture fails.
"""

from __future__ import annotations

import re

import keras
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from garden import train as train_lib  # noqa: E402


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    # Config files include each other by repo-relative paths, as on the command line.
    monkeypatch.chdir(train_lib.REPO_ROOT)


def _hugging_face_counts(**sizes) -> tuple:
    """(BertModel, BertForPreTraining) parameter counts; the MLM decoder is tied to the word
    table, which `parameters()` yields once."""
    config = transformers.BertConfig(**sizes)
    with torch.device("meta"):
        backbone = transformers.BertModel(config)
        pretraining = transformers.BertForPreTraining(config)
    return (sum(p.numel() for p in backbone.parameters()),
            sum(p.numel() for p in pretraining.parameters()))


def _summary_counts(capsys, *args: str) -> tuple:
    """(backbone, total) parameter counts printed by garden.train --summary."""
    # Fresh layer names: models built earlier in this process would suffix the model name.
    keras.backend.clear_session(free_memory=False)
    assert train_lib.main(["--summary", *args]) == 0
    out = capsys.readouterr().out
    keras.backend.clear_session(free_memory=False)
    assert 'Model: "bert_pretrainer"' in out  # the model summary table itself is printed

    def number(label):
        match = re.search(rf"^{label} parameters: ([\d,]+) \(", out, re.MULTILINE)
        assert match, out[-2000:]
        return int(match.group(1).replace(",", ""))

    return number("Backbone"), number("Total")


def test_bert_tiny_summary_matches_hugging_face(capsys, tmp_path):
    # The tiny config leaves vocab_size to the vocabulary: give it a 1,000-piece vocab.txt, so the
    # count also checks that --summary sizes the word table and MLM bias from the VOCAB file.
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(995)]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(pieces) + "\n", encoding="utf-8")
    backbone, total = _summary_counts(capsys, "--config=configs/bert_tiny.gin",
                                      f"--gin_param=VOCAB='{vocab}'")
    hf_backbone, hf_total = _hugging_face_counts(
        vocab_size=1000, num_hidden_layers=2, hidden_size=128, num_attention_heads=2,
        intermediate_size=512)
    assert (backbone, total) == (hf_backbone, hf_total)
    # 607,104 backbone parameters (word table 1000 x 128, positions 512 x 128, ...); the heads
    # add the MLM transform (128 x 128 + LayerNorm), the 1000 output biases and NSP (2 x 128 + 2).
    assert total - backbone == 128 * 128 + 128 + 2 * 128 + 1000 + 2 * 128 + 2


def test_bert_base_summary_matches_hugging_face(capsys):
    # bert_base.gin binds the 30522-piece uncased vocabulary size itself: no VOCAB needed.
    backbone, total = _summary_counts(capsys, "--config=configs/bert_base.gin")
    hf_backbone, hf_total = _hugging_face_counts(
        vocab_size=30522, num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
        intermediate_size=3072)
    assert (backbone, total) == (hf_backbone, hf_total)
    assert backbone == 109_482_240  # the "110M" of the paper


def _summary_lines(capsys, config: str) -> str:
    assert train_lib.main(["--summary", f"--config={config}"]) == 0
    out = capsys.readouterr().out
    keras.backend.clear_session(free_memory=False)
    return out


def _printed(out: str, label: str) -> int:
    match = re.search(rf"^{label} parameters: ([\d,]+) \(", out, re.MULTILINE)
    assert match, out[-2000:]
    return int(match.group(1).replace(",", ""))


def _meta_count(model_cls, config) -> int:
    with torch.device("meta"):
        model = model_cls(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("config,hf_base,hf_config", [
    # The backbones built through garden.models.factory (backbone with a RoBERTa / ALBERT preset
    # with the preset named in the config) have the published sizes.
    ("configs/roberta_base.gin", "RobertaModel", dict(
        vocab_size=50265, num_hidden_layers=12, hidden_size=768, num_attention_heads=12,
        intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1,
        pad_token_id=1)),
    ("configs/albert_base.gin", "AlbertModel", dict(
        vocab_size=30000, embedding_size=128, num_hidden_layers=12, hidden_size=768,
        num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512)),
])
def test_factory_backbone_summaries_match_hugging_face(capsys, config, hf_base, hf_config):
    out = _summary_lines(capsys, config)
    model_cls = getattr(transformers, hf_base)
    config_cls = getattr(transformers, hf_base.replace("Model", "Config"))
    assert _printed(out, "Backbone") == _meta_count(model_cls, config_cls(**hf_config))


def test_finetuning_summary_without_a_vocabulary(capsys):
    # The fine-tuning run files default VOCAB to None (a converted checkpoint brings its own):
    # --summary then sizes the word table from the preset (BERT-tiny with 30,522 pieces), and
    # the count equals Hugging Face's BertModel of that shape.
    keras.backend.clear_session(free_memory=False)
    assert train_lib.main(["--summary", "--config=configs/finetune/classification_tiny.gin"]) == 0
    out = capsys.readouterr().out
    keras.backend.clear_session(free_memory=False)
    match = re.search(r"^Backbone parameters: ([\d,]+) \(", out, re.MULTILINE)
    assert match, out[-2000:]
    hf_backbone, _ = _hugging_face_counts(vocab_size=30522, hidden_size=128,
                                          num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=512)
    assert int(match.group(1).replace(",", "")) == hf_backbone
