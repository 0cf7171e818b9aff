"""Every BERT preset has exactly the parameters of Hugging Face's BertModel of the published
architecture (google-research/bert's releases: the compact models of Turc et al. 2019, base
and large of Devlin et al. 2019), in total and part by part (embeddings, each Transformer layer,
pooler), so a wrong feed-forward width or a missing bias names the part at fault.

Both are built for their shapes only: Hugging Face's on torch's meta device, ours in a Keras
stateless scope that defers every variable (no weights drawn: BERT-large took about 5 s and
1.7 GB for Hugging Face's and 14 s for ours with weights). BERT-base is covered, weights and
all, by tests/test_convert_bert.py.
"""

from __future__ import annotations

import keras
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from garden.models.bert.presets import PRESETS, untrained_bert_backbone  # noqa: E402

from bert_reference import PUBLISHED as _ALL_PUBLISHED  # noqa: E402

# BERT-base is counted by tests/test_convert_bert.py.
PUBLISHED = {name: arch for name, arch in _ALL_PUBLISHED.items() if name != "bert_base"}
# BertModel totals (with the pooler) of the uncased releases, vocabulary 30522.
TOTALS = {
    "bert_tiny": 4_385_920,
    "bert_mini": 11_170_560,
    "bert_small": 28_763_648,
    "bert_medium": 41_373_184,
    "bert_large": 335_141_888,
}


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_has_hugging_face_parameter_count(name):
    layers, hidden, heads, ffn = PUBLISHED[name]
    with torch.device("meta"):
        hf = transformers.BertModel(transformers.BertConfig(
            vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
            num_attention_heads=heads, intermediate_size=ffn, max_position_embeddings=512,
            type_vocab_size=2))
    expected = {"total": _count(hf), "embeddings": _count(hf.embeddings),
                "layers": [_count(layer) for layer in hf.encoder.layer],
                "pooler": _count(hf.pooler)}
    del hf

    with keras.StatelessScope(initialize_variables=False):
        backbone = untrained_bert_backbone(name)
        got = {"total": backbone.count_params(), "embeddings": backbone.embeddings.count_params(),
               "layers": [block.count_params() for block in backbone.encoder_blocks],
               "pooler": backbone.pooler.count_params()}
    del backbone
    keras.backend.clear_session(free_memory=False)

    assert got == expected, name
    assert got["total"] == TOTALS[name]
    assert (PRESETS[name]["num_layers"], PRESETS[name]["hidden_size"]) == (layers, hidden)
