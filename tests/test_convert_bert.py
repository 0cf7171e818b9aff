"""BERT weight import: Hugging Face (safetensors, pytorch_model.bin), original TF1 checkpoints
and Model Garden encoders convert into garden models that compute the same numbers.

The reference models are tiny, randomly initialised here (nothing is downloaded), with weights
~N(0, 0.1) so that a wrong transpose, GELU flavour or head mapping moves the outputs by far
more than the 1e-4 tolerance (at the 0.02 init the two GELUs agree to ~1e-6).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import keras  # noqa: E402

from convert_testing import (  # noqa: E402
    assert_refused, hf_bert_to_tf1_weights, max_abs_diff, random_bert_inputs, randomize_torch_,
    save_hf_dir, torch_state_dict_to_numpy, write_tf1_checkpoint)
from garden import convert  # noqa: E402
from garden.models.bert import BertBackbone, BertPretrainer  # noqa: E402
from garden.models.bert.conversion import from_huggingface  # noqa: E402
from garden.models.bert.presets import PRESETS  # noqa: E402
from testing import run_tool  # noqa: E402

TOL = 1e-4
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
            hidden_act="gelu")


@pytest.fixture(scope="module")
def hf_pretraining(tmp_path_factory):
    """A tiny BertForPreTraining, its safetensors directory, inputs and reference outputs."""
    torch.manual_seed(0)
    model = randomize_torch_(
        transformers.BertForPreTraining(transformers.BertConfig(**TINY)).eval(), seed=0)
    directory = save_hf_dir(model, str(tmp_path_factory.mktemp("hf_bert_pt")))
    inputs, positions = random_bert_inputs(3, 16, TINY["vocab_size"], seed=1)
    ids = {"input_ids": torch.tensor(inputs["token_ids"], dtype=torch.long),
           "token_type_ids": torch.tensor(inputs["segment_ids"], dtype=torch.long),
           "attention_mask": torch.tensor(inputs["padding_mask"], dtype=torch.long)}
    with torch.no_grad():
        base = model.bert(**ids)
        heads = model(**ids)
    mlm = np.take_along_axis(heads.prediction_logits.numpy(), positions[..., None], axis=1)
    expected = {"sequence_output": base.last_hidden_state.numpy(),
                "pooled_output": base.pooler_output.numpy(),
                "mlm_logits": mlm, "nsp_logits": heads.seq_relationship_logits.numpy()}
    return dict(model=model, dir=directory, inputs=inputs, positions=positions,
                expected=expected)


def _check_parity(models, ref, with_heads=True):
    """max |diff| of every output against the Hugging Face reference; asserts <= TOL."""
    out = models["backbone"](ref["inputs"], training=False)
    diffs = {k: max_abs_diff(out[k], ref["expected"][k])
             for k in ("sequence_output", "pooled_output")}
    if with_heads:
        assert models["pretrainer"] is not None
        heads = models["pretrainer"]({**ref["inputs"], "masked_lm_positions": ref["positions"]},
                                     training=False)
        diffs.update({k: max_abs_diff(heads[k], ref["expected"][k])
                      for k in ("mlm_logits", "nsp_logits")})
    assert all(d <= TOL for d in diffs.values()), diffs
    return diffs


def test_huggingface_safetensors_with_heads(hf_pretraining):
    models = convert.load_huggingface(hf_pretraining["dir"], "bert")
    assert isinstance(models["backbone"], BertBackbone)
    assert isinstance(models["pretrainer"], BertPretrainer)
    assert models["pretrainer"].backbone is models["backbone"]
    assert models["backbone"].num_layers == 2 and models["backbone"].max_sequence_length == 64
    _check_parity(models, hf_pretraining)
    # Sanity of the test itself: the outputs are far from each other's noise level.
    assert np.std(hf_pretraining["expected"]["mlm_logits"]) > 0.1


def test_huggingface_pytorch_bin_backbone_only(tmp_path):
    torch.manual_seed(1)
    model = randomize_torch_(transformers.BertModel(transformers.BertConfig(**TINY)).eval(), seed=1)
    directory = save_hf_dir(model, str(tmp_path / "hf_bert"), safetensors=False)
    assert os.listdir(directory) and "pytorch_model.bin" in os.listdir(directory)
    inputs, _ = random_bert_inputs(2, 12, TINY["vocab_size"], seed=2)
    with torch.no_grad():
        out = model(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                    token_type_ids=torch.tensor(inputs["segment_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long))
    models = convert.load_huggingface(directory, "bert")
    assert models["pretrainer"] is None
    ref = {"inputs": inputs, "expected": {"sequence_output": out.last_hidden_state.numpy(),
                                          "pooled_output": out.pooler_output.numpy()}}
    _check_parity(models, ref, with_heads=False)


def test_cli_writes_loadable_models(hf_pretraining, tmp_path):
    out_dir = tmp_path / "converted"
    proc = run_tool("garden.convert", "--source=huggingface", "--model=bert",
                    f"--input={hf_pretraining['dir']}", f"--output={out_dir}", timeout=300)
    assert "pretrainer" in proc.stdout and "parameters" in proc.stdout
    info = json.loads((out_dir / "convert_info.json").read_text())
    assert info["source"] == "huggingface" and info["family"] == "bert"
    assert info["config"]["num_hidden_layers"] == 2
    backbone = keras.models.load_model(out_dir / "backbone.keras")
    pretrainer = keras.models.load_model(out_dir / "pretrainer.keras")
    _check_parity({"backbone": backbone, "pretrainer": pretrainer}, hf_pretraining)


def test_tf1_checkpoint(hf_pretraining, tmp_path):
    tf1 = hf_bert_to_tf1_weights(torch_state_dict_to_numpy(hf_pretraining["model"]))
    assert tf1["cls/seq_relationship/output_weights"].shape == (2, 32)
    # A real pretraining checkpoint also holds Adam slots and the step counter.
    slots = [("bert/pooler/dense/kernel/adam_m", np.zeros((32, 32), "float32")),
             ("global_step", np.int64(7))]
    prefix = write_tf1_checkpoint(tf1, str(tmp_path / "bert_model.ckpt"), extra=slots)
    import tensorflow as tf

    assert tf.train.load_checkpoint(prefix).get_tensor("bert/embeddings/word_embeddings").shape == (99, 32)
    config = {k: v for k, v in TINY.items()}  # bert_config.json has no layer_norm_eps
    models = convert.load_tf1(prefix, "bert", config)
    _check_parity(models, hf_pretraining)

    # The CLI reads the same checkpoint with --config.
    (tmp_path / "bert_config.json").write_text(json.dumps(config))
    models, used = convert.convert("tf1", "bert", prefix, str(tmp_path / "bert_config.json"))
    assert used == config and models["pretrainer"] is not None


def test_missing_unexpected_and_untied_parameters_are_named(hf_pretraining):
    weights = torch_state_dict_to_numpy(hf_pretraining["model"])
    config = hf_pretraining["model"].config.to_dict()

    assert_refused(from_huggingface, config, weights,
                   r"missing parameters: \['encoder\.layer\.1\.output\.dense\.bias'\]",
                   drop=["bert.encoder.layer.1.output.dense.bias"])
    assert_refused(from_huggingface, config, weights, r"unexpected parameters: \['classifier\.weight'\]",
                   put={"classifier.weight": np.zeros((2, 32), "float32")})
    assert_refused(from_huggingface, config, weights, "not tied",
                   put={"cls.predictions.decoder.weight":
                        weights["cls.predictions.decoder.weight"] + 1.0})
    assert_refused(from_huggingface, config, weights, "cls.seq_relationship.weight",
                   drop=[k for k in weights if k.startswith("cls.seq_relationship")])

    with pytest.raises(ValueError, match="hidden_act='gelu_new'"):
        from_huggingface(dict(config, hidden_act="gelu_new"), weights)

    with pytest.raises(ValueError, match=r"shape mismatches: \['embeddings\.word_embeddings"):
        from_huggingface(dict(config, vocab_size=100), weights)


def test_wrong_family_is_a_clear_error(hf_pretraining):
    with pytest.raises(ValueError, match="holds a 'bert' checkpoint.*not 'roberta'"):
        convert.load_huggingface(hf_pretraining["dir"], "roberta")
    with pytest.raises(ValueError, match="unknown model family 'gpt9'"):
        convert.load_huggingface(hf_pretraining["dir"], "gpt9")
    # The family's FamilySpec lists its converters: RoBERTa has no original TF1 release.
    with pytest.raises(NotImplementedError, match="no --source=tf1 converter for 'roberta'"):
        convert.load_tf1(hf_pretraining["dir"], "roberta", {})
    proc = run_tool("garden.convert", "--source=huggingface", "--model=gpt9",
                    f"--input={hf_pretraining['dir']}", "--output=/tmp/unused", check=False,
                    timeout=120)
    assert proc.returncode != 0 and "invalid choice: 'gpt9'" in proc.stderr


# --- Model Garden -----------------------------------------------------------------------------

def _model_garden_encoder(**kwargs):
    networks = pytest.importorskip("official.nlp.modeling.networks")
    encoder = networks.BertEncoder(
        vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4, inner_dim=37,
        max_sequence_length=64, type_vocab_size=2, dict_outputs=True, **kwargs)
    rng = np.random.default_rng(3)
    for v in encoder.weights:
        value = (1.0 + 0.2 * rng.normal(size=v.shape) if v.name.endswith("gamma:0")
                 else 0.1 * rng.normal(size=v.shape))
        v.assign(value.astype("float32"))
    return encoder


def _model_garden_reference(encoder):
    inputs, _ = random_bert_inputs(3, 16, 99, seed=4)
    out = encoder({"input_word_ids": inputs["token_ids"], "input_mask": inputs["padding_mask"],
                   "input_type_ids": inputs["segment_ids"]}, training=False)
    return {"inputs": inputs, "expected": {"sequence_output": out["sequence_output"].numpy(),
                                           "pooled_output": out["pooled_output"].numpy()}}


def test_model_garden_encoder_and_checkpoint(tmp_path):
    # "gelu" through tf_keras.activations.get is the exact GELU, as the garden computes.
    encoder = _model_garden_encoder(inner_activation="gelu")
    ref = _model_garden_reference(encoder)
    models = convert.load_model_garden(encoder, "bert")
    assert models["pretrainer"] is None
    _check_parity(models, ref, with_heads=False)

    import tensorflow as tf

    prefix = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "encoder"))
    (tmp_path / "encoder.json").write_text(json.dumps(encoder.get_config()))
    models, _ = convert.convert("model_garden", "bert", prefix, str(tmp_path / "encoder.json"))
    _check_parity(models, ref, with_heads=False)


def test_model_garden_default_approximate_gelu_is_refused_unless_allowed(tmp_path):
    encoder = _model_garden_encoder()  # BertEncoder's default: tanh-approximate GELU
    with pytest.raises(ValueError, match="tanh-approximate GELU"):
        convert.load_model_garden(encoder, "bert")
    ref = _model_garden_reference(encoder)
    models = convert.load_model_garden(encoder, "bert", allow_approximate_gelu=True)
    out = models["backbone"](ref["inputs"], training=False)
    # The weights are all there; only the activation differs, visibly at these weight scales.
    diff = max_abs_diff(out["sequence_output"], ref["expected"]["sequence_output"])
    assert TOL < diff < 0.1, diff

    # A checkpoint described by Model Garden's own BertEncoderConfig, whose "gelu" is the
    # tanh approximation (official.modeling.tf_utils.get_activation).
    import tensorflow as tf

    prefix = tf.train.Checkpoint(encoder=encoder).write(str(tmp_path / "encoder"))
    encoder_config = dict(vocab_size=99, hidden_size=32, num_layers=2, num_attention_heads=4,
                          intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
                          hidden_activation="gelu")
    with pytest.raises(ValueError, match="tanh-approximate GELU"):
        convert.load_model_garden(prefix, "bert", encoder_config)
    from_ckpt = convert.load_model_garden(prefix, "bert", encoder_config,
                                          allow_approximate_gelu=True)
    assert max_abs_diff(from_ckpt["backbone"](ref["inputs"])["sequence_output"],
                        out["sequence_output"]) == 0.0
    # A config with more layers than the checkpoint: a partial restore is refused.
    with pytest.raises(ValueError, match="does not hold every variable"):
        convert.load_model_garden(prefix, "bert", dict(encoder_config, num_layers=3))


# --- published size ---------------------------------------------------------------------------

def test_bert_base_parameter_count_matches_hugging_face():
    with torch.device("meta"):  # shapes only: no 440 MB allocation
        hf_base = transformers.BertModel(transformers.BertConfig())
        hf_pretraining = transformers.BertForPreTraining(transformers.BertConfig())
    hf_count = sum(p.numel() for p in hf_base.parameters())
    hf_pt_count = sum(p.numel() for p in hf_pretraining.parameters())  # decoder tied: once
    backbone = BertBackbone(**PRESETS["bert_base"])
    assert backbone.count_params() == hf_count == 109_482_240
    assert BertPretrainer(backbone).count_params() == hf_pt_count


def test_convert_of_a_missing_directory_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    proc = run_tool("garden.convert", "--source=huggingface", "--model=bert",
                    f"--input={missing}", f"--output={tmp_path / 'out'}", check=False,
                    timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert f"error: {missing} does not exist" in proc.stderr
    assert not (tmp_path / "out").exists()
