"""XLNet: parameter counts, Hugging Face parity of both streams (padding, memory, bi_data),
and the attention invariants of permutation LM (the query stream never sees its own content,
the permutation mask is respected, padding never leaks across the batch)."""

from __future__ import annotations

import numpy as np
import pytest

from convert_testing import max_abs_diff, randomize_torch_, save_hf_dir
from data_pipelines.objectives.xlnet import local_perm_mask
from garden import convert
from garden.models.xlnet import XLNetBackbone, XLNetPretrainer

V, T, P = 97, 10, 3


@pytest.mark.parametrize("preset,expected", [("xlnet_base", 116_718_336),
                                             ("xlnet_large", 360_268_800)])
def test_published_parameter_counts(preset, expected):
    """The published backbone counts (the +32,000 LM bias is the pretrainer's). The layers are
    identical, so the preset is built with 0 and 1 layers (a 1.4 GB xlnet_large would take
    ~20 s): total = embeddings + L * one layer."""
    layers = XLNetBackbone.presets()[preset]["num_layers"]
    c0 = XLNetBackbone.untrained(preset, num_layers=0).count_params()
    c1 = XLNetBackbone.untrained(preset, num_layers=1).count_params()
    assert c0 + layers * (c1 - c0) == expected
    tiny = XLNetBackbone.untrained("xlnet_tiny", vocab_size=V)
    assert XLNetPretrainer(tiny).count_params() == tiny.count_params() + V


def _hf_model(tmp_path, name, **config):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=V, d_model=32, n_layer=2, n_head=2, d_inner=64,
                                   ff_activation="gelu", dropout=0.0, **config)
    model = randomize_torch_(transformers.XLNetLMHeadModel(cfg).eval(), seed=1)
    models = convert.load_huggingface(save_hf_dir(model, str(tmp_path / name)), "xlnet")
    return model, models


def _inputs(batch: int, seed: int = 0, lengths=None):
    """Left-padded rows ending in <sep> <cls>-like positions (segment 2 last), a data-style
    permutation mask (objectives.xlnet.local_perm_mask) and P targets per row."""
    rng = np.random.default_rng(seed)
    lengths = lengths or [T - 2 * b for b in range(batch)]
    ids = np.zeros((batch, T), "int32")
    seg = np.zeros((batch, T), "int32")
    mask = np.zeros((batch, T), "int32")
    # Padding columns stay 0 here: only padding_mask may hide them (the batch-invariance test).
    perm = np.zeros((batch, T, T), "float32")
    mapping = np.zeros((batch, P, T), "float32")
    for b, n in enumerate(lengths):
        start = T - n
        ids[b, start:] = rng.integers(5, V, n)
        mask[b, start:] = 1
        seg[b, start + n // 2:] = 1
        seg[b, -1] = 2
        targets = np.sort(rng.choice(np.arange(start, T - 1), P, replace=False))
        is_target = np.zeros(n, bool)
        is_target[targets - start] = True
        perm[b, start:, start:] = local_perm_mask(is_target, np.zeros(n, bool), rng.permutation(n))
        mapping[b, np.arange(P), targets] = 1.0
    return {"token_ids": ids, "segment_ids": seg, "padding_mask": mask,
            "perm_mask": perm, "target_mapping": mapping}


def _hf_call(model, x, **kwargs):
    import torch

    t = lambda a, dtype=torch.long: torch.tensor(a, dtype=dtype)  # noqa: E731
    args = dict(input_ids=t(x["token_ids"]), token_type_ids=t(x["segment_ids"]),
                attention_mask=t(x["padding_mask"], torch.float32), output_hidden_states=True)
    if "perm_mask" in x:
        args.update(perm_mask=t(x["perm_mask"], torch.float32),
                    target_mapping=t(x["target_mapping"], torch.float32))
    with torch.no_grad():
        return model(**args, **kwargs)


def _plain(x):
    return {k: x[k] for k in ("token_ids", "segment_ids", "padding_mask")}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return _hf_model(tmp_path_factory.mktemp("xlnet"), "plain")


def test_hf_parity_both_streams_with_padding(converted):
    hf, models = converted
    x = _inputs(3)
    real = x["padding_mask"].astype(bool)
    out = _hf_call(hf, x)
    ours = models["pretrainer"](x, training=False)["lm_logits"].numpy()
    assert max_abs_diff(ours, out.logits.numpy()) <= 1e-4
    streams = models["backbone"].streams(_plain(x), perm_mask=x["perm_mask"],
                                         target_mapping=x["target_mapping"])
    # hidden_states pairs (content, query) per layer: [-2] is the last content stream.
    assert max_abs_diff(streams["content"].numpy()[real], out.hidden_states[-2].numpy()[real]) <= 1e-4
    # The plain backbone (no permutation mask): the content stream of XLNetModel.
    plain = _hf_call(hf.transformer, _plain(x)).last_hidden_state.numpy()
    seq = models["backbone"](_plain(x), training=False)["sequence_output"].numpy()
    assert max_abs_diff(seq[real], plain[real]) <= 1e-4
    assert np.abs(plain).max() > 0.1  # a real comparison, not of two zero tensors


def test_hf_refuses_missing_and_untied(converted, tmp_path):
    from convert_testing import assert_refused, torch_state_dict_to_numpy
    from garden.models.xlnet.conversion import from_huggingface

    hf, _ = converted
    weights = torch_state_dict_to_numpy(hf)
    config = hf.config.to_dict()
    assert_refused(from_huggingface, config, weights, r"missing.*layer\.1\.rel_attn\.r_s_bias",
                   drop=["transformer.layer.1.rel_attn.r_s_bias"])
    assert_refused(from_huggingface, config, weights, "not tied",
                   put={"lm_loss.weight": weights["lm_loss.weight"] + 1.0})
    assert_refused(from_huggingface, {**config, "attn_type": "uni"}, weights, "attn_type")


def test_hf_parity_with_memory(tmp_path):
    hf, models = _hf_model(tmp_path, "mem", mem_len=6, reuse_len=5)
    first, second = _inputs(2, seed=1, lengths=[T, T]), _inputs(2, seed=2, lengths=[T, T - 3])
    out1 = _hf_call(hf, first, use_mems=True)
    out2 = _hf_call(hf, second, mems=out1.mems, use_mems=True)
    backbone = models["backbone"]
    s1 = backbone.streams(_plain(first), perm_mask=first["perm_mask"],
                          target_mapping=first["target_mapping"])
    for ours, theirs in zip(s1["mems"], out1.mems):
        assert max_abs_diff(ours, theirs.numpy().transpose(1, 0, 2)) <= 1e-5
    assert s1["mems"][0].shape[1] == 5  # reuse_len of the segment
    s2 = backbone.streams(_plain(second), perm_mask=second["perm_mask"],
                          target_mapping=second["target_mapping"], mems=s1["mems"])
    logits = models["pretrainer"].lm_head(s2["query"]).numpy()
    assert max_abs_diff(logits, out2.logits.numpy()) <= 1e-4
    real = second["padding_mask"].astype(bool)
    assert max_abs_diff(s2["content"].numpy()[real], out2.hidden_states[-2].numpy()[real]) <= 1e-4
    # The memory matters: without it the second segment's outputs differ.
    alone = backbone.streams(_plain(second), perm_mask=second["perm_mask"],
                             target_mapping=second["target_mapping"])
    assert max_abs_diff(alone["query"], s2["query"]) > 1e-3


def test_hf_parity_bi_data(tmp_path):
    hf, models = _hf_model(tmp_path, "bi", bi_data=True)
    x = _inputs(2, seed=3, lengths=[T, T])
    ours = models["pretrainer"](x, training=False)["lm_logits"].numpy()
    assert max_abs_diff(ours, _hf_call(hf, x).logits.numpy()) <= 1e-4


def _query(backbone, x):
    return backbone.streams(_plain(x), perm_mask=x["perm_mask"],
                            target_mapping=x["target_mapping"])["query"].numpy()


def test_query_stream_never_sees_its_own_content(converted):
    backbone = converted[1]["backbone"]
    x = _inputs(1, seed=4)
    base_q = _query(backbone, x)
    base_h = backbone(_plain(x))["sequence_output"].numpy()
    for k in range(P):
        pos = int(np.argmax(x["target_mapping"][0, k]))
        y = {**x, "token_ids": x["token_ids"].copy()}
        y["token_ids"][0, pos] = (y["token_ids"][0, pos] + 7) % V
        q = _query(backbone, y)
        assert max_abs_diff(q[0, k], base_q[0, k]) <= 1e-6, k
        # ... while the content stream at that position does change.
        assert max_abs_diff(backbone(_plain(y))["sequence_output"].numpy()[0, pos],
                            base_h[0, pos]) > 1e-3


def test_permutation_mask_is_respected(converted):
    backbone = converted[1]["backbone"]
    x = _inputs(1, seed=5)
    base = _query(backbone, x)
    perm = x["perm_mask"][0]
    targets = [int(np.argmax(x["target_mapping"][0, k])) for k in range(P)]
    changed_blocked = changed_seen = 0
    for k, i in enumerate(targets):
        for j in range(T):
            if j == i or x["padding_mask"][0, j] == 0:
                continue
            y = {**x, "token_ids": x["token_ids"].copy()}
            y["token_ids"][0, j] = (y["token_ids"][0, j] + 11) % V
            diff = max_abs_diff(_query(backbone, y)[0, k], base[0, k])
            if perm[i, j]:  # blocked (data masks are closed: nothing i sees sees j)
                assert diff <= 1e-6, (i, j)
                changed_blocked += 1
            else:
                assert diff > 1e-4, (i, j)
                changed_seen += 1
    assert changed_blocked and changed_seen


def test_batch_invariance_under_left_padding(converted):
    """keras-hub 0.32 leaks padding across the batch (up to 1e-2): here an example's outputs
    are the same alone and in a padded batch."""
    backbone = converted[1]["backbone"]
    batch = _inputs(3, seed=6)
    for b in range(3):
        n = int(batch["padding_mask"][b].sum())
        alone = {k: v[b:b + 1, ..., -n:] if k != "perm_mask" else v[b:b + 1, -n:, -n:]
                 for k, v in batch.items()}
        together = backbone.streams(_plain(batch), perm_mask=batch["perm_mask"],
                                    target_mapping=batch["target_mapping"])
        single = backbone.streams(_plain(alone), perm_mask=alone["perm_mask"],
                                  target_mapping=alone["target_mapping"])
        assert max_abs_diff(single["query"][0], together["query"][b]) <= 1e-5
        assert max_abs_diff(single["content"][0], together["content"][b, -n:]) <= 1e-5
        plain = backbone(_plain(alone))["sequence_output"][0]
        assert max_abs_diff(plain, backbone(_plain(batch))["sequence_output"][b, -n:]) <= 1e-5


def test_keras_save_round_trip(converted, tmp_path):
    import keras

    pretrainer = converted[1]["pretrainer"]
    x = _inputs(2, seed=7)
    path = str(tmp_path / "p.keras")
    pretrainer.save(path)
    loaded = keras.saving.load_model(path)
    assert max_abs_diff(loaded(x)["lm_logits"], pretrainer(x)["lm_logits"]) <= 1e-6
