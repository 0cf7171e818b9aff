"""XLNet fine-tuning: the "xlnet" text layout (A <sep> B <sep> <cls>, segment ids 0 / 1 / 2,
right-padded) against Hugging Face's XLNetTokenizer on a SentencePiece model with XLNet's ids
(<unk>=0 <s>=1 </s>=2 <cls>=3 <sep>=4 <pad>=5 <mask>=6 <eod>=7); the backbone's pooled_output
on that right-padded packing against the input of Hugging Face's XLNetForSequenceClassification
sequence_summary (its last, left-padded position); the QA windows of the layout in the graph,
in make_finetune's columns and in its record bytes alike; a tiny XLNet fine-tuned through
garden.train into classification (beats the majority class) and into QA, both exports
answering raw text in a fresh process (the QA answer's character span inside its context)."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
import tensorflow as tf

from text import tokenizers
from text.finetune import base as finetune_base
from text.finetune.question_answering import (SCALARS, SquadOptions, examples_columns,
                                              examples_records, record_spec, to_records)
from text.finetune.question_answering_sources import SquadExample
from garden.serving.text import TextPacker
from testing import run_code, train_in_process

WORDS = ["movie", "film", "plot", "story", "actor", "city", "paris", "london", "river", "house"]
POS, NEG = ["good", "great", "fun", "fine"], ["bad", "awful", "boring", "dull"]
PAIRS_A = ["the movie was good .", "a plot", "the story was really quite awful and boring .", ""]
PAIRS_B = ["what was it ?", "the city was paris and the river was fine and good .", "dull", "x"]


def _corpus():
    rng = random.Random(0)
    vocab = WORDS + POS + NEG + ["the", "was", "what", "who", "where", "is", "in", "lives", "very"]
    return [" ".join(rng.choice(vocab) for _ in range(8)) + " ." for _ in range(400)] + [
        "what was the movie ?", "who lives in paris ?"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("xlnet_finetuning")


@pytest.fixture(scope="module")
def spiece(root):
    """A SentencePiece unigram model with XLNet's special ids; its path."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_corpus()), model_writer=model, vocab_size=80,
        model_type="unigram", unk_id=0, bos_id=1, eos_id=2, pad_id=5,
        control_symbols=["<cls>", "<sep>", "<mask>", "<eod>"], hard_vocab_limit=False,
        minloglevel=2)
    path = str(root / "spiece.model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return path


@pytest.fixture(scope="module")
def hf_tokenizer(spiece):
    """transformers 5's XLNetTokenizer over the model's pieces and scores (its spiece.model
    loader needs a conversion this venv lacks; the Unigram of the same pieces is what the slow
    tokenizer ran)."""
    import sentencepiece as spm
    import transformers

    sp = spm.SentencePieceProcessor(model_file=spiece)
    tok = transformers.XLNetTokenizer(
        vocab=[(sp.IdToPiece(i), sp.GetScore(i)) for i in range(sp.GetPieceSize())])
    assert (tok.cls_token_id, tok.sep_token_id, tok.pad_token_id) == (3, 4, 5)
    return tok


def _packer(spiece, length):
    return TextPacker(tokenizers.load_tokenizer("sentencepiece", spiece, lower_case=False),
                      length, "xlnet")


@pytest.mark.parametrize("pair", [False, True], ids=["single", "pair"])
def test_xlnet_layout_is_hugging_face_xlnet_tokenizer_right_padded(spiece, hf_tokenizer, pair):
    length = 24
    packer = _packer(spiece, length)
    assert (packer.cls_id, packer.sep_id, packer.pad_id) == (3, 4, 5)
    assert packer.input_names == ("token_ids", "segment_ids", "padding_mask")
    got = packer.encode_numpy(PAIRS_A, PAIRS_B if pair else None)
    hf_tokenizer.padding_side = "right"
    want = hf_tokenizer(PAIRS_A, PAIRS_B if pair else None, padding="max_length",
                        max_length=length, truncation=True, return_token_type_ids=True)
    np.testing.assert_array_equal(got["token_ids"], np.array(want["input_ids"]))
    np.testing.assert_array_equal(got["padding_mask"], np.array(want["attention_mask"]))
    real = got["padding_mask"] == 1
    # Hugging Face pads token_type_ids with 3 (never attended to); the garden with 0.
    np.testing.assert_array_equal(got["segment_ids"][real], np.array(want["token_type_ids"])[real])
    assert (got["segment_ids"][~real] == 0).all()
    last = real.sum(1) - 1
    assert (got["token_ids"][np.arange(4), last] == 3).all()  # <cls> last, segment 2
    assert (got["segment_ids"][np.arange(4), last] == 2).all()
    if pair:  # truncation happened (longest first) and both segments are present
        assert real.all(axis=1)[1] and (got["segment_ids"] == 1).any(axis=1).all()


@pytest.fixture(scope="module")
def converted(spiece, hf_tokenizer, root):
    """A tiny random Hugging Face XLNetLMHeadModel with its spiece.model, converted by
    garden.convert to OUT; (the source model, its config, OUT)."""
    import shutil

    import torch
    import transformers

    from convert_testing import randomize_torch_, save_hf_dir
    from garden import convert

    cfg = transformers.XLNetConfig(vocab_size=len(hf_tokenizer), d_model=32, n_layer=2,
                                   n_head=2, d_inner=64, ff_activation="gelu", dropout=0.0,
                                   num_labels=2)
    torch.manual_seed(0)
    lm = randomize_torch_(transformers.XLNetLMHeadModel(cfg).eval(), seed=1)
    src = save_hf_dir(lm, str(root / "hf_xlnet"))
    shutil.copy(spiece, src)
    out = root / "out_xlnet"
    assert convert.main(["--source=huggingface", "--model=xlnet", f"--input={src}",
                         f"--output={out}"]) == 0
    return lm, cfg, out


def test_converted_directory_records_the_xlnet_layout(converted):
    info = json.loads((converted[2] / "convert_info.json").read_text())
    assert info["tokenizer"]["layout"] == "xlnet", info["tokenizer"]
    assert info["tokenizer"]["tokenizer"] == "sentencepiece", info["tokenizer"]


def test_pooled_output_is_hugging_face_sequence_summary_input(converted, hf_tokenizer, root):
    """The classifier of the xlnet config restored from OUT at step 0: the garden packs
    right-padded and pools the last real position; Hugging Face packs left-padded and
    XLNetForSequenceClassification's sequence_summary takes position -1."""
    import gin
    import torch
    import transformers

    from garden.models import factory
    from garden.tasks.classification import Classification

    lm, cfg, out = converted
    clf = transformers.XLNetForSequenceClassification(cfg).eval()
    clf.transformer.load_state_dict(lm.transformer.state_dict())
    seen = {}
    clf.sequence_summary.register_forward_hook(  # (returns None: the output is kept)
        lambda module, args, out: seen.update(hidden=args[0][:, -1].detach().numpy()))
    hf_tokenizer.padding_side = "left"
    hf = hf_tokenizer(PAIRS_A, PAIRS_B, padding="max_length", max_length=24, truncation=True,
                      return_token_type_ids=True,
                      return_tensors="pt")
    with torch.no_grad():
        clf(input_ids=hf["input_ids"], token_type_ids=hf["token_type_ids"],
            attention_mask=hf["attention_mask"].float())
    rng = random.Random(1)
    (root / "byoc_train.tsv").write_text(_classification_rows(rng, 16))
    gin.clear_config()
    task = Classification(backbone=factory.backbone, vocab=None,
                          init_checkpoint=str(out), train_file=str(root / "byoc_train.tsv"),
                          eval_file=str(root / "byoc_train.tsv"), max_seq_length=24)
    task.prepare()
    assert task.layout == "xlnet" and task.tokenizer_kind == "sentencepiece"
    _, objects = task.build_model()
    ours = objects["backbone"](task.packer.encode_numpy(PAIRS_A, PAIRS_B),
                               training=False)["pooled_output"].numpy()
    assert np.abs(ours - seen["hidden"]).max() <= 1e-4
    assert np.abs(seen["hidden"]).max() > 0.1


LONG = "the movie was really good and the city was paris . " * 4


def _squad_examples():
    cases = [("what was the movie ?", LONG, ("really good", LONG.index("really good"))),
             ("where is it ?", "the house is in london .", ("london", 16)),
             ("who ?", "", None)]
    return [SquadExample(f"q{i}", q, c, (a,) if a else (), a is None)
            for i, (q, c, a) in enumerate(cases)]


def test_qa_windows_graph_columns_and_records_agree(spiece):
    from garden.models.question_answering import SpanExtractor
    from garden.models.xlnet import XLNetBackbone
    from garden.serving.question_answering import QuestionAnsweringServing

    options = SquadOptions(32, 7, 8, "xlnet")
    tokenizer = tokenizers.load_tokenizer("sentencepiece", spiece, lower_case=False)
    examples = _squad_examples()
    columns = examples_columns(examples, tokenizer, options)
    packer = _packer(spiece, 32)
    backbone = XLNetBackbone(vocab_size=packer.vocab_size, num_layers=1, hidden_size=16,
                             num_heads=2, intermediate_size=32)
    module = QuestionAnsweringServing(SpanExtractor(backbone), packer, spiece, doc_stride=7,
                                      max_query_length=8)
    graph = module.windows(tf.constant([e.question for e in examples]),
                           tf.constant([e.context for e in examples]))
    for name in ("example_index", "window_index", "token_ids", "segment_ids", "padding_mask",
                 "token_is_max_context", "context_char_start", "context_char_end"):
        want = columns[name][:, 0] if name in SCALARS else columns[name]
        np.testing.assert_array_equal(graph[name].numpy(), want, err_msg=name)
    ids, seg, mask = columns["token_ids"], columns["segment_ids"], columns["padding_mask"]
    assert len(ids) > 4  # the long context: several windows
    for r in range(len(ids)):
        n = int(mask[r].sum())
        assert ids[r, n - 2:n].tolist() == [4, 3] and seg[r, n - 1] == 2  # ... <sep> <cls>
        assert (ids[r, n:] == 5).all() and (seg[r, n:] == 0).all()
    # The gold answer where a window holds it: its pieces' characters are the answer's.
    held = np.flatnonzero((columns["example_index"][:, 0] == 0) & (columns["start_position"][:, 0] > 0))
    assert len(held)
    for r in held:
        s, e = columns["start_position"][r, 0], columns["end_position"][r, 0]
        text = LONG[columns["context_char_start"][r, s]:columns["context_char_end"][r, e]]
        assert text.strip() == "really good"
    # make_finetune's record bytes are the serialized columns.
    got = examples_records(examples, tokenizer, options)
    want = finetune_base.records_of_columns(record_spec(options), to_records(columns))
    assert [r for *_, r in got] == [r for *_, r in want]


# --- fine-tuning through garden.train ------------------------------------------------------------

def _classification_rows(rng, n):
    rows = ["text_a\tlabel"]
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        rows.append(f"the {rng.choice(WORDS)} was {rng.choice(POS if label == 'pos' else NEG)} ."
                    f"\t{label}")
    return "\n".join(rows) + "\n"


def _squad_file(rng, n):
    data = []
    for i in range(n):
        word, place = rng.choice(WORDS), rng.choice(["paris", "london"])
        context = f"the {word} is in {place} . the river was good ."
        qa = {"id": f"x{i}", "question": f"where is the {word} ?",
              "answers": [{"text": place, "answer_start": context.index(place)}]}
        data.append({"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]})
    return {"version": "1.1", "data": data}


@pytest.fixture(scope="module")
def trained(spiece, converted, root):
    """Classification and QA exports of a tiny XLNet trained from scratch by garden.train, and
    a classification export fine-tuned from the converted Hugging Face XLNet (no VOCAB: OUT's
    spiece.model, casing and layout)."""
    rng = random.Random(0)
    (root / "train.tsv").write_text(_classification_rows(rng, 96))
    (root / "dev.tsv").write_text(_classification_rows(rng, 32))
    for split, n in (("train", 24), ("dev", 8)):
        with open(root / f"{split}.json", "w") as f:
            json.dump(_squad_file(rng, n), f)
    common = [f"--gin_param=VOCAB='{spiece}'", "--gin_param=INIT_CHECKPOINT=None",
              "--gin_param=backbone.dropout=0.0", "--gin_param=train.warmup_steps=5",
              "--gin_param=train.log_every=10", "--strategy=one_device"]

    def finetune(name, config, data, task, steps, batch, *flags):
        """garden.train on root/train.<data> (eval: root/dev.<data>) into root/<name>."""
        model_dir = root / name
        return train_in_process([
            f"--config=configs/finetune/{config}", f"--model_dir={model_dir}",
            f"--gin_param=TRAIN_FILE='{root / f'train.{data}'}'",
            f"--gin_param=EVAL_FILE='{root / f'dev.{data}'}'", f"--gin_param=EXPORT_BASE='{root / 'export'}'",
            f"--gin_param=TRAIN_STEPS={steps}", f"--gin_param=train.global_batch_size={batch}", *flags],
            str(model_dir), task, steps)

    out = {}
    out["classification"] = finetune(
        "classification", "classification_xlnet_tiny.gin", "tsv", "classification", 40, 16,
        "--gin_param=garden.Classification.max_seq_length=32",
        "--gin_param=train.learning_rate=2e-3", *common)
    out["qa"] = finetune(
        "qa", "question_answering_xlnet_tiny.gin", "json", "question_answering", 4, 8, "--gin_param=TRAIN_RECORDS=None",
        "--gin_param=garden.QuestionAnswering.max_seq_length=48",
        "--gin_param=garden.QuestionAnswering.doc_stride=16",
        "--gin_param=garden.QuestionAnswering.max_query_length=16", *common)
    out["byoc"] = finetune(
        "byoc", "classification_xlnet_tiny.gin", "tsv", "classification", 3, 8,
        f"--gin_param=INIT_CHECKPOINT='{converted[2]}'",
        "--gin_param=garden.Classification.max_seq_length=32",
        "--gin_param=train.warmup_steps=1", "--strategy=one_device")
    return out


def test_classification_learns_beyond_the_majority_class(trained):
    # 40 steps of 16 (60 until 2026-12-07): measured dev accuracy 1.0 on the 32 dev rows
    # against a majority of 0.469 (the bar 0.669).
    s = trained["classification"]
    assert s["eval_accuracy"] >= s["majority_baseline_accuracy"] + 0.2, s


SERVE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - the SentencePiece ops
clf, qa = sys.argv[1], sys.argv[2]
r = tf.saved_model.load(clf).signatures["serving_default"](
    text_a=tf.constant(["the plot was great .", "the city was awful ."]))
out = {"classification": {k: v.numpy().tolist() if v.dtype != tf.string else
                          [t.decode() for t in v.numpy().reshape(-1)] for k, v in r.items()}}
contexts = ["the actor is in london . the river was good .", "the house is in paris ."]
r = tf.saved_model.load(qa).signatures["serving_default"](
    question=tf.constant(["where is the actor ?", "where is the house ?"]),
    context=tf.constant(contexts))
out["qa"] = {"answer": [a.decode() for a in r["answer"].numpy().tolist()],
             "start": r["start"].numpy().tolist(), "end": r["end"].numpy().tolist(),
             "contexts": contexts}
out["layouts"] = [json.load(open(d + "/assets.extra/garden_export.json")).get("layout")
                  for d in sys.argv[1:]]
r = tf.saved_model.load(sys.argv[3]).signatures["serving_default"](
    text_a=tf.constant(["the plot was great ."]))
out["byoc"] = [t.decode() for v in r.values() if v.dtype == tf.string
               for t in v.numpy().reshape(-1)]
print(json.dumps(out))
"""


def test_exports_answer_raw_text_in_a_fresh_process(trained):
    proc = run_code(SERVE, trained["classification"]["export_dir"],
                    trained["qa"]["export_dir"], trained["byoc"]["export_dir"])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    labels = [v for k, v in out["classification"].items() if isinstance(v, list) and v
              and isinstance(v[0], str)]
    assert labels and labels[0] == ["pos", "neg"], out["classification"]
    qa = out["qa"]
    for answer, start, end, context in zip(qa["answer"], qa["start"], qa["end"], qa["contexts"]):
        assert 0 <= start < end <= len(context), qa
        assert context[start:end] == answer and answer.strip(), qa
    assert out["layouts"] == ["xlnet", "xlnet", "xlnet"], out["layouts"]
    # The converted XLNet's classifier answers raw text with the task's labels.
    assert out["byoc"] and set(out["byoc"]) <= {"pos", "neg"}, out["byoc"]
