"""Parity with Hugging Face RoBERTa: a randomly initialised tiny RobertaForMaskedLM, converted."""

import numpy as np
import pytest

from garden.models.roberta.backbone import RobertaBackbone
from garden.models.roberta.conversion import from_huggingface
from garden.models.roberta.pretrainer import RobertaPretrainer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (assert_masked_lm_parity, assert_mlm_parity,  # noqa: E402
                             convert_masked_lm, hf_sequence_and_logits, max_abs_diff,
                             randomize_torch_, save_hf_dir, torch_state_dict_to_numpy)

PAD = 1


@pytest.fixture(scope="module")
def reference():
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=99, hidden_size=32, num_attention_heads=4, intermediate_size=37,
        num_hidden_layers=2, max_position_embeddings=64, type_vocab_size=1, hidden_act="gelu",
        layer_norm_eps=1e-5, pad_token_id=PAD)
    model = randomize_torch_(transformers.RobertaForMaskedLM(config).eval(), seed=0)
    return config, model


def _inputs():
    rng = np.random.default_rng(1)
    token_ids = rng.integers(3, 99, (3, 12)).astype("int32")
    token_ids[:, 0] = 0
    for b, n in enumerate((12, 9, 5)):  # right padding of varying length
        token_ids[b, n - 1] = 2
        token_ids[b, n:] = PAD
    padding_mask = (token_ids != PAD).astype("int32")
    positions = np.array([[1, 5, 10], [2, 3, 7], [1, 2, 3]], "int32")
    return token_ids, padding_mask, positions


def test_parity_with_hugging_face_roberta_for_masked_lm(reference):
    models = convert_masked_lm(from_huggingface, reference, RobertaBackbone, RobertaPretrainer)
    # RobertaForMaskedLM has no pooler: reported, left initialised.
    assert models["not_in_checkpoint"] == ["pooler.dense.bias", "pooler.dense.weight"]
    assert models["backbone"].max_sequence_length == 62  # 64 rows - padding_idx - 1

    token_ids, padding_mask, positions = _inputs()
    hf_sequence, _ = assert_masked_lm_parity(models, reference[1],
                                             (token_ids, padding_mask, positions))
    # Sensitivity: BERT-style positions (rows 0..T-1) would be far off.
    assert np.abs(hf_sequence[padding_mask.astype(bool)]).max() > 0.1


def test_parity_of_roberta_model_with_pooler(reference):
    config, masked_lm = reference
    model = transformers.RobertaModel(config).eval()
    model.load_state_dict({k[len("roberta."):]: v for k, v in masked_lm.state_dict().items()
                           if k.startswith("roberta.")}, strict=False)
    randomize_torch_(model.pooler, seed=5)
    weights = {"roberta." + k: v for k, v in torch_state_dict_to_numpy(model).items()}
    models = from_huggingface(config.to_dict(), weights)
    assert models["pretrainer"] is None and models["not_in_checkpoint"] == []
    token_ids, padding_mask, _ = _inputs()
    with torch.no_grad():
        hf = model(input_ids=torch.tensor(token_ids, dtype=torch.long),
                   attention_mask=torch.tensor(padding_mask, dtype=torch.long))
    ours = models["backbone"]({"token_ids": token_ids, "padding_mask": padding_mask})
    real = padding_mask.astype(bool)
    assert max_abs_diff(ours["sequence_output"].numpy()[real],
                        hf.last_hidden_state.numpy()[real]) <= 1e-4
    assert max_abs_diff(ours["pooled_output"], hf.pooler_output.numpy()) <= 1e-4


def test_load_huggingface_directory(reference, tmp_path):
    # save_pretrained drops the tied lm_head.decoder.* copies; garden.convert dispatches here.
    from garden.convert import load_huggingface

    config, model = reference
    models = load_huggingface(save_hf_dir(model, str(tmp_path / "hf")), "roberta")
    token_ids, padding_mask, positions = _inputs()
    _, hf_logits = hf_sequence_and_logits(model, token_ids, padding_mask)
    assert_mlm_parity(models["pretrainer"], hf_logits, token_ids, padding_mask, positions)


def test_mismatched_checkpoint_names_the_parameters(reference):
    config, model = reference
    weights = torch_state_dict_to_numpy(model)
    del weights["roberta.encoder.layer.1.output.dense.bias"]
    weights["roberta.encoder.layer.2.output.dense.bias"] = np.zeros(32, "float32")
    with pytest.raises(ValueError, match=r"missing.*encoder\.layer\.1\.output\.dense\.bias.*"
                                         r"unexpected.*encoder\.layer\.2\.output\.dense\.bias"):
        from_huggingface(config.to_dict(), weights)

    untied = torch_state_dict_to_numpy(model)
    untied["lm_head.decoder.weight"] = untied["lm_head.decoder.weight"] + 1.0
    with pytest.raises(ValueError, match="lm_head.decoder.weight"):
        from_huggingface(config.to_dict(), untied)

    with pytest.raises(ValueError, match="gelu_new"):
        from_huggingface(dict(config.to_dict(), hidden_act="gelu_new"), weights)
