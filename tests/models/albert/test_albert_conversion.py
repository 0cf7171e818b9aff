"""Parity with Hugging Face's ALBERT: a randomly initialised tiny reference model (nothing is
downloaded) converted by garden.models.albert.conversion must give the same numbers."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from garden.models.albert.backbone import AlbertBackbone  # noqa: E402
from garden.models.albert.conversion import from_huggingface  # noqa: E402
from convert_testing import assert_refused  # noqa: E402

TOLERANCE = 1e-4  # float32 max |diff|; the measured differences are ~1e-6


def _reference(model_class=transformers.AlbertForPreTraining, seed=0, **overrides):
    config = transformers.AlbertConfig(**{
        **dict(vocab_size=99, embedding_size=16, hidden_size=32, num_attention_heads=4,
               intermediate_size=37, num_hidden_layers=3, num_hidden_groups=1,
               hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
               classifier_dropout_prob=0.0, max_position_embeddings=40, type_vocab_size=2),
        **overrides})
    torch.manual_seed(seed)
    model = model_class(config).eval()
    # Weights far larger than the 0.02 init, LayerNorm scales around 1: at the init every
    # pre-activation is so small that e.g. tanh and erf GELU agree to 1e-6.
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(0.2 * torch.randn_like(p) + (1.0 if name.endswith("LayerNorm.weight") else 0.0))
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return model, config.to_dict(), weights


def _inputs():
    # Two sequences with two segments each; the second has 4 padding positions.
    rng = np.random.default_rng(1)
    token_ids = rng.integers(4, 99, (2, 10)).astype("int32")
    padding_mask = np.ones((2, 10), "int32")
    padding_mask[1, 6:] = 0
    token_ids[1, 6:] = 0
    segment_ids = np.zeros((2, 10), "int32")
    segment_ids[0, 5:] = 1
    segment_ids[1, 3:6] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _torch(inputs):
    return dict(input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
                token_type_ids=torch.tensor(inputs["segment_ids"], dtype=torch.long),
                attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long))


def _max_diff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def test_pretraining_parity_with_hugging_face():
    reference, config, weights = _reference()
    converted = from_huggingface(config, weights)
    backbone, pretrainer = converted["backbone"], converted["pretrainer"]
    assert isinstance(backbone, AlbertBackbone) and pretrainer is not None
    assert pretrainer.backbone is backbone

    inputs = _inputs()
    positions = np.int32([[1, 3, 8], [0, 2, 5]])
    with torch.no_grad():
        ref = reference(**_torch(inputs))
        ref_base = reference.albert(**_torch(inputs))
    ours = backbone(inputs, training=False)
    heads = pretrainer({**inputs, "masked_lm_positions": positions}, training=False)

    real = inputs["padding_mask"].astype(bool)  # padded rows are unspecified in both
    ref_mlm = np.take_along_axis(ref.prediction_logits.numpy(), positions[..., None], axis=1)
    diffs = {
        "sequence_output": _max_diff(ours["sequence_output"].numpy()[real],
                                     ref_base.last_hidden_state.numpy()[real]),
        "pooled_output": _max_diff(ours["pooled_output"], ref_base.pooler_output),
        "mlm_logits": _max_diff(heads["mlm_logits"], ref_mlm),
        "sop_logits": _max_diff(heads["sop_logits"], ref.sop_logits),
    }
    print("ALBERT parity max |diff|:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs
    assert np.abs(ref_mlm).max() > 1.0  # the logits are not trivially small

    # The tolerance is tight enough to see the GELU flavour: exact GELU is off by ~3e-4.
    exact = AlbertBackbone(**{**backbone.get_config(), "activation": "gelu"})
    exact.set_weights(backbone.get_weights())
    assert _max_diff(exact(inputs)["sequence_output"].numpy()[real],
                     ref_base.last_hidden_state.numpy()[real]) > 2 * TOLERANCE


def test_backbone_parity_without_prefix_with_groups_and_exact_gelu():
    # AlbertModel (names without "albert."), 6 layers in 3 groups (layer i runs group i // 2).
    reference, config, weights = _reference(transformers.AlbertModel, seed=3, num_hidden_layers=6,
                                            num_hidden_groups=3, hidden_act="gelu")
    assert not any(k.startswith("albert.") for k in weights)
    converted = from_huggingface(config, weights)
    assert converted["pretrainer"] is None
    backbone = converted["backbone"]
    assert (backbone.num_groups, len(backbone.encoder_blocks), backbone.activation) == (3, 3, "gelu")
    inputs = _inputs()
    with torch.no_grad():
        ref = reference(**_torch(inputs))
    ours = backbone(inputs)
    real = inputs["padding_mask"].astype(bool)
    assert _max_diff(ours["sequence_output"].numpy()[real],
                     ref.last_hidden_state.numpy()[real]) <= TOLERANCE
    assert _max_diff(ours["pooled_output"], ref.pooler_output) <= TOLERANCE


def test_checkpoint_without_tied_copies_converts():
    # safetensors files drop tied tensors: the decoder weight and bias may be absent.
    _, config, weights = _reference()
    del weights["predictions.decoder.weight"], weights["predictions.decoder.bias"]
    assert from_huggingface(config, weights)["pretrainer"] is not None


def test_errors_name_the_offending_weights():
    _, config, weights = _reference()
    assert_refused(from_huggingface, config, weights, r"missing.*pooler\.weight",
                   drop=["albert.pooler.weight"])
    assert_refused(from_huggingface, config, weights, r"unexpected.*classifier\.weight",
                   put={"classifier.weight": np.zeros((3, 32), "float32")})
    assert_refused(from_huggingface, config, weights,
                   r"shape mismatches: \['pooler\.weight \(32, 16\) -> pooler_dense/kernel",
                   put={"albert.pooler.weight": np.zeros((32, 16), "float32")})

    untied = dict(weights)
    untied["predictions.decoder.weight"] = untied["predictions.decoder.weight"] + 1.0
    with pytest.raises(ValueError, match="ties them"):
        from_huggingface(config, untied)

    with pytest.raises(ValueError, match="inner_group_num"):
        from_huggingface(dict(config, inner_group_num=2), weights)
