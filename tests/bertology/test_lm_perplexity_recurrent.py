"""The LM perplexity of the recurrent families (garden.bertology.perplexity; issue 36 item 8):
ELMo's biLM (forward, backward, and their mean in log space) and ULMFiT's AWD-LSTM LM (causal,
as GPT-2's).

On tiny models built here: the reported perplexities equal exp(mean NLL) computed in numpy
from each line's own logits (one line at a time, so no padding is involved), equal exp(the
pretraining loss) of the same batch (the family's pretraining record, dropout off), an
untrained model is close to uniform over its vocabulary and a few steps of that loss lower it.
Through `garden.analyze perplexity`: a garden.train biLM run and a ULMFiT LM run (2 steps on
tiny bilm data) are scored, and a classifier run of ULMFiT is refused in one line.
"""

from __future__ import annotations

import json
import math
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from garden.bertology import perplexity
from garden.models.elmo.backbone import ElmoBackbone
from garden.models.elmo.bilm import ElmoBiLM
from garden.models.ulmfit.backbone import AwdLstmBackbone
from garden.models.ulmfit.lm import AwdLstmLM
from garden.tasks.pretraining import elmo as elmo_record
from garden.tasks.pretraining import gpt2 as gpt2_record
from text import tokenizers
from text.char_ids import char_table

WORDS = ["the", "movie", "film", "was", "good", "bad", "plot", "great", "dull", "not", "a",
         "story", "actor", "and", "very", ",", "."]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
V = len(SPECIALS) + len(WORDS)  # 22
LINES = ["the movie was good .", "the film was not very good , the plot was dull .",
         "good", "a great story and a great actor .", "the plot was bad bad bad ."]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("recurrent_lm") / "vocab.txt"
    path.write_text("\n".join(SPECIALS + WORDS) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def rows(vocab):
    tokenizer = tokenizers.load_tokenizer("wordpiece", vocab, lower_case=True)
    out = tokenizer.tokenize(LINES)
    assert all(1 not in r for r in out)  # no [UNK]: every word is in the vocabulary
    return tokenizer, out


def _elmo(seed=0):
    keras.utils.set_random_seed(seed)
    return ElmoBiLM(ElmoBackbone.untrained("elmo_tiny", dropout=0.0), V, dropout=0.0)


def _ulmfit(seed=0):
    keras.utils.set_random_seed(seed)
    return AwdLstmLM(AwdLstmBackbone(vocab_size=V, embedding_size=16, hidden_size=24,
                                     num_layers=2, embedding_dropout=0.0, input_dropout=0.0,
                                     hidden_dropout=0.0, weight_dropout=0.0),
                     output_dropout=0.0)


def _log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _numpy_nll(logits, ids, shift):
    """Summed NLL of ids[t + shift] from logits[t] over the valid t (numpy, float64)."""
    log_probs = _log_softmax(np.asarray(logits))
    t = np.arange(max(0, -shift), len(ids) - max(0, shift))
    return -float(log_probs[t, np.asarray(ids)[t + shift]].sum()), len(t)


def _batch(rows, table=None):
    """A pretraining batch of `rows` as make_pretrain --objective=bilm writes them (input_ids,
    input_mask, char_ids flattened), right-padded."""
    ids, mask = perplexity._right_padded(rows)
    batch = {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask)}
    if table is not None:
        batch["char_ids"] = tf.constant(table[ids].reshape(len(rows), -1))
    return batch


def _training_loss(record, model, batch, options=None):
    """The family's pretraining metrics of `batch` (a per-batch mean, as outside a
    distributed step), dropout off."""
    task = types.SimpleNamespace(options=options or {},
                                 model_inputs=lambda b: record.inputs(task, b))
    return {k: float(v) for k, v in record.metrics(task, model, batch, False, None).items()}


def test_elmo_forward_backward_and_mean_equal_numpy_and_the_training_loss(rows):
    tokenizer, ids = rows
    model = _elmo()
    model.softmax.bias.assign(np.linspace(-1, 1, V))  # a softmax that is not uniform
    table = char_table(tokenizer.vocab, model.backbone.max_characters)
    result = perplexity.bilm_perplexity(model, table, ids, batch_size=2)  # padding in batches
    nll, count = {"forward": 0.0, "backward": 0.0}, 0
    for row in ids:
        if len(row) < 2:
            continue
        out = model({"char_ids": table[np.array([row])],
                     "padding_mask": np.ones((1, len(row)), np.int32)}, training=False)
        forward, n = _numpy_nll(out["forward_logits"][0], row, +1)
        backward, _ = _numpy_nll(out["backward_logits"][0], row, -1)
        nll["forward"] += forward
        nll["backward"] += backward
        count += n
    assert result["pieces_scored"] == count == sum(len(r) - 1 for r in ids if len(r) > 1)
    assert result["lines"] == len(LINES) - 1  # "good" alone has no neighbour
    for direction in nll:
        assert result[direction]["perplexity"] == pytest.approx(
            math.exp(nll[direction] / count), rel=1e-5)
    mean = (nll["forward"] + nll["backward"]) / (2 * count)
    assert result["perplexity"] == pytest.approx(math.exp(mean), rel=1e-5)
    # The two directions differ (the mean is not one of them twice).
    assert abs(nll["forward"] - nll["backward"]) / count > 1e-3
    # exp(the biLM's pretraining loss) of the same lines as one batch: its forward_loss and
    # backward_loss are the two directions' nats per piece, its loss their sum.
    loss = _training_loss(elmo_record.RECORD, model, _batch(ids, table),
                          {"sampled_softmax": 0})
    for direction in nll:
        assert math.exp(loss[f"{direction}_loss"]) == pytest.approx(
            result[direction]["perplexity"], rel=1e-5)
    assert math.exp(loss["loss"] / 2) == pytest.approx(result["perplexity"], rel=1e-5)


def test_ulmfit_perplexity_equals_numpy_and_the_training_loss(rows):
    _, ids = rows
    model = _ulmfit()
    model.get_layer("tied_softmax").bias.assign(np.linspace(-1, 1, V))
    result = perplexity.causal_perplexity(model, ids, batch_size=2)
    nll, count = 0.0, 0
    for row in ids:
        if len(row) < 2:
            continue
        logits = model({"token_ids": np.array([row], np.int32),
                        "padding_mask": np.ones((1, len(row)), np.int32)},
                       training=False)["logits"][0]
        value, n = _numpy_nll(logits, row, +1)
        nll, count = nll + value, count + n
    assert result["pieces_scored"] == count
    assert result["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
    loss = _training_loss(gpt2_record.RECORD, model, _batch(ids))
    assert math.exp(loss["loss"]) == pytest.approx(result["perplexity"], rel=1e-5)


def _train(model, loss_fn, steps=10, rate=3e-2):
    optimizer = keras.optimizers.Adam(rate)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, model.trainable_variables)
                                   if g is not None])  # the scalar mix is not in the LM loss


@pytest.mark.parametrize("family", ["elmo", "ulmfit"])
def test_untrained_is_near_uniform_and_training_lowers_it(rows, family):
    """A fresh softmax (zero bias, small kernel) spreads its probability almost evenly: the
    perplexity of an untrained model is V x exp(the logits' spread), measured 1.00-1.02 x V
    here; within exp(+-0.2) of V = 22 leaves room for other seeds and fails for any model that
    has learnt something (or reads the wrong logits: their perplexity is far from V). 10 Adam
    steps (rate 0.03) of the pretraining loss on these lines take it below 3/4 of that
    (measured 22 -> 5.6 for ELMo's mean, 22 -> 11.4 for ULMFiT)."""
    tokenizer, ids = rows
    if family == "elmo":
        model = _elmo(seed=1)
        table = char_table(tokenizer.vocab, model.backbone.max_characters)
        batch = _batch(ids, table)

        def score():
            return perplexity.bilm_perplexity(model, table, ids)["perplexity"]

        def loss():
            task = types.SimpleNamespace(options={"sampled_softmax": 0},
                                         model_inputs=lambda b: elmo_record._inputs(task, b))
            return elmo_record.RECORD.metrics(task, model, batch, True, None)["loss"]
    else:
        model = _ulmfit(seed=1)
        batch = _batch(ids)

        def score():
            return perplexity.causal_perplexity(model, ids)["perplexity"]

        def loss():
            task = types.SimpleNamespace(model_inputs=lambda b: gpt2_record._inputs(task, b))
            return gpt2_record.RECORD.metrics(task, model, batch, True, None)["loss"]
    before = score()
    assert V * math.exp(-0.2) < before < V * math.exp(0.2), before
    _train(model, loss)
    after = score()
    assert after < 0.75 * before, (before, after)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory, vocab):
    """Two-step garden.train runs of configs/elmo_tiny.gin and ulmfit_tiny.gin on one tiny
    make_pretrain --objective=bilm --characters set (30 documents of LINES' words; ULMFiT
    reads its input_ids and leaves char_ids), and a one-step ULMFiT classifier run."""
    import random

    from convert_testing import scratch_classification_args
    from objective_testing import bilm_lm_args
    from testing import run_fixture_tool, train_in_process

    root = tmp_path_factory.mktemp("recurrent_runs")
    rng = random.Random(0)
    (root / "corpus").mkdir()
    (root / "corpus" / "part-0.txt").write_text("\n\n".join(
        "\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
                  for _ in range(4)) for _ in range(30)) + "\n")
    run_fixture_tool("data_pipelines.make_pretrain", "--objective=bilm",
                     f"--input={root / 'corpus' / '*.txt'}", f"--output_dir={root / 'bilm'}",
                     f"--vocab={vocab}", "--num_shards=1", "--characters",
                     "--max_characters=20")
    for family in ("elmo", "ulmfit"):
        train_in_process(bilm_lm_args(f"configs/{family}_tiny.gin", root / family, vocab,
                                      root / "bilm", 2, "--gin_param=train.warmup_steps=1"),
                         str(root / family), f"{family}_pretraining", 2)
    args = scratch_classification_args(root, root / "classifier", 1,
                                       "--gin_param=EXPORT_BASE=None")
    args[0] = "--config=configs/finetune/classification_ulmfit_tiny.gin"
    train_in_process([a for a in args if not a.startswith("--gin_param=EXPORT_BASE='")],
                     str(root / "classifier"), "classification", 1)
    text = root / "held_out.txt"
    text.write_text("\n".join(LINES) + "\n")
    return root, text


def _analyze(model_dir, text, report, capsys):
    from garden import analyze

    code = analyze.main(["perplexity", f"--model={model_dir}", f"--input={text}",
                         f"--output={report}", "--max_seq_length=8"])
    path = report / "perplexity.json"
    return code, capsys.readouterr(), json.loads(path.read_text()) if path.exists() else None


def test_garden_analyze_scores_a_bilm_run_and_a_ulmfit_lm_run(runs_dir, vocab, tmp_path,
                                                              capsys):
    from garden import runs

    root, text = runs_dir
    tokenizer = tokenizers.load_tokenizer("wordpiece", vocab, lower_case=True)
    rows = [r[:8] for r in tokenizer.tokenize(LINES)]  # --max_seq_length=8 cuts line 2
    scored = sum(len(r) - 1 for r in rows if len(r) > 1)
    for family in ("elmo", "ulmfit"):
        code, captured, result = _analyze(root / family, text, tmp_path / family, capsys)
        assert code == 0, captured.err
        model = runs.open(str(root / family), who="test").task_model()  # the restored LM
        if family == "elmo":
            assert result["measure"].startswith("perplexity (biLM")
            table = char_table(tokenizer.vocab, model.backbone.max_characters)
            # The characters it reads a piece with are those the biLM trained on.
            shard = root / "bilm" / "train-00000-of-00001.tfrecord"
            record = next(iter(tf.data.TFRecordDataset(str(shard))))
            example = tf.train.Example.FromString(record.numpy()).features.feature
            trained_ids = np.array(example["input_ids"].int64_list.value)
            np.testing.assert_array_equal(
                np.array(example["char_ids"].int64_list.value),
                table[trained_ids].reshape(-1))
            want = perplexity.bilm_perplexity(model, table, rows)
            for direction in ("forward", "backward"):
                assert result[direction]["perplexity"] == pytest.approx(
                    want[direction]["perplexity"], rel=1e-6)
        else:
            assert result["measure"] == "perplexity (causal)"
            want = perplexity.causal_perplexity(model, rows)
        assert result["pieces_scored"] == scored and result["max_pieces"] == 8
        assert result["perplexity"] == pytest.approx(want["perplexity"], rel=1e-6)
        # Two steps leave it close to uniform over the 22 pieces.
        assert V / 2 < result["perplexity"] < 2 * V, result


def test_a_classifier_run_is_refused_in_one_line(runs_dir, tmp_path, capsys):
    root, text = runs_dir
    code, captured, result = _analyze(root / "classifier", text, tmp_path / "report", capsys)
    assert code == 2 and result is None
    error = captured.err.strip().splitlines()
    assert len(error) == 1 and "Traceback" not in captured.err, captured.err
    assert "is neither a causal LM" in error[0], error
    assert "is not ELMo's biLM (ElmoBiLM) or ULMFiT's LM (AwdLstmLM)" in error[0], error
