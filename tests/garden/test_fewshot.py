"""garden.fewshot: the GPT-3 protocol on a toy causal LM (tests/generative_testing.py) with a
byte-level BPE vocabulary learnt by make_vocab from the sample SWAG task. Multiple-choice
scores are checked against a hand computation (one unpadded sequence per option through the
model, tf.nn.log_softmax), prompts against the protocol's text, the command line end to end on
a Keras-saved model."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from data_pipelines import make_vocab
from data_pipelines.sample_tasks.__main__ import documents, generator
from garden import fewshot
from generative_testing import ToyCausalLM


@keras.saving.register_keras_serializable(package="garden_tests")
class SavableToyCausalLM(ToyCausalLM):
    """The toy with a config, so that model.save / load_model round-trip it."""

    def __init__(self, vocab_size=40, max_decoder_length=512, seed=0, **kwargs):
        super().__init__(vocab_size=vocab_size, max_decoder_length=max_decoder_length,
                         seed=seed, **kwargs)

    def get_config(self):
        return dict(super().get_config(), vocab_size=self.vocab_size,
                    max_decoder_length=self.max_decoder_length)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("fewshot")
    generator("swag")(documents(), str(root / "swag"))
    make_vocab.main(["--tokenizer=bpe", f"--input={root / 'swag' / 'train.csv'}",
                     f"--output={root / 'model'}", "--vocab_size=400"])
    tok = tokenizers.load_tokenizer("bpe", str(root / "model" / "vocab.json"), lower_case=False)
    model = SavableToyCausalLM(vocab_size=tok.vocab.size, seed=4)
    scorer = fewshot.Scorer(model, tok, eos_id=tok.vocab.special("eod"),
                            pad_id=tok.vocab.special("pad"))
    return dict(root=root, tok=tok, model=model, scorer=scorer,
                train=fewshot.read_swag(str(root / "swag" / "train.csv")),
                val=fewshot.read_swag(str(root / "swag" / "val.csv")))


def _hand_log_likelihood(model, tok, context, completion):
    ctx, comp = (list(map(int, x)) for x in tok.tokenize([context, completion]))
    ids = np.array([ctx + comp], np.int32)
    logits = model({"token_ids": ids, "padding_mask": np.ones_like(ids)})["logits"][0]
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float64)).numpy()
    return [log_probs[len(ctx) + j - 1, t] for j, t in enumerate(comp)]


def test_choice_scores_equal_hand_computation(setup):
    model, tok, scorer = setup["model"], setup["tok"], setup["scorer"]
    example = setup["val"][0]
    demos = fewshot.sample_demos(setup["train"], 1, seed=0, index=0)
    prompt = fewshot.build_prompt(example, demos)
    options = example.completions
    assert all(o.startswith(" ") for o in options)
    lengths = {len(tok.tokenize([o])[0]) for o in options}
    assert len(lengths) > 1, "options of one length would not test the left padding"
    hand = [_hand_log_likelihood(model, tok, prompt, o) for o in options]
    np.testing.assert_allclose(fewshot.choice_scores(scorer, prompt, options),
                               [np.mean(h) for h in hand], rtol=1e-5, atol=1e-6)
    unconditional = [_hand_log_likelihood(model, tok, "Answer:", o) for o in options]
    np.testing.assert_allclose(
        fewshot.choice_scores(scorer, prompt, options, "unconditional"),
        [np.sum(h) - np.sum(u) for h, u in zip(hand, unconditional)], rtol=1e-5, atol=1e-5)


def test_k_demonstrations_change_the_prompt_as_specified(setup):
    train, example = setup["train"], setup["val"][3]
    assert fewshot.build_prompt(example, fewshot.sample_demos(train, 0, 0, 3)) == example.context
    demos = fewshot.sample_demos(train, 3, seed=5, index=3)
    expected = "\n".join([d.context + d.completions[d.label] for d in demos] + [example.context])
    assert fewshot.build_prompt(example, demos) == expected
    assert len(expected.split("\n")) == 4 and example not in demos
    assert demos == fewshot.sample_demos(train, 3, seed=5, index=3)
    assert demos != fewshot.sample_demos(train, 3, seed=6, index=3)
    # A demonstration split of one example never offers that example as its own demo.
    assert fewshot.sample_demos([example, train[0]], 1, 0, 0, exclude=example) == [train[0]]


def test_command_line_swag_and_freeform(setup, capsys):
    root, model, scorer = setup["root"], setup["model"], setup["scorer"]
    model_dir = root / "model"
    model.save(str(model_dir / "model.keras"))
    out = root / "swag.json"
    args = [f"--model_dir={model_dir}", "--task=swag", f"--demos={root / 'swag' / 'train.csv'}",
            f"--eval={root / 'swag' / 'val.csv'}", "--k=1", "--max_examples=6",
            f"--output={out}"]
    assert fewshot.main(args) == 0
    result = json.loads(out.read_text())
    expected = [int(np.argmax(fewshot.choice_scores(
        scorer, fewshot.build_prompt(e, fewshot.sample_demos(setup["train"], 1, 0, i, e)),
        e.completions))) == e.label for i, e in enumerate(setup["val"][:6])]
    assert (result["n"], result["k"], result["random_baseline"]) == (6, 1, 0.25)
    assert result["accuracy"] == pytest.approx(np.mean(expected))
    # The same model as a garden.generate model directory (what garden.convert writes): the
    # ids come from its generation.json, the scores are the same.
    from garden.generate_dir import save_model_dir

    generate_dir = save_model_dir(
        str(root / "generate_dir"), model, tokenizer_kind="bpe",
        vocab=str(model_dir / "vocab.json"), eos_id=scorer.eos_id, pad_id=scorer.pad_id)
    again = root / "swag_generate_dir.json"
    assert fewshot.main([f"--model_dir={generate_dir}", *args[1:-1], f"--output={again}"]) == 0
    assert json.loads(again.read_text())["accuracy"] == result["accuracy"]

    # Free form: gold answers are the toy's own beam answers for half the questions.
    questions = [f"what is item {i}?" for i in range(4)]
    prompts = [fewshot.Example(f"Q: {q}\nA:", (" x",)).context for q in questions]
    width = max(len(ids) for ids in scorer.tokenize(prompts))  # evaluate's: one trace for both
    answers = scorer.generate(prompts, max_new_tokens=4, pad_to=width)
    rows = [{"question": q, "answer": (a if i % 2 == 0 else a + " not") or "empty"}
            for i, (q, a) in enumerate(zip(questions, answers))]
    qa = root / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = fewshot.read_freeform(str(qa))
    free = fewshot.evaluate(scorer, "freeform", data, data, k=0, max_new_tokens=4,
                            batch_size=2)
    hits = [fewshot.normalize_answer(a) == fewshot.normalize_answer(r["answer"])
            for a, r in zip(answers, rows)]
    assert hits[0] and not hits[1]
    assert (free["n"], free["exact_match"]) == (4, pytest.approx(np.mean(hits)))
    capsys.readouterr()

    qa.write_text('{"question": "q", "answer": "a"}\n{"question": "q"}\n')
    assert fewshot.main([f"--model_dir={model_dir}", "--task=freeform", f"--demos={qa}",
                         f"--eval={qa}"]) == 2
    assert f"{qa}:2:" in capsys.readouterr().err
