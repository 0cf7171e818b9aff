"""Sentence embeddings (issue 36 item 8): `python -m garden.export_features --pooling=mean|cls`
on a garden.convert directory, the export's `embed` signature called in a process of its own.

A tiny random Hugging Face BERT, converted, embeds 100 sentences (short, long enough to be cut
at 32 pieces, cased, accented, other scripts and symbols, empty) as transformers does with its own tokenizer and
sentence-transformers' mean pooling (the sum of the last hidden states over the attention mask
divided by its count): embeddings and the 100 x 100 cosine similarities equal to 1e-5; the
"cls" export gives the first piece's hidden state. A request that is not a batch of texts is an
InvalidArgumentError naming the input.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import WORDS, write_hf_bert  # noqa: E402
from testing import run_code  # noqa: E402

SEQ = 32

_EMBED = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the export's tokenizer ops

texts = json.loads(sys.argv[2])
embed = tf.saved_model.load(sys.argv[1]).signatures["embed"]
bad = {}
for case, value in (("scalar", "one text"), ("matrix", [["a"], ["b"]])):
    try:
        embed(text=tf.constant(value))
        bad[case] = "answered"
    except tf.errors.InvalidArgumentError as e:
        bad[case] = e.message
print("BAD " + json.dumps(bad))
print("RESULT " + json.dumps(embed(text=tf.constant(texts))["embedding"].numpy().tolist()))
"""


def _sentences():
    rng = random.Random(0)
    words = list(WORDS)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(90)]
    texts += [" ".join(rng.choice(words) for _ in range(60)),  # cut at 32 pieces
              "The MOVIE was Good!", "café naïve résumé", "", "good ,bad.plot?",
              "a" * 120, "the  plot\twas\ngood", "GOOD GOOD good", "Ελληνικά 日本語 🙂 ½",
              "Plot: dull."]
    assert len(texts) == 100
    return texts


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from garden import convert, export_features

    root = tmp_path_factory.mktemp("embeddings")
    hf = write_hf_bert(str(root / "hf"), seed=5)
    out = root / "converted"
    assert convert.main(["--source=huggingface", "--model=bert", f"--input={hf['dir']}",
                         f"--output={out}"]) == 0
    for pooling in ("mean", "cls"):
        assert export_features.main([f"--model_dir={out}", f"--export_base={root / 'exports'}",
                                     f"--model_name={pooling}", f"--max_seq_length={SEQ}",
                                     f"--pooling={pooling}"]) == 0
    texts = _sentences()
    served, bad = {}, {}
    for pooling in ("mean", "cls"):
        stdout = run_code(_EMBED, str(root / "exports" / pooling / "1"), json.dumps(texts)).stdout
        line = next(l for l in stdout.splitlines() if l.startswith("RESULT "))
        served[pooling] = np.asarray(json.loads(line[len("RESULT "):]), np.float32)
        bad[pooling] = json.loads(next(l for l in stdout.splitlines()
                                       if l.startswith("BAD "))[len("BAD "):])
    return hf, texts, served, bad


def _transformers_states(hf, texts):
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf["dir"])
    batch = tokenizer(texts, padding=True, truncation=True, max_length=SEQ, return_tensors="pt")
    with torch.no_grad():
        states = hf["model"](**batch).last_hidden_state
    return states, batch["attention_mask"]


def _cosines(x):
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x @ x.T


def test_mean_pooled_embeddings_and_similarities_equal_transformers(exported):
    hf, texts, served, _ = exported
    states, mask = _transformers_states(hf, texts)
    weights = mask[:, :, None].float()
    expected = ((states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)).numpy()
    assert served["mean"].shape == expected.shape == (100, 32)
    np.testing.assert_allclose(served["mean"], expected, atol=1e-5)
    np.testing.assert_allclose(_cosines(served["mean"]), _cosines(expected), atol=1e-5)


def test_cls_pooling_is_the_first_piece(exported):
    hf, texts, served, _ = exported
    states, _ = _transformers_states(hf, texts)
    np.testing.assert_allclose(served["cls"], states[:, 0].numpy(), atol=1e-5)
    assert np.abs(served["cls"] - served["mean"]).max() > 1e-2  # the two poolings differ


def test_a_request_that_is_not_a_batch_of_texts_is_an_invalid_argument(exported):
    """A single string or a nested list sent to `embed`: InvalidArgumentError naming the input
    and the shape it takes, as serving_default answers; the export goes on serving (the good
    request after them answered above)."""
    for pooling, cases in exported[3].items():
        for case, message in cases.items():
            assert "text must be a batch of strings, shape [batch]" in message, (pooling, case,
                                                                                 message)
