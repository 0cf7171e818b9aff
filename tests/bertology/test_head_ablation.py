"""garden.bertology.heads: disabling a head, zeroed or uniform, against models edited by hand."""

import keras
import numpy as np
import pytest

from garden.bertology import heads
from garden.models.bert.presets import untrained_bert_backbone
from garden.models.instrument import instrumented, layer_blocks, run

IDS = np.array([[2, 7, 8, 9, 3, 0], [2, 10, 3, 0, 0, 0]], "int32")
BATCH = {"token_ids": IDS, "segment_ids": 0 * IDS, "padding_mask": (IDS > 0).astype("int32")}
WEIGHTS = np.random.default_rng(0).normal(size=(2, 6, 128))


def _metric(outputs):
    """A float that every weight and every real position moves."""
    return float(np.sum(outputs["sequence_output"] * WEIGHTS * BATCH["padding_mask"][..., None]))


@pytest.fixture(scope="module")
def backbone():
    model = untrained_bert_backbone("bert_tiny", vocab_size=20, dropout=0.0,
                                      use_head_mask=True, output_attentions=True)
    rng = np.random.default_rng(1)  # larger weights than the init, so heads differ visibly
    for block in layer_blocks(model):
        for dense in (block.attention.query_dense, block.attention.key_dense):
            dense.kernel.assign(rng.normal(scale=0.3, size=dense.kernel.shape))
    return model


def _with_output_rows_zeroed(model, layer, head):
    """A copy of `model` whose layer `layer` attention output kernel [A, d, H] has the rows of
    `head` (an int or a slice) set to 0: that head contributes nothing."""
    copy = type(model).from_config(model.get_config())
    copy.set_weights(model.get_weights())
    kernel = layer_blocks(copy)[layer].attention.output_dense.kernel
    value = kernel.numpy()
    value[head] = 0
    kernel.assign(value)
    return copy


def test_zeroed_head_equals_removing_its_output_and_uniform_differs(backbone):
    result = heads.head_ablation(backbone, BATCH, _metric)
    assert (result["num_layers"], result["num_heads"]) == (2, 2)
    assert result["baseline"] == pytest.approx(_metric(run(backbone, BATCH)), rel=1e-6)
    for layer, head in ((0, 1), (1, 0)):
        removed = _metric(run(_with_output_rows_zeroed(backbone, layer, head), BATCH))
        assert result["heads"]["zero"][layer][head] == pytest.approx(removed, rel=1e-5)
        assert abs(result["heads"]["zero"][layer][head] - result["baseline"]) > 1e-3
        assert abs(result["heads"]["uniform"][layer][head] - removed) > 1e-3
    whole = _metric(run(_with_output_rows_zeroed(backbone, 1, slice(None)), BATCH))
    assert result["layers"]["zero"][1] == pytest.approx(whole, rel=1e-5)
    # The switch is put back: the model scales again.
    assert all(layer.head_mask_mode == "scale" for layer in
               [block.attention for block in layer_blocks(backbone)])


def test_one_head_kept_alone_in_its_layer(backbone):
    """bert_tiny has 2 heads a layer: keeping head h alone is disabling the other one, which
    equals zeroing the other's output rows by hand; the best single head is the larger."""
    result = heads.head_ablation(backbone, BATCH, _metric)
    for mode in heads.MODES:
        only, disabled = np.asarray(result["only_head"][mode]), np.asarray(result["heads"][mode])
        np.testing.assert_allclose(only, disabled[:, ::-1], rtol=1e-6)
        best = result["best_single_head"][mode]
        assert best["head"] == only.argmax(1).tolist() and best["metric"] == only.max(1).tolist()
    kept = _metric(run(_with_output_rows_zeroed(backbone, 1, 1), BATCH))
    assert result["only_head"]["zero"][1][0] == pytest.approx(kept, rel=1e-5)


def test_uniform_mode_makes_the_head_attend_evenly_over_the_real_tokens(backbone):
    # The metric reads the disabled head's own probabilities: layer 0, head 1, sequence 1
    # (3 real tokens), query 0 -> key 0.
    result = heads.head_ablation(backbone, BATCH,
                                 lambda out: out["attention_probs"][0, 1, 1, 0, 0])
    assert result["heads"]["uniform"][0][1] == pytest.approx(1 / 3, abs=1e-6)
    assert result["heads"]["zero"][0][1] == 0
    assert result["layers"]["uniform"][0] == pytest.approx(1 / 3, abs=1e-6)
    assert result["baseline"] != pytest.approx(1 / 3, abs=1e-3)


def test_a_head_with_no_output_changes_nothing_when_disabled(backbone, tmp_path):
    silent = _with_output_rows_zeroed(backbone, 0, 0)
    result = heads.head_ablation(silent, BATCH, _metric)
    for mode in heads.MODES:
        assert result["heads"][mode][0][0] == pytest.approx(result["baseline"], rel=1e-6)
        assert result["heads"][mode][0][1] != pytest.approx(result["baseline"], rel=1e-4)
    path = heads.plot_head_ablation(result, str(tmp_path / "heads.png"))
    with open(path, "rb") as f:
        assert f.read(4) == b"\x89PNG"


def test_a_task_model_around_the_backbone_and_a_plain_backbone():
    plain = untrained_bert_backbone("bert_tiny", vocab_size=20, dropout=0.0)
    masked = instrumented(plain, use_head_mask=True)
    task = keras.Model(masked.input,
                       keras.layers.Dense(1, name="score")(masked.output["pooled_output"]))
    on_task = heads.head_ablation(task, BATCH, lambda out: float(out.sum()), modes=("zero",))
    on_plain = heads.head_ablation(plain, BATCH, _metric, modes=("uniform",))
    assert set(on_task["heads"]) == {"zero"} and set(on_plain["heads"]) == {"uniform"}
    with pytest.raises(ValueError, match="unknown modes"):
        heads.head_ablation(plain, BATCH, _metric, modes=("random",))
    with pytest.raises(ValueError, match="use_head_mask=True"):
        heads.head_ablation(keras.Model(plain.input, plain.output), BATCH, _metric)
