import numpy as np
import keras
import pytest
import tensorflow as tf

from garden.models.bert.presets import untrained_bert_backbone
from garden.models.classification import SequenceClassifier
from garden.models.roberta.backbone import RobertaBackbone
from model_testing import padded_ids

VOCAB = 60


def _inputs(batch=4, length=10, seed=0):
    token_ids, padding_mask = padded_ids(VOCAB, batch, length, padded_row=0, pad_from=6,
                                         seed=seed)
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": padding_mask}


@pytest.fixture(scope="module")
def classifier():
    keras.utils.set_random_seed(3)
    backbone = untrained_bert_backbone("bert_tiny", vocab_size=VOCAB, num_layers=1)
    return SequenceClassifier(backbone, num_classes=3, dropout=0.1)


def test_logits_shape_and_dtype(classifier):
    out = classifier(_inputs())
    assert set(out) == {"logits"}
    assert tuple(out["logits"].shape) == (4, 3)
    assert out["logits"].dtype == "float32"


def test_logits_are_dense_on_pooled_output(classifier):
    inputs = _inputs()
    pooled = classifier.backbone(inputs, training=False)["pooled_output"].numpy()
    kernel, bias = (w.numpy() for w in classifier.classifier_dense.weights)
    np.testing.assert_allclose(classifier(inputs, training=False)["logits"].numpy(),
                               pooled @ kernel + bias, atol=1e-5)
    assert not bias.any() and 0.01 < kernel.std() < 0.02 and np.abs(kernel).max() <= 0.04 + 1e-6
    # Dropout 0.1 on the pooled output acts in training only.
    assert np.abs(classifier(inputs, training=True)["logits"].numpy()
                  - classifier(inputs, training=False)["logits"].numpy()).max() > 0


def _roberta_classifier():
    keras.utils.set_random_seed(5)
    backbone = RobertaBackbone(vocab_size=VOCAB, num_layers=1, hidden_size=32, num_heads=2,
                               intermediate_size=64, padding_idx=0)
    return SequenceClassifier(backbone, num_classes=3)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_config_and_save_load_round_trip(classifier, family, tmp_path):
    # RoBERTa has no segment input: the classifier takes the backbone's own input names.
    model = classifier if family == "bert" else _roberta_classifier()
    inputs = _inputs()
    if family == "roberta":
        del inputs["segment_ids"]
    assert sorted(model.input) == sorted(inputs)
    config = model.get_config()
    assert (config["num_classes"], config["dropout"]) == (3, 0.1)
    assert SequenceClassifier.from_config(config).get_config() == config
    model.save(str(tmp_path / "classifier.keras"))
    loaded = keras.models.load_model(str(tmp_path / "classifier.keras"))
    assert isinstance(loaded, SequenceClassifier)
    np.testing.assert_array_equal(loaded(inputs)["logits"].numpy(), model(inputs)["logits"].numpy())


def test_a_backbone_without_dict_inputs_is_refused():
    x = keras.Input((4,))
    flat = keras.Model(x, keras.layers.Dense(2)(x), name="flat")
    with pytest.raises(ValueError, match="backbone flat has inputs .*needs dict inputs"):
        SequenceClassifier(flat)


def test_learns_a_token_rule():
    # Label = whether token 1 occurs in the sequence: a few AdamW steps get the batch right.
    keras.utils.set_random_seed(4)
    model = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=VOCAB, num_layers=1),
                               num_classes=2)
    inputs = _inputs(batch=8, seed=1)
    inputs["token_ids"][inputs["token_ids"] == 1] = 2
    labels = np.array([0, 1] * 4, "int32")
    inputs["token_ids"][labels == 1, 3] = 1
    optimizer = keras.optimizers.AdamW(learning_rate=1e-3)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)["logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    first = float(step())
    for _ in range(29):
        last = float(step())
    assert last < 0.5 * first, (first, last)
    predicted = np.argmax(model(inputs, training=False)["logits"].numpy(), -1)
    np.testing.assert_array_equal(predicted, labels)
