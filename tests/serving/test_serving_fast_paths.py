"""The serving-only fast path, on a tiny BERT classifier: ClassificationServing over a
BertBackbone classifier computes the last block for the [CLS] row only (fewer FLOPs than the
model's own call, the same logits, padded rows included, in process and from the export), and
a failed export leaves nothing behind. (The export's graph and other outputs:
tests/serving/test_export.py.)
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from garden.serving import export
from garden.serving.classification import ClassificationServing
from serve_testing import tiny_classifier

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "the", "movie", "was", "good", "bad", "great", "plot", "##s", "not", ".", "!"]
TEXTS = ["The movie was good.", "the plots were bad , not great great great great !", ""]
LAYERS = 2  # bert_tiny


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("classifier_export")
    model, packer, vocab = tiny_classifier(root, VOCAB, 3, 12)
    module = ClassificationServing(model, packer, vocab, ["no", "yes"], text_b=False)
    exported = export.export(module, str(root), "classifier")
    return {"model": model, "module": module, "packer": packer, "export": exported}


def test_the_export_equals_the_keras_model(exports):
    ids = exports["packer"].encode_numpy(TEXTS)
    assert ids["padding_mask"].min() == 0  # padded rows are part of the check
    expected = exports["model"]({k: tf.constant(v) for k, v in ids.items()},
                                training=False)["logits"].numpy()
    loaded = tf.saved_model.load(exports["export"])
    by_ids = loaded.signatures["serving_ids"](**{k: tf.constant(v) for k, v in ids.items()})
    by_text = loaded.signatures["serving_default"](text_a=tf.constant(TEXTS))
    np.testing.assert_allclose(by_ids["logits"].numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(by_text["logits"].numpy(), expected, atol=1e-5)


def _flops(fn, batch, length):
    spec = {k: tf.TensorSpec([batch, length], tf.int32)
            for k in ("token_ids", "segment_ids", "padding_mask")}
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    graph = tf.function(fn, autograph=False).get_concrete_function(spec).graph
    return tf.compat.v1.profiler.profile(graph=graph, options=options).total_float_ops


def test_classifier_serving_computes_the_last_block_for_cls_only(exports):
    model, module = exports["model"], exports["module"]
    full = _flops(lambda x: model(x, training=False)["logits"], 2, 12)
    cls_only = _flops(module._logits, 2, 12)
    # bert_tiny, 12 tokens: the last of 2 blocks computes queries, attention output and
    # feed-forward for 1 row of 12 (keys and values for all): about a third less.
    assert cls_only < 0.75 * full, (cls_only, full)
    ids = exports["packer"].encode_numpy(TEXTS)
    inputs = {k: tf.constant(v) for k, v in ids.items()}
    np.testing.assert_allclose(module._logits(inputs).numpy(),
                               model(inputs, training=False)["logits"].numpy(), atol=1e-5)


def test_a_failed_export_leaves_nothing_behind(exports, tmp_path, monkeypatch):
    # A failure after the SavedModel is written (here: the serving-ops check refuses it)
    # removes the half-written version.
    monkeypatch.setattr(export, "check_serving_ops",
                        lambda path: {"ok": False, "problems": ["refused by the test"]})
    with pytest.raises(export.ExportError, match="refused by the test"):
        export.export(exports["module"], str(tmp_path), "failed")
    assert os.listdir(tmp_path / "failed") == []
