"""Parity with Hugging Face DistilBERT: a randomly initialised tiny DistilBertForMaskedLM."""

import numpy as np
import pytest

from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.distilbert.conversion import from_huggingface
from garden.models.distilbert.pretrainer import DistilBertPretrainer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (assert_masked_lm_parity, assert_mlm_parity,  # noqa: E402
                             assert_sequence_parity, convert_masked_lm, hf_sequence_and_logits,
                             randomize_torch_, save_hf_dir, torch_state_dict_to_numpy)


@pytest.fixture(scope="module")
def reference():
    config = transformers.DistilBertConfig(
        vocab_size=99, dim=32, n_heads=4, hidden_dim=37, n_layers=2, max_position_embeddings=64,
        activation="gelu")
    model = randomize_torch_(transformers.DistilBertForMaskedLM(config).eval(), seed=1)
    return config, model


def _inputs():
    rng = np.random.default_rng(2)
    token_ids = rng.integers(1, 99, (3, 12)).astype("int32")
    padding_mask = np.zeros((3, 12), "int32")
    for b, n in enumerate((12, 8, 4)):  # right padding
        padding_mask[b, :n] = 1
    token_ids[padding_mask == 0] = 0
    positions = np.array([[0, 5, 11], [1, 3, 7], [1, 2, 3]], "int32")
    return token_ids, padding_mask, positions


def test_parity_with_hugging_face_distilbert_for_masked_lm(reference):
    models = convert_masked_lm(from_huggingface, reference, DistilBertBackbone,
                               DistilBertPretrainer)
    _, hf_logits = assert_masked_lm_parity(models, reference[1], _inputs())
    assert np.abs(hf_logits).max() > 1.0  # large weights: a layout error could not hide


def test_backbone_only_checkpoint_and_directory(reference, tmp_path):
    from garden.convert import load_huggingface

    config, masked_lm = reference
    weights = {k: v for k, v in torch_state_dict_to_numpy(masked_lm).items()
               if k.startswith("distilbert.")}
    models = from_huggingface(config.to_dict(), weights)
    assert models["pretrainer"] is None
    token_ids, padding_mask, positions = _inputs()
    hf_sequence, hf_logits = hf_sequence_and_logits(masked_lm, token_ids, padding_mask)
    assert_sequence_parity(models["backbone"], hf_sequence, token_ids, padding_mask)

    # save_pretrained drops the tied vocab_projector.weight; garden.convert dispatches here.
    loaded = load_huggingface(save_hf_dir(masked_lm, str(tmp_path / "hf")), "distilbert")
    assert_mlm_parity(loaded["pretrainer"], hf_logits, token_ids, padding_mask, positions)


def test_mismatched_checkpoint_names_the_parameters(reference):
    config, model = reference
    weights = torch_state_dict_to_numpy(model)
    del weights["distilbert.transformer.layer.0.sa_layer_norm.weight"]
    weights["distilbert.embeddings.token_type_embeddings.weight"] = np.zeros((2, 32), "float32")
    with pytest.raises(ValueError, match=r"missing.*layer\.0\.sa_layer_norm\.weight.*"
                                         r"unexpected.*token_type_embeddings"):
        from_huggingface(config.to_dict(), weights)
    with pytest.raises(ValueError, match="n_layers|layer.2"):
        from_huggingface(dict(config.to_dict(), n_layers=3), torch_state_dict_to_numpy(model))
