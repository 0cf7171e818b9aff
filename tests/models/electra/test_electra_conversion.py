"""Numerical parity with Hugging Face ELECTRA (both towers), built randomly in the test."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from garden.models.electra.backbone import ElectraBackbone  # noqa: E402
from garden.models.electra.conversion import from_huggingface  # noqa: E402
from garden.models.electra.pretrainer import ElectraDiscriminator, ElectraGenerator  # noqa: E402
from convert_testing import randomize_torch_, torch_forward  # noqa: E402

# The tiny config of the transformers ELECTRA tests: E != H exercises embeddings_project, and
# FFN 37 and vocabulary 99 are sizes no other dimension shares.
TINY = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_attention_heads=4,
            intermediate_size=37, num_hidden_layers=2, max_position_embeddings=64,
            type_vocab_size=2, hidden_act="gelu")
TOLERANCE = 1e-4


def _hf_model(cls, seed):
    # Large random weights (the 0.02 init barely leaves the linear regime): a wrong GELU,
    # LayerNorm placement or transposition then shows up far above the tolerance.
    return randomize_torch_(cls(transformers.ElectraConfig(**TINY)).eval(), seed=seed)


def _state(model):
    # As a safetensors file holds it: one copy of the tied generator table.
    return {k: v.detach().numpy() for k, v in model.state_dict().items()
            if k != "generator_lm_head.weight"}


def _inputs():
    rng = np.random.default_rng(0)
    token_ids = rng.integers(1, TINY["vocab_size"], (3, 11)).astype("int32")
    padding_mask = np.ones_like(token_ids)
    padding_mask[1, 7:] = 0
    padding_mask[2, 4:] = 0
    token_ids[padding_mask == 0] = 0
    segment_ids = np.zeros_like(token_ids)
    segment_ids[0, 6:] = 1
    segment_ids[1, 4:7] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def _max_diff(a, b, real):
    return float(np.abs(np.asarray(a) - np.asarray(b))[real].max())


def test_discriminator_matches_electra_for_pretraining():
    hf = _hf_model(transformers.ElectraForPreTraining, seed=0)
    converted = from_huggingface(hf.config.to_dict(), _state(hf))
    assert isinstance(converted["backbone"], ElectraBackbone)
    assert isinstance(converted["pretrainer"], ElectraDiscriminator)
    assert converted["pretrainer"].backbone is converted["backbone"]

    inputs = _inputs()
    real = inputs["padding_mask"].astype(bool)
    want = torch_forward(hf, inputs)
    sequence = converted["backbone"](inputs, training=False)["sequence_output"].numpy()
    logits = converted["pretrainer"](inputs, training=False)["disc_logits"].numpy()
    seq_diff = _max_diff(sequence, want.hidden_states[-1].numpy(), real)
    logit_diff = _max_diff(logits, want.logits.numpy(), real)
    print(f"discriminator: sequence_output {seq_diff:.2e}, disc_logits {logit_diff:.2e}")
    assert seq_diff <= TOLERANCE and logit_diff <= TOLERANCE
    assert np.abs(want.logits.numpy()).max() > 0.1  # the comparison is not of near-zeros


def test_generator_matches_electra_for_masked_lm():
    hf = _hf_model(transformers.ElectraForMaskedLM, seed=1)
    converted = from_huggingface(hf.config.to_dict(), _state(hf))
    generator = converted["pretrainer"]
    assert isinstance(generator, ElectraGenerator)
    assert generator.masked_lm_head.token_embedding is converted["backbone"].token_embedding

    inputs = _inputs()
    real = inputs["padding_mask"].astype(bool)
    want = torch_forward(hf, inputs)
    positions = np.broadcast_to(np.arange(11, dtype="int32"), (3, 11))
    sequence = converted["backbone"](inputs, training=False)["sequence_output"].numpy()
    logits = generator({**inputs, "masked_lm_positions": positions}, training=False)["mlm_logits"]
    seq_diff = _max_diff(sequence, want.hidden_states[-1].numpy(), real)
    logit_diff = _max_diff(logits.numpy(), want.logits.numpy(), real)
    print(f"generator: sequence_output {seq_diff:.2e}, mlm_logits {logit_diff:.2e}")
    assert seq_diff <= TOLERANCE and logit_diff <= TOLERANCE


def test_electra_model_without_prefix_converts_to_a_backbone():
    hf = _hf_model(transformers.ElectraModel, seed=2)
    state = _state(hf)
    assert not any(k.startswith("electra.") for k in state)
    converted = from_huggingface(hf.config.to_dict(), state)
    assert converted["pretrainer"] is None
    inputs = _inputs()
    real = inputs["padding_mask"].astype(bool)
    want = torch_forward(hf, inputs).last_hidden_state.numpy()
    got = converted["backbone"](inputs, training=False)["sequence_output"].numpy()
    assert _max_diff(got, want, real) <= TOLERANCE


def test_missing_and_unexpected_names_are_reported():
    hf = _hf_model(transformers.ElectraForPreTraining, seed=3)
    state = _state(hf)
    del state["electra.encoder.layer.1.output.dense.bias"]
    state["electra.pooler.dense.weight"] = np.zeros((32, 32), "float32")
    with pytest.raises(ValueError, match=r"electra\.encoder\.layer\.1\.output\.dense\.bias") as error:
        from_huggingface(hf.config.to_dict(), state)
    message = str(error.value)
    assert "electra.encoder.layer.1.output.dense.bias" in message
    assert "electra.pooler.dense.weight" in message

    # A config that does not fit the weights names the tensor and both shapes.
    with pytest.raises(ValueError, match="word_embeddings"):
        from_huggingface(dict(hf.config.to_dict(), vocab_size=100), _state(hf))
