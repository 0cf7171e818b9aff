"""garden.bertology.prune: head importance (|dL/d xi|), its normalisation, iterative pruning
(Michel et al. 2019), the smaller model without the pruned heads' weights, and its directory
fine-tuned and exported through garden.train."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.bertology import prune
from garden.models.bert.backbone import BertBackbone
from garden.models.instrument import layer_blocks, run

LAYERS, HEADS, HIDDEN, CLASSES = 2, 4, 32, 3
WIDTH = HIDDEN // HEADS
rng = np.random.default_rng(0)
IDS = rng.integers(5, 30, size=(6, 7)).astype("int32")
IDS[:, 0], IDS[3:, 5:] = 2, 0
BATCH = {"token_ids": IDS, "segment_ids": 0 * IDS, "padding_mask": (IDS > 0).astype("int32"),
         "label": np.array([0, 1, 2, 0, 1, 2])}


def _loss(batch, logits):
    return tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(
        batch["label"], logits, from_logits=True))


def _classifier(backbone, dense=None):
    """A task model: a dense layer on the pooled output, taking the backbone's inputs."""
    dense = dense or keras.layers.Dense(CLASSES, name="classifier")
    return keras.Model(backbone.input, dense(backbone(backbone.input)["pooled_output"])), dense


@pytest.fixture(scope="module")
def backbone():
    model = BertBackbone(vocab_size=30, num_layers=LAYERS, hidden_size=HIDDEN, num_heads=HEADS,
                         intermediate_size=64, max_sequence_length=128, dropout=0.0,
                         use_head_mask=True)
    weights = np.random.default_rng(1)  # far from the 0.02 init, so that heads differ visibly
    model.set_weights([weights.normal(scale=0.3, size=w.shape) if len(w.shape) > 1 else w
                       for w in model.get_weights()])
    return model


@pytest.fixture(scope="module")
def classifier(backbone):
    return _classifier(backbone)


def test_a_head_with_zero_output_has_zero_importance(backbone):
    copy = BertBackbone.from_config(backbone.get_config())
    copy.set_weights(backbone.get_weights())
    value = layer_blocks(copy)[0].attention.value_dense  # layer 0 head 1: values zeroed
    for variable in (value.kernel, value.bias):
        zeroed = variable.numpy()
        zeroed[..., 1, :] = 0
        variable.assign(zeroed)
    output = layer_blocks(copy)[1].attention.output_dense.kernel  # layer 1 head 3: no output
    zeroed = output.numpy()
    zeroed[3] = 0
    output.assign(zeroed)
    model, _ = _classifier(copy)
    importance = prune.head_importance(model, [BATCH], _loss)
    assert importance[0, 1] == 0 and importance[1, 3] == 0
    others = np.delete(importance.reshape(-1), [1, HEADS + 3])
    assert np.all(others > 1e-6), importance


def test_importance_is_the_absolute_gradient_of_the_loss(classifier):
    model, _ = classifier
    importance = prune.head_importance(model, [BATCH, BATCH], _loss)
    for layer, head in ((0, 2), (1, 0)):
        def loss_at(xi):
            mask = np.ones((LAYERS, HEADS), "float32")
            mask[layer, head] = xi
            return float(_loss(BATCH, run(model, BATCH, mask)))
        slope = (loss_at(1 + 1e-2) - loss_at(1 - 1e-2)) / 2e-2  # central difference
        assert importance[layer, head] == pytest.approx(abs(slope), rel=1e-2)
    # Masked heads score 0: they are gone.
    mask = np.ones((LAYERS, HEADS), "float32")
    mask[1, 2] = 0
    assert prune.head_importance(model, [BATCH], _loss, mask)[1, 2] == 0


def test_normalisation_per_layer_gives_unit_norm_and_globally_0_to_1():
    raw = np.array([[3.0, 4.0, 0.0], [1.0, 1.0, 1.0]])
    by_layer = prune.normalize_importance(raw)
    np.testing.assert_allclose(np.linalg.norm(by_layer, axis=1), [1, 1])
    np.testing.assert_allclose(by_layer[0], [0.6, 0.8, 0])
    both = prune.normalize_importance(raw, globally=True)
    assert both.min() == 0 and both.max() == 1 and both[0, 1] == 1
    assert np.all(prune.normalize_importance(np.zeros((2, 3))) == 0)  # no division by 0


def test_heads_to_prune_takes_the_least_important_and_leaves_a_head_per_layer():
    importance = np.array([[0.1, 0.2, 0.9], [0.05, 0.8, 0.7]])
    mask = prune.heads_to_prune(importance, np.ones((2, 3)), 2)
    np.testing.assert_array_equal(mask, [[0, 1, 1], [0, 1, 1]])
    # Layer 1 may lose only one more head: its last one is kept whatever its importance.
    mask = prune.heads_to_prune(np.array([[0.9, 0.9, 0.9], [0.1, 0.0, 0.2]]), mask, 3)
    np.testing.assert_array_equal(mask, [[0, 0, 1], [0, 0, 1]])
    assert (prune.heads_to_prune(importance, mask, 5) == mask).all()  # nothing may go


def test_iterative_pruning_stops_below_the_threshold_and_reestimates(classifier):
    model, _ = classifier
    kept_share = lambda mask: float(np.mean(mask))  # noqa: E731 - a metric of known shape
    result = prune.prune_heads(model, [BATCH], _loss, kept_share, step=0.125, threshold=0.6)
    # One head (12.5% of 8) per step: 1, 0.875, 0.75, 0.625, then 0.5 < 0.6 * 1 stops.
    assert [p["metric"] for p in result["curve"]] == [1, 0.875, 0.75, 0.625, 0.5]
    assert [p["share_pruned"] for p in result["curve"]] == [0, 0.125, 0.25, 0.375, 0.5]
    assert result["stopped"] == "threshold" and np.sum(result["head_mask"]) == 5
    # Each step removed the least important head of that step's own estimate.
    mask = np.ones((LAYERS, HEADS))
    for importance in result["importance"][:3]:
        importance = np.where(mask > 0, importance, np.inf)
        layer, head = np.unravel_index(np.argmin(importance), mask.shape)
        mask[layer, head] = 0
    np.testing.assert_array_equal(mask, result["head_mask"])
    # Step 2's estimate is made with step 1's head masked, not step 1's estimate renormalised.
    first = prune.normalize_importance(prune.head_importance(model, [BATCH], _loss))
    np.testing.assert_allclose(result["importance"][0], first, rtol=1e-6)
    after_one = np.where(np.isclose(first, first.min()), 0, 1)
    second = prune.normalize_importance(prune.head_importance(model, [BATCH], _loss, after_one))
    np.testing.assert_allclose(result["importance"][1], second, rtol=1e-6)
    assert np.abs(second - prune.normalize_importance(first * after_one)).max() > 1e-3
    everything = prune.prune_heads(model, [BATCH], _loss, kept_share, threshold=0.0)
    assert everything["stopped"] == "min_heads_per_layer"
    assert np.sum(everything["head_mask"], axis=1).tolist() == [1, 1]


def test_pruning_curve_plot(tmp_path):
    result = {"baseline": 0.8, "threshold": 0.9,
              "curve": [{"share_pruned": 0.0, "metric": 0.8}, {"share_pruned": 0.1,
                                                                "metric": 0.7}]}
    path = prune.plot_pruning_curve({"bert": result, "other": result}, str(tmp_path / "c.png"))
    assert (tmp_path / "c.png").stat().st_size > 1000 and path.endswith("c.png")


MASK = np.array([[1, 0, 1, 0], [0, 0, 1, 0]], "float32")


def test_pruned_model_gives_the_masked_logits_with_fewer_parameters(backbone, classifier):
    model, dense = classifier
    smaller = prune.pruned_backbone(backbone, MASK)
    assert smaller.get_config()["num_heads_per_layer"] == [2, 1]
    assert [b.attention.query_dense.kernel.shape for b in layer_blocks(smaller)] == \
        [(HIDDEN, 2, WIDTH), (HIDDEN, 1, WIDTH)]
    small_model, _ = _classifier(smaller, dense)
    masked = run(model, BATCH, MASK)
    ones = np.ones((LAYERS, HEADS), "float32")
    pruned = run(small_model, BATCH, ones)  # rows of [L, A]: the kept heads read the first
    np.testing.assert_allclose(pruned, masked, atol=1e-5)
    assert np.abs(masked - run(model, BATCH)).max() > 1e-3  # the mask changed the logits
    # 5 heads, each with d columns of q/k/v (kernel + bias) and d rows of the output kernel.
    removed = 5 * (4 * HIDDEN * WIDTH + 3 * WIDTH)
    assert backbone.count_params() - smaller.count_params() == removed
    # A pruned model prunes again: its row i's first num_heads_per_layer[i] entries count.
    again = prune.pruned_backbone(smaller, np.array([[0, 1, 1, 1], [1, 0, 0, 0]]))
    assert again.get_config()["num_heads_per_layer"] == [1, 1]
    mask = MASK.copy()
    mask[0, 0] = 0
    np.testing.assert_allclose(run(_classifier(again, dense)[0], BATCH, ones),
                               run(model, BATCH, mask), atol=1e-5)
    with pytest.raises(ValueError, match="keep at least one"):
        prune.pruned_backbone(backbone, np.array([[1, 1, 1, 1], [0, 0, 0, 0]]))


def test_pruned_attention_probabilities_are_padded(backbone):
    full = BertBackbone.from_config({**backbone.get_config(), "output_attentions": True})
    full.set_weights(backbone.get_weights())
    smaller = prune.pruned_backbone(full, MASK)
    probs = run(smaller, BATCH)["attention_probs"]
    masked = run(full, BATCH, MASK)["attention_probs"]
    assert probs.shape == masked.shape[:2] + (2,) + masked.shape[3:]  # [L, B, 2 (most), T, T]
    np.testing.assert_allclose(probs[0], masked[0][:, [0, 2]], atol=1e-6)
    np.testing.assert_allclose(probs[1, :, 0], masked[1, :, 2], atol=1e-6)
    assert np.all(probs[1, :, 1] == 0)


def test_pruned_directory_fine_tunes_and_exports(backbone, tmp_path):
    from convert_testing import bert_vocab_tokens, finetune_classification_from

    tokens = bert_vocab_tokens()
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokens) + "\n")
    big = BertBackbone.from_config({**backbone.get_config(), "vocab_size": len(tokens)})
    out = prune.write_pruned(str(tmp_path / "pruned"), prune.pruned_backbone(big, MASK),
                             "bert", str(vocab), True, info={"head_mask": MASK.tolist()})
    info = json.loads((tmp_path / "pruned" / "convert_info.json").read_text())
    config = info["architecture"]["config"]
    assert config["num_heads_per_layer"] == [2, 1] and not config["use_head_mask"]
    assert info["tokenizer"]["vocab"] == "vocab.txt" and info["tokenizer"]["lower_case"]
    labels = finetune_classification_from(out, tmp_path, "--gin_param=garden."
                                          "Classification.max_seq_length=32")
    assert len(labels) == 2 and all(labels), labels
    # The fine-tuned model's kernels are the smaller ones: 2 and 1 heads of width d in q/k/v
    # [H, A, d] and in the attention output [A, d, H].
    reader = tf.train.load_checkpoint(str(tmp_path / "finetune" / "checkpoints"))
    shapes = [tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()
              if name.startswith("optimizer/_trainable_variables/") and len(shape) == 3]
    assert sorted(shapes) == sorted([(HIDDEN, 1, WIDTH)] * 3 + [(HIDDEN, 2, WIDTH)] * 3 +
                                    [(1, WIDTH, HIDDEN), (2, WIDTH, HIDDEN)]), shapes
    with pytest.raises(FileExistsError):
        prune.write_pruned(out, big, "bert", str(vocab), True)


@pytest.mark.parametrize("family", ["roberta", "electra", "distilbert"])
def test_other_encoder_families_prune_to_the_masked_outputs(family):
    from garden.models.distilbert.backbone import DistilBertBackbone
    from garden.models.electra.backbone import ElectraBackbone
    from garden.models.roberta.backbone import RobertaBackbone

    size = dict(vocab_size=30, num_layers=LAYERS, hidden_size=HIDDEN, num_heads=HEADS,
                intermediate_size=64, dropout=0.0, use_head_mask=True)
    backbone = {"roberta": lambda: RobertaBackbone(**size),
                "electra": lambda: ElectraBackbone(embedding_size=16, **size),  # projected
                "distilbert": lambda: DistilBertBackbone(attention_dropout=0.0, **size)}[family]()
    weights = np.random.default_rng(2)
    backbone.set_weights([w + weights.normal(scale=0.3, size=w.shape)
                          for w in backbone.get_weights()])
    batch = {**BATCH, "token_ids": np.where(IDS > 0, IDS, 1)}  # RoBERTa's padding id is 1
    smaller = prune.pruned_backbone(backbone, MASK)
    masked, pruned = run(backbone, batch, MASK), run(smaller, batch)
    np.testing.assert_allclose(pruned["sequence_output"], masked["sequence_output"], atol=1e-5)
    assert np.abs(masked["sequence_output"] - run(backbone, batch)["sequence_output"]).max() > 1e-3
    assert backbone.count_params() - smaller.count_params() == 5 * (4 * HIDDEN * WIDTH + 3 * WIDTH)


def test_albert_shared_block_is_refused():
    from garden.models.albert.backbone import AlbertBackbone

    albert = AlbertBackbone(vocab_size=30, num_layers=2, hidden_size=16, num_heads=2,
                            intermediate_size=32, embedding_size=8)
    with pytest.raises(ValueError, match="cannot be removed"):
        prune.pruned_backbone(albert, np.ones((2, 2)))
