"""The analyses on a tiny backbone of every encoder family (different embeddings, no segment
input, no pooler, shared blocks, an embedding projection)."""

import numpy as np
import pytest

from garden.bertology import attention, heads, identifiability
from garden.models.albert.backbone import AlbertBackbone
from garden.models.bert.backbone import BertBackbone
from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.electra.backbone import ElectraBackbone
from garden.models.roberta.backbone import RobertaBackbone

SIZE = dict(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2, intermediate_size=32,
            dropout=0.0)
FAMILIES = {
    "bert": lambda: BertBackbone(**SIZE),
    "roberta": lambda: RobertaBackbone(**SIZE),
    "albert": lambda: AlbertBackbone(embedding_size=8, **SIZE),  # one block for both layers
    "electra": lambda: ElectraBackbone(embedding_size=8, **SIZE),  # projection 8 -> 16
    "distilbert": lambda: DistilBertBackbone(attention_dropout=0.0, **SIZE),
}
IDS = np.array([[2, 7, 8, 9, 10, 11, 12, 13, 14, 3], [2, 15, 16, 3, 0, 0, 0, 0, 0, 0]], "int32")
BATCH = {"token_ids": IDS, "segment_ids": 0 * IDS, "padding_mask": (IDS > 0).astype("int32")}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_analysis_runs_on_the_family(family):
    backbone = FAMILIES[family]()
    rng = np.random.default_rng(0)
    backbone.set_weights([w + rng.normal(scale=0.3, size=w.shape) for w in backbone.get_weights()])
    stats = attention.analyze_attention(backbone, BATCH, cls_id=2, sep_id=3)
    assert np.asarray(stats["shares"]["shares"]["sep"]).shape == (2, 2)
    effective = identifiability.effective_attention(backbone, BATCH)
    # Sentence 0 has 10 tokens > head width 8: T's rank is 8 and something is removed.
    np.testing.assert_array_equal(effective["rank"][:, 0], 8)
    assert np.abs(effective["effective"][:, 0] - effective["attention"][:, 0]).max() > 1e-3
    attribution = identifiability.hidden_token_attribution(backbone, BATCH, sequence=1)
    np.testing.assert_allclose(np.asarray(attribution["contributions"]).sum(-1), 1, atol=1e-9)
    ablation = heads.head_ablation(
        backbone, BATCH, lambda out: float(out["sequence_output"][:, 1].sum()), modes=("zero",))
    assert np.abs(np.asarray(ablation["heads"]["zero"]) - ablation["baseline"]).min() > 1e-6
