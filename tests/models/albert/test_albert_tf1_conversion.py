"""`garden.convert --source=tf1 --model=albert`: original google-research/albert checkpoints.

Nothing is downloaded: a tiny garden ALBERT with large random weights is written as a name-based
TF1 checkpoint (tf.compat.v1 Saver) under the variable names of the released checkpoints, by an
inverse mapping written here from our weight paths (independently of the converter's
TF1 -> Hugging Face table); converting it back must give the same outputs.
"""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden import convert
from garden.models.albert.backbone import AlbertBackbone
from garden.models.albert.pretrainer import AlbertPretrainer
from convert_testing import (WORDS, convert_tf1_with_cli, finetune_classification_from,
                             garden_block_to_tf1, step0_backbone)

TOLERANCE = 1e-4

# albert_config.json of the tiny model (google-research/albert field names). hidden_act "gelu"
# is ALBERT's tanh-approximate GELU, our "gelu_new".
CONFIG = dict(vocab_size=60, embedding_size=16, hidden_size=32, num_attention_heads=4,
              intermediate_size=48, num_hidden_layers=4, num_hidden_groups=2, inner_group_num=1,
              hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
              max_position_embeddings=40, type_vocab_size=2, initializer_range=0.02,
              net_structure_type=0, gap_size=0, num_memory_blocks=0, down_scale_factor=1)


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    backbone = AlbertBackbone(vocab_size=60, num_layers=4, hidden_size=32, num_heads=4,
                              intermediate_size=48, embedding_size=16, max_sequence_length=40,
                              num_groups=2, share="all", dropout=0.0, activation="gelu_new")
    model = AlbertPretrainer(backbone)
    rng = np.random.default_rng(seed)
    # Far from the 0.02 init so that every activation and LayerNorm matters.
    for w in model.weights:
        shift = 1.0 if w.path.endswith("gamma") else 0.0
        w.assign(shift + 0.2 * rng.standard_normal(tuple(w.shape)).astype("float32"))
    return model


def _tf1_name_and_value(path, value):
    """Our weight path -> (released TF1 name, array in TF1 layout)."""
    simple = {
        "embeddings/token_embedding/embeddings": "bert/embeddings/word_embeddings",
        "embeddings/position_embedding/embeddings": "bert/embeddings/position_embeddings",
        "embeddings/segment_embedding/embeddings": "bert/embeddings/token_type_embeddings",
        "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
        "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
        "embeddings/projection/kernel": "bert/encoder/embedding_hidden_mapping_in/kernel",
        "embeddings/projection/bias": "bert/encoder/embedding_hidden_mapping_in/bias",
        "pooler_dense/kernel": "bert/pooler/dense/kernel",
        "pooler_dense/bias": "bert/pooler/dense/bias",
        "masked_lm_head/transform_dense/kernel": "cls/predictions/transform/dense/kernel",
        "masked_lm_head/transform_dense/bias": "cls/predictions/transform/dense/bias",
        "masked_lm_head/layer_norm/gamma": "cls/predictions/transform/LayerNorm/gamma",
        "masked_lm_head/layer_norm/beta": "cls/predictions/transform/LayerNorm/beta",
        "masked_lm_head/output_bias": "cls/predictions/output_bias",
        "sentence_order_head/bias": "cls/seq_relationship/output_bias",
    }
    if path in simple:
        return simple[path], value
    if path == "sentence_order_head/kernel":
        return "cls/seq_relationship/output_weights", value.T  # stored [2, H]
    m = re.fullmatch(r"transformer_layer_(\d+)/(.+)", path)
    group, rest = m.group(1), m.group(2)
    scope = f"bert/encoder/transformer/group_{group}/inner_group_0/"
    table = {"attention_layer_norm": "LayerNorm", "output_layer_norm": "LayerNorm_1",
             "intermediate_dense": "ffn_1/intermediate/dense",
             "output_dense": "ffn_1/intermediate/output/dense"}
    return garden_block_to_tf1(scope, "attention_1", table, rest, value)


def _write_tf1_checkpoint(model, prefix, extra=None):
    arrays = dict(_tf1_name_and_value(w.path, w.numpy()) for w in model.weights)
    # What a pretraining checkpoint holds besides the weights: Adam slots and the step.
    arrays.update({f"{n}/adam_m": np.zeros_like(v) for n, v in list(arrays.items())[:3]})
    arrays["global_step"] = np.array(1000, np.int64)
    arrays.update(extra or {})
    with tf.Graph().as_default():
        variables = {n: tf.compat.v1.Variable(v, name=n.replace(":", "_")) for n, v in arrays.items()}
        saver = tf.compat.v1.train.Saver(var_list=variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix, write_meta_graph=False)
    return arrays


def _inputs():
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 60, (2, 12)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    return {"token_ids": ids, "segment_ids": np.concatenate([0 * ids[:, :6], 1 + 0 * ids[:, 6:]], 1),
            "padding_mask": mask, "masked_lm_positions": np.array([[1, 4, 7], [2, 3, 8]], "int32")}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("albert_tf1")
    model = _model()
    _write_tf1_checkpoint(model, str(root / "model.ckpt-1000"))
    with open(root / "albert_config.json", "w") as f:
        json.dump(CONFIG, f)
    return model, str(root / "model.ckpt-1000"), str(root / "albert_config.json")


def _max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def test_names_are_the_released_ones(checkpoint):
    _, prefix, _ = checkpoint
    names = set(tf.train.load_checkpoint(prefix).get_variable_to_shape_map())
    assert "bert/encoder/transformer/group_1/inner_group_0/attention_1/self/query/kernel" in names
    assert "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense/kernel" in names
    assert "bert/encoder/embedding_hidden_mapping_in/kernel" in names
    assert tuple(tf.train.load_checkpoint(prefix).get_tensor("cls/seq_relationship/output_weights").shape) == (2, 32)


def test_load_tf1_matches_the_original(checkpoint):
    model, prefix, config = checkpoint
    converted = convert.load_tf1(prefix, "albert", config)
    inputs = _inputs()
    assert _max_diff(model(inputs), converted["pretrainer"](inputs)) <= TOLERANCE
    backbone_inputs = {k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    assert _max_diff(model.backbone(backbone_inputs), converted["backbone"](backbone_inputs)) <= TOLERANCE
    # ALBERT's TF1 "gelu" is the tanh approximation: the converted model computes that one.
    assert converted["backbone"].get_config()["activation"] == "gelu_new"


def test_cli_writes_the_models(checkpoint, tmp_path):
    model, prefix, config = checkpoint
    out = tmp_path / "out"
    loaded = convert_tf1_with_cli("albert", prefix, config, out)
    assert _max_diff(model(_inputs()), loaded(_inputs())) <= TOLERANCE
    info = json.loads((out / "convert_info.json").read_text())
    assert info["source"] == "tf1" and info["family"] == "albert"


def test_unknown_and_missing_variables_are_named(checkpoint, tmp_path):
    model, _, _ = checkpoint
    prefix = str(tmp_path / "odd.ckpt")
    _write_tf1_checkpoint(model, prefix, extra={"bert/encoder/some_new_layer/kernel": np.ones(3, np.float32)})
    with pytest.raises(ValueError, match="some_new_layer"):
        convert.load_tf1(prefix, "albert", CONFIG)
    weights = {n: v for n, v in (_tf1_name_and_value(w.path, w.numpy()) for w in model.weights)
               if not n.endswith("LayerNorm_1/gamma")}
    from garden.models.albert.conversion import from_tf1
    with pytest.raises(ValueError, match="full_layer_layer_norm"):
        from_tf1(CONFIG, weights)


def _albert_spiece(path, size=60):
    """A SentencePiece model of exactly `size` pieces with the ids of ALBERT's 30k-clean.model:
    <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4."""
    import io
    import random

    import sentencepiece as spm

    rng = random.Random(0)
    words = [w for w in WORDS if w.isalpha()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)]),
        model_writer=model, vocab_size=size, model_type="unigram", pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())
    processor = spm.SentencePieceProcessor(model_file=str(path))
    assert processor.GetPieceSize() == size
    assert [processor.PieceToId(p) for p in ("[CLS]", "[SEP]", "[MASK]")] == [2, 3, 4]


def test_release_with_spiece_fine_tunes_into_classification(checkpoint, tmp_path):
    """The release's folder (model.ckpt + albert_config.json + 30k-clean.model, as
    google-research/albert publishes it) converted by the CLI is a starting point: the
    classifier's backbone at step 0 is the original's, it fine-tunes through garden.train and
    its export answers."""
    from garden.tasks.classification import Classification

    model, prefix, config = checkpoint
    release = tmp_path / "albert_tiny"
    release.mkdir()
    for name in tf.io.gfile.glob(prefix + "*"):
        tf.io.gfile.copy(name, str(release / name.split("/")[-1]))
    _albert_spiece(release / "30k-clean.model")
    out = tmp_path / "out"
    convert_tf1_with_cli("albert", str(release / prefix.split("/")[-1]), config, out)
    info = json.loads((out / "convert_info.json").read_text())
    assert info["tokenizer"]["tokenizer"] == "sentencepiece", info["tokenizer"]
    assert info["tokenizer"]["lower_case"] is True  # ALBERT's tokenizer lower-cases
    (tmp_path / "t.tsv").write_text("text_a\tlabel\nthe movie was good\tpos\nbad\tneg\n")
    task, backbone = step0_backbone(out, Classification, train_file=str(tmp_path / "t.tsv"),
                                    eval_file=str(tmp_path / "t.tsv"), max_seq_length=12)
    assert (task.packer.cls_id, task.packer.sep_id, task.packer.pad_id) == (2, 3, 0)
    inputs = {k: v for k, v in _inputs().items() if k != "masked_lm_positions"}
    assert _max_diff({"h": model.backbone(inputs)["sequence_output"]},
                     {"h": backbone(inputs, training=False)["sequence_output"]}) <= TOLERANCE
    labels = finetune_classification_from(
        out, tmp_path, "--gin_param=garden.Classification.max_seq_length=32")
    assert labels and set(labels) <= {"pos", "neg"}, labels
