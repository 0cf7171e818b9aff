"""`garden.convert --source=tf1 --model=electra`: original google-research/electra checkpoints.

Nothing is downloaded: a tiny garden ElectraPretrainer (generator + discriminator sharing the
embeddings) with large random weights is written as a name-based TF1 checkpoint (tf.compat.v1
Saver) under the released variable names, by an inverse mapping written here from our weight
paths (independently of the converter's TF1 -> Hugging Face table); converting it back must
give the same discriminator and generator outputs.
"""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden import convert
from garden.models.electra.presets import untrained_electra_pretrainer
from convert_testing import (WORDS, convert_tf1_with_cli, finetune_classification_from,
                             garden_block_to_tf1, step0_backbone)

TOLERANCE = 1e-4
V = 60
# The discriminator's hyperparameters (ElectraConfig names); the generator's sizes (H 16, one
# head, FFN 32) are read from its weights.
CONFIG = dict(vocab_size=V, embedding_size=16, hidden_size=32, num_attention_heads=2,
              intermediate_size=64, num_hidden_layers=2, max_position_embeddings=40,
              type_vocab_size=2, hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0)


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    model = untrained_electra_pretrainer(
        "electra_small", mask_token_id=4, vocab_size=V, num_layers=2, embedding_size=16,
        hidden_size=32, num_heads=2, intermediate_size=64, max_sequence_length=40, dropout=0.0,
        generator_overrides=dict(hidden_size=16, num_heads=1, intermediate_size=32))
    rng = np.random.default_rng(seed)
    for w in model.weights:  # far from the 0.02 init, so that every op matters
        shift = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(shift + 0.2 * rng.standard_normal(tuple(w.shape)).astype("float32"))
    return model


_BLOCK_TABLE = {"attention_layer_norm": "attention/output/LayerNorm",
                "output_layer_norm": "output/LayerNorm",
                "intermediate_dense": "intermediate/dense", "output_dense": "output/dense"}


def _block(scope, rest, value):
    """One Transformer block weight -> (TF1 name under scope/encoder/layer_i, TF1 array)."""
    return garden_block_to_tf1(scope, "attention", _BLOCK_TABLE, rest, value)


def _tf1_name_and_value(tower, path, value):
    """Our path in the discriminator or generator model -> (released TF1 name, array)."""
    embeddings = {"token_embedding/embeddings": "word_embeddings",
                  "position_embedding/embeddings": "position_embeddings",
                  "segment_embedding/embeddings": "token_type_embeddings",
                  "layer_norm/gamma": "LayerNorm/gamma", "layer_norm/beta": "LayerNorm/beta"}
    if path.startswith("embeddings/"):  # shared: the discriminator's scope
        return "electra/embeddings/" + embeddings[path[len("embeddings/"):]], value
    scope = "electra" if tower == "discriminator" else "generator"
    if path.startswith("embeddings_project/"):
        return f"{scope}/{path}", value
    m = re.fullmatch(r"transformer_layer_(\d+)/(.+)", path)
    if m:
        return _block(f"{scope}/encoder/layer_{m.group(1)}/", m.group(2), value)
    heads = {"discriminator_head/dense/": "discriminator_predictions/dense/",
             "discriminator_head/dense_prediction/": "discriminator_predictions/dense_1/",
             "masked_lm_head/transform_dense/": "generator_predictions/dense/",
             "masked_lm_head/layer_norm/": "generator_predictions/LayerNorm/",
             "masked_lm_head/output_bias": "generator_predictions/output_bias"}
    for ours, theirs in heads.items():
        if path.startswith(ours):
            return theirs + path[len(ours):], value
    raise AssertionError(f"no TF1 name for {tower} {path}")


def _tf1_arrays(model, towers=("discriminator", "generator")):
    arrays = {}
    for tower in towers:
        for w in getattr(model, f"{tower}_model").weights:
            name, value = _tf1_name_and_value(tower, w.path, w.numpy())
            arrays[name] = value  # the shared embeddings come twice, identical
    return arrays


def _save(arrays, prefix):
    arrays = dict(arrays)
    arrays.update({f"{n}/adam_v": np.zeros_like(v) for n, v in list(arrays.items())[:3]})
    arrays["global_step"] = np.array(7, np.int64)
    with tf.Graph().as_default():
        variables = {n: tf.compat.v1.Variable(v) for n, v in arrays.items()}
        saver = tf.compat.v1.train.Saver(var_list=variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)


def _inputs():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, V, (2, 12)).astype("int32")
    mask = np.ones_like(ids)
    mask[0, 10:] = 0
    return {"token_ids": ids, "segment_ids": np.zeros_like(ids), "padding_mask": mask}


def _max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("electra_tf1")
    model = _model()
    _save(_tf1_arrays(model), str(root / "model.ckpt-7"))
    with open(root / "config.json", "w") as f:
        json.dump(CONFIG, f)
    return model, str(root / "model.ckpt-7"), str(root / "config.json")


def test_names_are_the_released_ones(checkpoint):
    _, prefix, _ = checkpoint
    names = set(tf.train.load_checkpoint(prefix).get_variable_to_shape_map())
    for name in ("electra/embeddings/word_embeddings", "electra/embeddings_project/kernel",
                 "electra/encoder/layer_1/attention/self/query/kernel",
                 "generator/encoder/layer_0/intermediate/dense/kernel",
                 "generator_predictions/output_bias", "discriminator_predictions/dense_1/kernel"):
        assert name in names, name
    assert not any(n.startswith("generator/embeddings/") for n in names)  # shared embeddings


def test_both_towers_match_the_original(checkpoint):
    model, prefix, config = checkpoint
    converted = convert.load_tf1(prefix, "electra", config)
    inputs = _inputs()
    assert _max_diff(model.discriminator_model(inputs), converted["pretrainer"](inputs)) <= TOLERANCE
    assert _max_diff({"h": model.discriminator(inputs)["sequence_output"]},
                     {"h": converted["backbone"](inputs)["sequence_output"]}) <= TOLERANCE
    gen_inputs = dict(inputs, masked_lm_positions=np.array([[1, 5], [2, 9]], "int32"))
    assert _max_diff(model.generator_model(gen_inputs), converted["generator"](gen_inputs)) <= TOLERANCE
    generator = converted["generator"].backbone
    assert (generator.hidden_size, generator.num_heads, generator.intermediate_size) == (16, 1, 32)


def test_discriminator_only_checkpoint(checkpoint, tmp_path):
    model, _, _ = checkpoint
    prefix = str(tmp_path / "disc.ckpt")
    _save(_tf1_arrays(model, towers=("discriminator",)), prefix)
    converted = convert.load_tf1(prefix, "electra", CONFIG)
    assert converted["generator"] is None
    assert _max_diff(model.discriminator_model(_inputs()), converted["pretrainer"](_inputs())) <= TOLERANCE


def test_cli_writes_the_discriminator(checkpoint, tmp_path):
    model, prefix, config = checkpoint
    out = tmp_path / "out"
    loaded = convert_tf1_with_cli("electra", prefix, config, out)
    assert _max_diff(model.discriminator_model(_inputs()), loaded(_inputs())) <= TOLERANCE


def test_unknown_variables_are_named(checkpoint, tmp_path):
    model, _, _ = checkpoint
    arrays = _tf1_arrays(model)
    arrays["electra/encoder/layer_0/attention/self/rotary/kernel"] = np.ones(2, np.float32)
    from garden.models.electra.conversion import from_tf1
    with pytest.raises(ValueError, match="rotary"):
        from_tf1(CONFIG, arrays)


def test_release_with_vocab_fine_tunes_into_classification(checkpoint, tmp_path):
    """The release's folder (model.ckpt + vocab.txt, as google-research/electra publishes it)
    converted by the CLI is a starting point: the classifier's backbone at step 0 is the
    original discriminator, it fine-tunes through garden.train and its export answers."""
    from garden.tasks.classification import Classification

    model, prefix, config = checkpoint
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    tokens += [f"[unused{i}]" for i in range(V - len(tokens))]
    assert len(tokens) == V
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n")
    release = tmp_path / "electra_tiny"
    release.mkdir()
    for name in tf.io.gfile.glob(prefix + "*"):
        tf.io.gfile.copy(name, str(release / name.split("/")[-1]))
    (release / "vocab.txt").write_text((tmp_path / "vocab.txt").read_text())
    out = tmp_path / "out"
    # (google-research/electra's releases are uncased; the folder name does not say so)
    convert_tf1_with_cli("electra", str(release / "model.ckpt-7"), config, out, "--lower_case")
    info = json.loads((out / "convert_info.json").read_text())
    assert info["tokenizer"]["tokenizer"] == "wordpiece", info["tokenizer"]
    (tmp_path / "t.tsv").write_text("text_a\tlabel\nthe movie was good\tpos\nbad\tneg\n")
    task, backbone = step0_backbone(out, Classification, train_file=str(tmp_path / "t.tsv"),
                                    eval_file=str(tmp_path / "t.tsv"), max_seq_length=12)
    assert task.packer.vocab_size == V
    inputs = _inputs()
    assert _max_diff({"h": model.discriminator(inputs)["sequence_output"]},
                     {"h": backbone(inputs, training=False)["sequence_output"]}) <= TOLERANCE
    labels = finetune_classification_from(
        out, tmp_path, "--gin_param=garden.Classification.max_seq_length=32")
    assert labels and set(labels) <= {"pos", "neg"}, labels
