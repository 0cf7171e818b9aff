"""The multiple-choice export (garden.serving.multiple_choice) of a tiny BERT MultipleChoiceModel,
loaded in a fresh process (tensorflow + tensorflow_text only): serving_default on raw context +
endings and serving_ids give the Keras model's probabilities and choices; bad shapes answer
InvalidArgumentError; the warmup requests and metadata are written."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.multiple_choice import MultipleChoiceModel
from garden.serving import export
from garden.serving.multiple_choice import MultipleChoiceServing, pack_choices
from garden.serving.text import TextPacker
from testing import run_code

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog",
         "ran", "away", "a", "he", "she", "##s", "."]
CONTEXTS = ["The cat sat on the mat.", "He ran away."]
ENDINGS = [["the dog ran", "she sat", "a mat.", "cats"], ["the cat", "away away", "he sat.", ""]]

SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops before loading

args = json.loads(sys.argv[1])
m = tf.saved_model.load(args["dir"])
out = {}
text = m.signatures["serving_default"](context=tf.constant(args["contexts"]),
                                       endings=tf.constant(args["endings"]))
out["text"] = {k: v.numpy().tolist() for k, v in text.items()}
ids = m.signatures["serving_ids"](**{k: tf.constant(v, tf.int32) for k, v in args["ids"].items()})
out["ids"] = {k: v.numpy().tolist() for k, v in ids.items()}
errors = {}
cases = {"three_endings": (args["contexts"], [e[:3] for e in args["endings"]]),
         "flat_endings": (args["contexts"], args["endings"][0]),
         "rows_differ": (args["contexts"][:1], args["endings"])}
for name, (context, endings) in cases.items():
    try:
        m.signatures["serving_default"](context=tf.constant(context), endings=tf.constant(endings))
        errors[name] = "no error"
    except tf.errors.InvalidArgumentError as e:
        errors[name] = e.message
out["errors"] = errors
print("RESULT" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("choice_export")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(11)
    model = MultipleChoiceModel(untrained_bert_backbone("bert_tiny", vocab_size=len(VOCAB)),
                                dropout=0.0)
    dense = model.get_layer("choice_dense")  # a larger head than its 0.02 init: distinct choices
    dense.kernel.assign(np.random.default_rng(0).normal(size=dense.kernel.shape).astype("float32"))
    packer = TextPacker(tokenizers.load_tokenizer("wordpiece", str(vocab), lower_case=True), 16)
    export_dir = export.export(
        MultipleChoiceServing(model, packer, str(vocab), warmup=[(CONTEXTS[0], ENDINGS[0])]),
        str(root / "exports"), "choice")
    inputs = {k: v.numpy() for k, v in pack_choices(packer, tf.constant(CONTEXTS),
                                                    tf.constant(ENDINGS)).items()}
    logits = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)["logits"]
    return export_dir, inputs, np.asarray(logits)


def test_fresh_process_gives_the_keras_answers(exported):
    export_dir, inputs, logits = exported
    # Choice i of row b is packed as the pair (context b, ending i): [CLS] context [SEP] ...
    assert inputs["token_ids"].shape == (2, 4, 16)
    assert (inputs["segment_ids"].max(-1) == 1).all()  # every choice has its second segment
    np.testing.assert_array_equal(inputs["token_ids"][:, :, 0], 2)  # [CLS] first
    args = {"dir": export_dir, "contexts": CONTEXTS, "endings": ENDINGS,
            "ids": {k: v.tolist() for k, v in inputs.items()}}
    proc = run_code(SERVE, json.dumps(args), CUDA_VISIBLE_DEVICES="")
    out = json.loads([l for l in proc.stdout.splitlines() if l.startswith("RESULT")][-1][6:])
    probabilities = tf.nn.softmax(logits).numpy()
    assert np.ptp(probabilities) > 5e-3  # the choices do get different scores
    for signature in ("text", "ids"):
        np.testing.assert_allclose(out[signature]["logits"], logits, atol=1e-5)
        np.testing.assert_allclose(out[signature]["probabilities"], probabilities, atol=1e-5)
        assert out[signature]["choice"] == logits.argmax(-1).tolist()
    assert "4 columns" in out["errors"]["three_endings"]
    assert "shape [batch, 4]" in out["errors"]["flat_endings"]
    assert "same number of rows" in out["errors"]["rows_differ"]


def test_warmup_and_metadata(exported):
    export_dir = exported[0]
    requests = export.read_warmup_requests(
        os.path.join(export_dir, "assets.extra", export.WARMUP_FILENAME))
    assert [r["signature_name"] for r in requests] == ["serving_default", "serving_ids"]
    assert requests[0]["inputs"]["endings"].shape == (1, 4)
    assert requests[1]["inputs"]["token_ids"].shape == (1, 4, 16)
    with open(os.path.join(export_dir, "assets.extra", export.METADATA_FILENAME)) as f:
        meta = json.load(f)
    assert meta["task"] == "multiple_choice" and meta["num_choices"] == 4
    assert meta["max_seq_length"] == 16 and meta["tokenizer"] == "wordpiece"
