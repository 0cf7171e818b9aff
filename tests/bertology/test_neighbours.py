"""`python -m garden.analyze neighbours` (garden.bertology.neighbours; issue 36 item 8): the
nearest lines of a text file by the cosine of mean-pooled embeddings, for given queries and
for every line (itself left out), equal to the ranking and cosines of transformers' own
tokenizer, model and sentence-transformers' mean pooling (1e-5) on a converted tiny BERT."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import write_hf_bert  # noqa: E402

LINES = ["the movie was good .", "the film was great !", "the plot was dull .",
         "acting was awful , music was boring", "i really liked the story",
         "we hated the acting", "a very fun film", "the music was not good",
         "Ελληνικά 日本語 🙂 café", " ".join(["movie"] * 40)]
QUERIES = ["a great movie", "boring plot"]


def _reference(hf, texts):
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf["dir"])
    batch = tokenizer(texts, padding=True, truncation=True, max_length=32, return_tensors="pt")
    with torch.no_grad():
        states = hf["model"](**batch).last_hidden_state
    weights = batch["attention_mask"][:, :, None].float()
    x = ((states * weights).sum(1) / weights.sum(1)).numpy()
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("queries", [QUERIES, []], ids=["queries", "every-line"])
def test_neighbours_equal_transformers_mean_pooling(queries, tmp_path):
    from garden import analyze, convert

    hf = write_hf_bert(str(tmp_path / "hf"), seed=9)
    out = tmp_path / "converted"
    assert convert.main(["--source=huggingface", "--model=bert", f"--input={hf['dir']}",
                         f"--output={out}"]) == 0
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(LINES) + "\n")
    assert analyze.main(["neighbours", f"--model={out}", f"--input={corpus}", "--top_k=3",
                         "--max_seq_length=32", f"--output={tmp_path / 'report'}",
                         *[f"--query={q}" for q in queries]]) == 0
    result = json.loads((tmp_path / "report" / "neighbours.json").read_text())
    lines = _reference(hf, LINES)
    cosines = (_reference(hf, queries) if queries else lines) @ lines.T
    if not queries:
        np.fill_diagonal(cosines, -np.inf)
    assert [q["text"] for q in result["queries"]] == (queries or LINES)
    for q, entry in enumerate(result["queries"]):
        expected = np.argsort(-cosines[q], kind="stable")[:3]
        assert [n["line"] for n in entry["neighbours"]] == expected.tolist(), entry
        np.testing.assert_allclose([n["cosine"] for n in entry["neighbours"]],
                                   cosines[q, expected], atol=1e-5)
        assert all(n["text"] == LINES[n["line"]] for n in entry["neighbours"])


def test_a_backbone_without_segment_ids_embeds_what_it_reads(tmp_path):
    """DistilBERT takes no segment_ids, which the "bert" layout packs: its embeddings are those
    of its own inputs alone (a functional model handed the extra key reads the wrong tensors)."""
    from representation_testing import tiny_bert

    from garden.bertology import neighbours
    from garden.models.distilbert.backbone import DistilBertBackbone

    _, packer, _ = tiny_bert(tmp_path, ["the", "movie", "was", "good", "bad"])
    backbone = DistilBertBackbone(vocab_size=packer.vocab_size, num_layers=1, hidden_size=16,
                                  num_heads=2, intermediate_size=32, dropout=0.0)
    texts = ["the movie was good", "bad"]
    inputs = packer.encode_numpy(texts)
    states = backbone({"token_ids": inputs["token_ids"], "padding_mask": inputs["padding_mask"]},
                      training=False)["sequence_output"].numpy()
    mask = inputs["padding_mask"][:, :, None]
    expected = (states * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(neighbours.embed(backbone, packer, texts), expected, atol=1e-6)
