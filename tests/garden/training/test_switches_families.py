"""Every fine-tuning switch on every family's tiny backbone: its effect, or its refusal (issue 32).

  train.layer_decay      the learning rate each variable receives: one Adam step with gradients
                         of ones moves a weight by its rate, so the step / lr measured on every
                         variable must be decay ** (groups - depth), the depth read from the
                         family's layer groups (embeddings 0, each layer in order, the top,
                         then the head).
  train.unfreeze_every   the step from which each variable trains, and which variables moved
                         after one and two real optimizer steps (the head, then the group below).
  feature_layers / scalar_mix (garden.Tagging)
                         the frozen backbone's hidden states feed a trained mix; refused naming
                         the family where the backbone gives no hidden states.
  use_head_mask          zeroing one head changes the output; refused naming the family where
                         the backbone takes no head mask.
  head pruning           pruned_backbone keeps fewer heads and weights; refused naming the family.
  train.magnitude_pruning
                         every layer group's kernels (attention, feed-forward, LSTM, XLNet's
                         relative attention) reach the target sparsity.
Other gin parameters that were accepted and ignored: a backbone argument the family does not
take, Tagging's feature-based switches on garden.CvtTagging, a head mask on a fine-tuning
backbone, bindings a converted checkpoint's backbone does not take.
"""

from __future__ import annotations

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden import models
from garden.models import factory
from garden.models.backbone import UnsupportedArgument
from garden.optimization import create_optimizer
from garden.training.settings import Optimization

SMALL = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
             max_sequence_length=32)
# The families without a *_tiny preset, at the same toy size.
PRESETS = {"albert": ("albert_base", dict(SMALL, embedding_size=16)),
           "distilbert": ("distilbert_base", SMALL),
           "electra": ("electra_small", dict(SMALL, embedding_size=16)),
           "roberta": ("roberta_base", SMALL)}
FAMILIES = sorted(f.name for f in models.families())

# Each family's layer groups, bottom to top, by the layers their variables belong to (the first
# path component; two for T5's stacks). "" is an empty group: the pooler slot of the BERT-kind
# encoders without a pooler, which ELECTRA's depth count keeps. The head is one group above.
GROUPS = {
    "bert": ["embeddings", "transformer_layer_0", "transformer_layer_1", "pooler_dense"],
    "spanbert": ["embeddings", "transformer_layer_0", "transformer_layer_1", "pooler_dense"],
    "roberta": ["embeddings", "transformer_layer_0", "transformer_layer_1", "pooler_dense"],
    # One block shared by both layers: one group.
    "albert": ["embeddings", "transformer_layer_0", "pooler_dense"],
    "electra": ["embeddings embeddings_project", "transformer_layer_0", "transformer_layer_1", ""],
    "distilbert": ["embeddings", "transformer_layer_0", "transformer_layer_1", ""],
    "gpt": ["embeddings", "transformer_layer_0", "transformer_layer_1"],
    "gpt2": ["position_embedding token_embedding", "transformer_layer_0", "transformer_layer_1",
             "layer_norm"],
    "gpt3": ["position_embedding token_embedding", "transformer_layer_0", "transformer_layer_1",
             "final_layer_norm"],
    "xlnet": ["mask_embedding word_embedding", "layer_0", "layer_1"],
    "t5": ["token_embedding", "encoder/block_0", "encoder/block_1 encoder/final_norm",
           "decoder/block_0", "decoder/block_1", "decoder/final_norm"],
    "bart": ["decoder_embeddings_layer_norm decoder_position_embedding "
             "encoder_embeddings_layer_norm encoder_position_embedding token_embedding",
             "transformer_layer_0", "transformer_layer_1", "decoder_layer_0", "decoder_layer_1"],
    "elmo": ["char_encoder", "backward_lstm_0 forward_lstm_0", "backward_lstm_1 forward_lstm_1",
             "scalar_mix"],
    "cove": ["embeddings", "backward_lstm_0 forward_lstm_0", "backward_lstm_1 forward_lstm_1"],
    "cvt": ["embeddings", "lstm_layer_0_backward lstm_layer_0_forward",
            "lstm_layer_1_backward lstm_layer_1_forward"],
    "ulmfit": ["embeddings", "lstm_layer_0", "lstm_layer_1", "lstm_layer_2"],
}
HIDDEN_STATES = {"bert", "spanbert", "roberta", "albert", "electra", "distilbert", "gpt", "gpt2",
                 "gpt3", "xlnet", "elmo", "cove", "cvt", "ulmfit"}
# T5 and BART give each stack's hidden states (garden.analyze reads them), but a token tagger
# on an encoder-decoder is refused (test_a_token_tagger_on_an_encoder_decoder_is_refused).
ENCODER_DECODERS = {"t5", "bart"}
ENCODERS = {"bert", "spanbert", "roberta", "albert", "electra", "distilbert"}
HEAD_MASK = ENCODERS | {"gpt", "gpt2", "gpt3", "xlnet"}
HEAD_PRUNING = ENCODERS - {"albert"}  # ALBERT shares its block: a head cannot leave one layer
# AdamW at 0.01 with no warmup, as the trainer's build_optimizer takes it.
_ADAMW = Optimization(optimizer="adamw", learning_rate=0.01, lr_schedule="linear", warmup_steps=0,
                      lr_power=1.0, end_learning_rate=0.0, weight_decay=0.01, adam_beta_1=0.9,
                      adam_beta_2=0.999, adam_epsilon=1e-6, clip_norm=1.0)


def _build(family: str, vocab=None, **switches):
    preset, small = PRESETS.get(family, (f"{family}_tiny", {}))
    config = factory.preset_config(preset, default_vocab_size=64, **small)
    if "max_sequence_length" in config:
        config["max_sequence_length"] = 32  # smaller position tables: quicker to build
    if family == "elmo" and vocab:
        config["vocab"] = vocab  # token ids in (a tagger's packer), read through characters
    return models.spec(family).backbone_class()(**{**config, **switches})


_BUILT = {}


def _backbone(family: str):
    """One backbone per family for the optimizer tests (their updates do not interfere)."""
    if family not in _BUILT:
        _BUILT[family] = _build(family)
    return _BUILT[family]


def _label(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) if parts[0] in ("encoder", "decoder") else parts[0]


def _expected_depths(family, variables):
    """variable -> its depth by GROUPS (the head variable: one above them all)."""
    depth_of = {label: d for d, group in enumerate(GROUPS[family]) for label in group.split()}
    return [depth_of.get(_label(v.path), len(GROUPS[family])) for v in variables]


def _head_and_variables(backbone):
    head = keras.Variable(np.full((4, 3), 0.5, np.float32), name="task_head_kernel")
    return head, backbone.trainable_variables + [head]


@pytest.mark.parametrize("family", FAMILIES)
def test_layer_groups_name_every_variable_bottom_to_top(family):
    backbone = _backbone(family)
    groups = backbone.variable_groups()
    assert [" ".join(sorted({_label(v.path) for v in g})) for g in groups] == GROUPS[family]
    # Every trainable variable in exactly one group; the word table (ELMo: its characters) at 0.
    flat = [id(v) for g in groups for v in g]
    assert sorted(flat) == sorted(id(v) for v in backbone.trainable_variables)
    table = backbone.char_encoder.char_embedding if family == "elmo" else backbone.token_embedding
    assert any(v is w for v in groups[0] for w in table.trainable_variables)


@pytest.mark.parametrize("family", FAMILIES)
def test_layer_decay_gives_each_group_its_rate(family):
    """One Adam step with gradients of ones moves each weight by its own learning rate."""
    backbone = _backbone(family)
    head, variables = _head_and_variables(backbone)
    lr, decay = 0.01, 0.8
    opt = create_optimizer("adamw", lr, train_steps=10, warmup_steps=0, weight_decay=0.0,
                           schedule="polynomial", end_learning_rate=lr, layer_decay=decay,
                           layer_groups=backbone.variable_groups())
    opt.build(variables)
    before = [v.numpy().copy() for v in variables]
    opt.apply_gradients(zip([tf.ones_like(v) for v in variables], variables))
    top = len(GROUPS[family])
    measured = {}
    for v, b, depth in zip(variables, before, _expected_depths(family, variables)):
        assert opt.layer_depth(v) == depth, v.path
        assert opt.rate_multiplier(v) == pytest.approx(decay ** (top - depth)), v.path
        measured.setdefault(depth, []).append(float(np.abs(v.numpy() - b).max()) / lr)
    for depth, steps in measured.items():
        np.testing.assert_allclose(steps, decay ** (top - depth), rtol=2e-3,
                                   err_msg=f"{family} depth {depth}")
    assert measured[top] == [pytest.approx(1.0, rel=1e-3)]  # the head: the full rate
    assert max(measured[0]) < min(min(s) for d, s in measured.items() if d > 0)  # embeddings


@pytest.mark.parametrize("family", FAMILIES)
def test_gradual_unfreezing_moves_the_head_then_the_group_below(family):
    backbone = _backbone(family)
    head, variables = _head_and_variables(backbone)
    opt = create_optimizer("adamw", 0.01, train_steps=10, warmup_steps=0, weight_decay=0.1,
                           unfreeze_every=1, layer_groups=backbone.variable_groups())
    opt.build(variables)
    # The groups that hold variables join top first, one a step: the head at 0, ... (an empty
    # group takes no turn).
    held = [d for d, g in enumerate(GROUPS[family]) if g] + [len(GROUPS[family])]
    turn = {depth: rank for rank, depth in enumerate(reversed(held))}
    depths = _expected_depths(family, variables)
    assert [opt.first_step(v) for v in variables] == [turn[d] for d in depths]
    rng = np.random.default_rng(0)
    start = [v.numpy().copy() for v in variables]
    for step in (0, 1):
        opt.apply_gradients(zip([tf.constant(rng.normal(size=v.shape).astype("float32"))
                                 for v in variables], variables))
        moved = {d for v, s, d in zip(variables, start, depths) if not np.array_equal(v.numpy(), s)}
        assert moved == {d for d in depths if turn[d] <= step}, (family, step)
    assert moved == {held[-1], held[-2]}  # the head, then the top group that has variables


@pytest.mark.parametrize("family", FAMILIES)
def test_feature_layers_and_scalar_mix_or_refusal(family, tmp_path):
    """garden.Tagging's feature-based switches: the backbone frozen, its last two hidden
    states mixed by trained scalars; a family without hidden states is refused by name."""
    from garden.models.tagging import TokenTagger

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    if family in ENCODER_DECODERS:
        with pytest.raises(ValueError, match=rf"the {family} backbone .*'decoder_sequence_output'"
                                             r".*tag with an encoder family"):
            TokenTagger(_build(family, output_hidden_states=True), 3, feature_layers=2,
                        scalar_mix=True)
        return
    if family not in HIDDEN_STATES:
        with pytest.raises(UnsupportedArgument, match=rf"the {family} backbone .*hidden_states.*"
                                                      r"feature_layers"):
            _build(family, output_hidden_states=True)
        return
    backbone = _build(family, vocab=str(vocab), output_hidden_states=True)
    tagger = TokenTagger(backbone, num_labels=3, feature_layers=2, scalar_mix=True)
    trained = {_label(v.path) for v in tagger.trainable_variables}
    assert trained == {"scalar_mix", "tagger_dense"}, trained  # the backbone is frozen
    with pytest.raises(ValueError, match=r"feature_layers=9: the .* gives \d hidden states"):
        TokenTagger(_build(family, vocab=str(vocab), output_hidden_states=True), 3,
                    feature_layers=9)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_a_token_tagger_on_an_encoder_decoder_is_refused(family):
    from garden.models.tagging import TokenTagger

    with pytest.raises(ValueError, match=rf"the {family} backbone .* gives \['decoder_sequence"):
        TokenTagger(_backbone(family), num_labels=3)


@pytest.mark.parametrize("family", FAMILIES)
def test_head_mask_or_refusal(family):
    if family not in HEAD_MASK:
        with pytest.raises(UnsupportedArgument, match=rf"the {family} backbone .*head mask"):
            _build(family, use_head_mask=True)
        return
    backbone = _build(family, use_head_mask=True, dropout=0.0)
    ids = np.array([[2, 5, 6, 7, 3]], "int32")
    inputs = {k: (np.zeros_like(ids) if k == "segment_ids" else
                  np.ones_like(ids) if k == "padding_mask" else ids)
              for k in backbone.input if k != "head_mask"}
    mask = np.ones((2, 2), "float32")
    plain = backbone({**inputs, "head_mask": mask})["sequence_output"]
    mask[0, 1] = 0.0
    masked = backbone({**inputs, "head_mask": mask})["sequence_output"]
    assert float(np.abs(np.asarray(plain) - np.asarray(masked)).max()) > 1e-6


@pytest.mark.parametrize("family", FAMILIES)
def test_head_pruning_or_refusal(family):
    from garden.bertology.prune import pruned_backbone

    backbone = _backbone(family)
    mask = np.array([[1, 0], [1, 1]], np.float32)
    if family not in HEAD_PRUNING:
        with pytest.raises(ValueError, match=rf"the {family} backbone .*num_heads_per_layer"):
            pruned_backbone(backbone, mask)
        return
    smaller = pruned_backbone(backbone, mask)
    assert smaller.get_config()["num_heads_per_layer"] == [1, 2]
    assert smaller.count_params() < backbone.count_params()


@pytest.mark.parametrize("family", FAMILIES)
def test_magnitude_pruning_reaches_every_layer(family):
    from garden.training.pruning import MagnitudePruning, PolynomialSchedule, prunable_kernels

    backbone = _backbone(family)  # (the last test that reads it: its kernels are pruned)
    kernels = prunable_kernels(backbone)
    ids = {id(k) for k in kernels}
    for depth, group in enumerate(backbone.variable_groups()):
        if 0 < depth <= backbone.get_config().get("num_layers", 1) and group:
            assert any(id(v) in ids for v in group), (family, depth)  # each layer is pruned
    pruning = MagnitudePruning(kernels, PolynomialSchedule(0.5, end_step=1, begin_step=0))
    pruning.step(1)
    for k in kernels:
        assert np.mean(k.numpy() == 0) == pytest.approx(0.5, abs=0.01), k.path


@pytest.mark.parametrize("preset", ["gpt2_tiny", "t5_tiny", "t5_v1_1_tiny", "bart_tiny"])
def test_language_models_unfreeze_from_their_top_group(preset):
    """The LM tasks' objects (CausalLMFinetuning, TextToText: the GenerativeLM and its
    backbone) through the trainer's build_optimizer: a head tied to the word table has no
    variable of its own, so the top group trains from step 0 instead of no variable at all;
    T5 v1.1's untied lm_head is the head."""
    from garden.training.settings import FineTuning
    from garden.training.setup import build_optimizer

    lm = factory.generative_lm(default_vocab_size=64, preset=preset)
    opt = build_optimizer(lm, {"model": lm, "backbone": lm.backbone}, train_steps=10,
                          optimization=_ADAMW, precision="float32",
                          fine_tuning=FineTuning(layer_decay=0.5, unfreeze_every=3))
    first = {_label(v.path): opt.first_step(v) for v in lm.trainable_variables}
    starting = sorted(label for label, step in first.items() if step == 0)
    top = {"gpt2_tiny": ["layer_norm"], "t5_tiny": ["decoder/final_norm"],
           "t5_v1_1_tiny": ["lm_head"], "bart_tiny": ["decoder_layer_1"]}[preset]
    assert starting == top
    assert max(first.values()) == 3 * (len(set(first.values())) - 1)  # one group every 3 steps
    assert first["token_embedding"] == max(first.values())  # the embeddings last
    rates = {_label(v.path): opt.rate_multiplier(v) for v in lm.trainable_variables}
    assert rates["token_embedding"] == min(rates.values())


def test_the_trainer_refuses_the_optimizer_switches_where_they_do_nothing(tmp_path):
    from garden.models.tagging import TokenTagger
    from garden.training.settings import FineTuning
    from garden.training.setup import ConfigError, build_optimizer

    args = dict(train_steps=10, optimization=_ADAMW, precision="float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ConfigError, match=r"train.layer_decay needs a task whose model has a "
                                          r"backbone"):
        build_optimizer(model, {"model": model},
                        fine_tuning=FineTuning(layer_decay=0.8, unfreeze_every=None), **args)
    backbone = _build("bert", output_hidden_states=True)
    tagger = TokenTagger(backbone, 3, feature_layers=2)
    with pytest.raises(ConfigError, match=r"train.unfreeze_every: the bert backbone trains no "
                                          r"variable .*feature_layers"):
        build_optimizer(tagger, {"model": tagger, "backbone": backbone},
                        fine_tuning=FineTuning(layer_decay=None, unfreeze_every=2), **args)


@pytest.mark.parametrize("family", ["xlnet", "ulmfit"])
def test_an_argument_the_family_does_not_take_is_refused(family):
    with pytest.raises(UnsupportedArgument, match=rf"the {family} backbone .*dropuot=0.2"):
        _build(family, dropuot=0.2)
    # Off, a switch the family has not asks nothing: accepted.
    assert "attention_probs" not in _build(family, output_attentions=False).output


def test_cvt_tagging_refuses_the_feature_based_switches():
    from garden.tasks.cvt_tagging import CvtTagging

    for switch, value in (("feature_layers", 4), ("lstm_units", 8), ("scalar_mix", True)):
        with pytest.raises(ValueError, match=rf"garden.CvtTagging.{switch}={value!r}"):
            CvtTagging(None, None, "train.conll", "dev.conll", None, **{switch: value})


def test_a_fine_tuning_backbone_with_a_head_mask_is_refused(tmp_path):
    from garden.models.bert.backbone import BertBackbone
    from garden.tasks.classification import Classification

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")

    def masked_bert(default_vocab_size, **kwargs):
        return BertBackbone(vocab_size=default_vocab_size, num_layers=1, hidden_size=8,
                            num_heads=2, intermediate_size=16, use_head_mask=True)

    task = Classification(masked_bert, str(vocab), "train.tsv", "dev.tsv")
    with pytest.raises(ValueError, match="unbind backbone.use_head_mask"):
        task.build_backbone()


def test_bindings_a_converted_backbone_does_not_take_are_refused():
    import gin

    from garden import pretrained, tasks

    tasks.register_with_gin()
    gin.clear_config()  # whatever an earlier test in this process left bound (or locked)
    converted = types.SimpleNamespace(family="bert", path="/converted/bert",
                                      config={"num_layers": 2, "dropout": 0.1,
                                              "trainable": True, "output_attentions": False})
    try:
        gin.parse_config(["backbone.dropout = 0.0", "backbone.trainable = False",
                          "backbone.output_attentions = True"])
        config = pretrained.check_bindings(converted, factory.backbone)
        assert (config["dropout"], config["trainable"], config["output_attentions"]) == \
            (0.0, False, True)  # applied, no longer dropped
        gin.parse_config(["backbone.attention_dropout = 0.2"])
        with pytest.raises(pretrained.ConvertedCheckpointError,
                           match=r"backbone.attention_dropout = 0.2: the converted bert backbone "
                                 r"of /converted/bert takes no attention_dropout"):
            pretrained.check_bindings(converted, factory.backbone)
    finally:
        gin.clear_config()
