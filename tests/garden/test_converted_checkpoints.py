"""Bring your own checkpoint (issue 23 item 3): a garden.convert output directory is a complete
starting point for fine-tuning (garden/pretrained.py).

For each source (Hugging Face, Google's TF1 release layout, Model Garden) a tiny random model is
written in that source's own layout, converted with `python -m garden.convert`, fine-tuned a few
steps with `garden.train --gin_param=INIT_CHECKPOINT=OUT` (no VOCAB, no lower_case bound: both
come from OUT), exported, and the export answered in a fresh process. At step 0 the task's
backbone (built and restored in-process through the same code path as the task) equals the
source model within 1e-4; the copied tokenizer gives the source tokenizer's ids (transformers'
BertTokenizer from the same vocab.txt, uncased and cased); a contradicting size binding and a
directory that is not a checkpoint are refused in one line.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (  # noqa: E402
    hf_bert_to_tf1_weights, max_abs_diff, random_bert_inputs, step0_backbone, task_files,
    torch_state_dict_to_numpy, train_args, write_hf_bert, write_task_files, write_tf1_checkpoint)
from testing import REPO_ROOT, run_code, run_tool, train_in_process  # noqa: E402

TOL = 1e-4
SAMPLES = [("The movie was GOOD, really!", "I liked the plot."),
           ("très bien: the Acting wasn't dull", "It's London and Paris ?"),
           ("unknownword film", "")]


def convert_cli(*args, check=True):
    """`python -m garden.convert args` in a process of its own (forked from a server that has
    imported TensorFlow: testing.run_tool)."""
    return run_tool("garden.convert", *args, check=check, timeout=300)


# --- data ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("byoc")


@pytest.fixture(scope="module")
def data(root):
    return write_task_files(root / "data", random.Random(0))


def _converted(root, name, *args):
    out = root / f"out_{name}"
    proc = convert_cli(*args, f"--output={out}")
    return out, proc


@pytest.fixture(scope="module")
def hf_bert(root):
    """A Hugging Face BERT directory (uncased vocab.txt, tokenizer_config.json) and OUT."""
    src = write_hf_bert(str(root / "hf_bert"), cased=False, seed=0)
    out, proc = _converted(root, "hf_bert", "--source=huggingface", "--model=bert",
                           f"--input={src['dir']}")
    return dict(src, out=out, stdout=proc.stdout)


@pytest.fixture(scope="module")
def hf_bert_cased(root):
    src = write_hf_bert(str(root / "hf_bert_c"), cased=True, seed=1)
    out, _ = _converted(root, "hf_bert_c", "--source=huggingface", "--model=bert",
                        f"--input={src['dir']}")
    return dict(src, out=out)


def _tf1_release(root, name, src):
    """Google's release layout: <name>/bert_model.ckpt, bert_config.json, vocab.txt."""
    folder = root / name
    folder.mkdir()
    weights = hf_bert_to_tf1_weights(torch_state_dict_to_numpy(src["model"]))
    prefix = write_tf1_checkpoint(weights, str(folder / "bert_model.ckpt"))
    config = src["model"].config
    (folder / "bert_config.json").write_text(json.dumps({
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size, "initializer_range": 0.02}))
    shutil.copyfile(src["vocab"], folder / "vocab.txt")
    return folder, prefix


@pytest.fixture(scope="module")
def tf1_bert(root, hf_bert):
    folder, prefix = _tf1_release(root, "uncased_L-2_H-32_A-4", hf_bert)
    out, _ = _converted(root, "tf1_bert", "--source=tf1", "--model=bert", f"--input={prefix}",
                        f"--config={folder / 'bert_config.json'}")
    return dict(hf_bert, out=out, prefix=prefix, folder=folder)


# --- the pieces ---------------------------------------------------------------------------------

def _info(out):
    return json.loads((out / "convert_info.json").read_text())


def test_convert_writes_checkpoint_tokenizer_and_architecture(hf_bert, hf_bert_cased):
    info = _info(hf_bert["out"])
    assert (hf_bert["out"] / "checkpoints" / "ckpt-0.index").exists()
    assert (hf_bert["out"] / "vocab.txt").read_bytes() == open(hf_bert["vocab"], "rb").read()
    assert info["checkpoint"] == "checkpoints/ckpt-0"
    assert info["tokenizer"]["tokenizer"] == "wordpiece" and info["tokenizer"]["layout"] == "bert"
    assert info["tokenizer"]["lower_case"] is True
    assert _info(hf_bert_cased["out"])["tokenizer"]["lower_case"] is False
    arch = info["architecture"]
    assert arch["backbone_class"] == "garden.models.bert.backbone:BertBackbone"
    assert arch["config"]["num_layers"] == 2 and arch["config"]["vocab_size"] == 154
    assert "INIT_CHECKPOINT" in hf_bert["stdout"]


@pytest.mark.parametrize("which", ["hf_bert", "hf_bert_cased"])
def test_copied_tokenizer_gives_the_source_tokenizers_ids(which, request):
    from garden import pretrained
    from garden.serving.text import load_packer

    src = request.getfixturevalue(which)
    converted, vocab, lower_case, kind, layout = pretrained.text_settings(
        "test", str(src["out"]), None, None)
    assert converted is not None and vocab == str(src["out"] / "vocab.txt")
    assert lower_case is (which == "hf_bert")
    packer = load_packer(vocab, 32, kind=kind, lower_case=lower_case, layout=layout)
    # Google's layout: the packer looks its specials up by name, not by position.
    assert (packer.pad_id, packer.cls_id, packer.sep_id) == (0, 101, 102)
    # transformers' BertTokenizer of the source directory: its vocab.txt and casing.
    reference = transformers.BertTokenizer.from_pretrained(src["dir"])
    assert reference.do_lower_case is lower_case
    a, b = [s[0] for s in SAMPLES], [s[1] for s in SAMPLES]
    ours = packer.encode_numpy(a, b)
    theirs = reference(a, b, max_length=32, padding="max_length", truncation=True)
    np.testing.assert_array_equal(ours["token_ids"], np.array(theirs["input_ids"]))
    np.testing.assert_array_equal(ours["segment_ids"], np.array(theirs["token_type_ids"]))
    np.testing.assert_array_equal(ours["padding_mask"], np.array(theirs["attention_mask"]))
    assert (ours["token_ids"] == 100).any()  # the unknown word maps to [UNK] = 100
    if which == "hf_bert_cased":  # a capitalised word of the cased vocabulary is kept
        assert reference.convert_tokens_to_ids("Paris") in ours["token_ids"]


def _assert_parity(backbone, torch_model, token_type=True):
    inputs, _ = random_bert_inputs(3, 16, torch_model.config.vocab_size, seed=5)
    names = {"token_ids": "input_ids", "segment_ids": "token_type_ids",
             "padding_mask": "attention_mask"}
    if not token_type:
        inputs.pop("segment_ids")
    with torch.no_grad():
        ref = torch_model(**{names[k]: torch.tensor(v, dtype=torch.long)
                             for k, v in inputs.items()}).last_hidden_state.numpy()
    ours = backbone(inputs, training=False)["sequence_output"].numpy()
    real = inputs["padding_mask"].astype(bool)
    diff = max_abs_diff(ours[real], ref[real])
    assert diff <= TOL, diff
    return diff


def test_step0_backbone_equals_the_source_model(hf_bert, data):
    from garden.tasks.classification import Classification

    _, backbone = step0_backbone(hf_bert["out"], Classification,
                                  train_file=str(data / "train.tsv"),
                                  eval_file=str(data / "dev.tsv"))
    _assert_parity(backbone, hf_bert["model"])


def test_tf1_release_converts_with_casing_from_its_name(tf1_bert, data, root):
    from garden.tasks.classification import Classification

    info = _info(tf1_bert["out"])
    assert info["tokenizer"]["lower_case"] is True and info["tokenizer"]["vocab"] == "vocab.txt"
    _, backbone = step0_backbone(tf1_bert["out"], Classification,
                                  train_file=str(data / "train.tsv"),
                                  eval_file=str(data / "dev.tsv"))
    _assert_parity(backbone, tf1_bert["model"])
    # A release directory named neither uncased_... nor cased_...: the flag is asked for.
    plain = root / "my_bert"
    shutil.copytree(tf1_bert["folder"], plain)
    args = ["--source=tf1", "--model=bert", f"--input={plain / 'bert_model.ckpt'}",
            f"--config={plain / 'bert_config.json'}"]
    proc = convert_cli(*args, f"--output={root / 'out_plain'}", check=False)
    last = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "--lower_case" in last[-1] and "--no-lower_case" in last[-1]
    convert_cli(*args, "--no-lower_case", f"--output={root / 'out_plain'}")
    assert _info(root / "out_plain")["tokenizer"]["lower_case"] is False


def test_model_garden_checkpoint(hf_bert, data, root):
    networks = pytest.importorskip("official.nlp.modeling.networks")
    import tensorflow as tf

    from garden import convert
    from garden.tasks.classification import Classification

    # The Model Garden encoder of the same weights: the garden backbone of the HF model,
    # copied into a BertEncoder through the converter's own tables would be circular, so the
    # encoder is random and the reference is the encoder itself.
    encoder = networks.BertEncoder(
        vocab_size=154, hidden_size=32, num_layers=2, num_attention_heads=4, inner_dim=64,
        max_sequence_length=128, type_vocab_size=2, dict_outputs=True, inner_activation="gelu")
    rng = np.random.default_rng(3)
    for v in encoder.weights:
        v.assign((1.0 + 0.2 * rng.normal(size=v.shape) if v.name.endswith("gamma:0")
                  else 0.05 * rng.normal(size=v.shape)).astype("float32"))
    folder = root / "uncased_mg"
    folder.mkdir()
    prefix = tf.train.Checkpoint(encoder=encoder).write(str(folder / "bert_encoder"))
    (folder / "encoder.json").write_text(json.dumps(encoder.get_config()))
    shutil.copyfile(hf_bert["vocab"], folder / "vocab.txt")
    out = root / "out_mg"
    convert_cli("--source=model_garden", "--model=bert", f"--input={prefix}",
                f"--config={folder / 'encoder.json'}", f"--output={out}")
    assert _info(out)["tokenizer"]["lower_case"] is True
    _, backbone = step0_backbone(out, Classification,
                                  train_file=str(data / "train.tsv"),
                                  eval_file=str(data / "dev.tsv"))
    inputs, _ = random_bert_inputs(3, 16, 154, seed=5)
    ref = encoder({"input_word_ids": inputs["token_ids"], "input_mask": inputs["padding_mask"],
                   "input_type_ids": inputs["segment_ids"]}, training=False)
    ours = backbone(inputs, training=False)["sequence_output"].numpy()
    real = inputs["padding_mask"].astype(bool)
    assert max_abs_diff(ours[real], ref["sequence_output"].numpy()[real]) <= TOL
    del convert


# --- garden.train ---------------------------------------------------------------------------

CONFIGS = {"classification": "configs/finetune/classification_tiny.gin",
           "qa": "configs/finetune/question_answering_tiny.gin"}


@pytest.fixture(scope="module")
def finetuned(hf_bert, data, root):
    """Exports of a few fine-tuning steps from the converted HF BERT directory, into
    classification (through a `python -m garden.train` process of its own, whose log the test
    reads) and question answering (in this process): a sentence head and a span head on the
    converted weights, tokenizer and architecture. The other encoder tasks restore a converted
    directory through the same code (EncoderFinetuning.build_backbone, which every one of them
    inherits) and are fine-tuned and exported from pretraining runs in their own tests; the TF1
    release's directory has the same layout, built into a task's backbone with step-0 parity by
    test_tf1_release_converts_with_casing_from_its_name. (They were three more runs here, about
    a quarter of this file's time.)"""
    exports, logs = {}, {}
    export_base = root / "exports"
    for task in CONFIGS:
        model_dir = root / f"run_{task}"
        args = train_args(CONFIGS[task], hf_bert["out"], model_dir, export_base,
                           *task_files(data, task),
                           f"--gin_param=garden.{_TASK_CLASS[task]}.model_name='hf_{task}'")
        if task == "classification":
            logs[task] = run_tool("garden.train", *args, timeout=600).stdout
        else:
            train_in_process(args, str(model_dir), steps=3)
        exports[f"hf_{task}"] = str(export_base / f"hf_{task}" / "1")
    return exports, logs


_TASK_CLASS = {"classification": "Classification", "qa": "QuestionAnswering"}

_ANSWER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the tokenizer ops the exports use
exports = json.loads(sys.argv[1])
out = {}
for name, path in exports.items():
    serve = tf.saved_model.load(path).signatures["serving_default"]
    if name.endswith("classification"):
        r = serve(text_a=tf.constant(["the movie was great .", "the plot was dull ."]))
    else:  # qa
        r = serve(question=tf.constant(["what is the code ?"]),
                  context=tf.constant(["the movie was fine . the code is good ."]))
    out[name] = sorted(r)
print(json.dumps(out))
"""


def test_finetuned_exports_answer_in_a_fresh_process(finetuned):
    exports, logs = finetuned
    # The sizes line of the converted architecture, printed by the task.
    assert "BertBackbone from converted huggingface bert checkpoint" in logs["classification"]
    assert "num_layers=2, hidden_size=32" in logs["classification"]
    proc = run_code(_ANSWER, json.dumps(exports))
    answered = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(answered) == sorted(exports)
    assert all(answered[name] for name in exports), answered


def _refused(args, capsys):
    from garden import train as train_lib

    capsys.readouterr()
    assert train_lib.main(list(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    return err[-1]


def test_contradicting_bindings_are_one_clear_line(hf_bert, data, root, capsys):
    base = train_args(CONFIGS["classification"], hf_bert["out"], root / "run_bad", None,
                       *task_files(data, "classification"), steps=1)
    line = _refused(base + ["--gin_param=backbone.num_layers=4"], capsys)
    assert line.startswith("error:") and "num_layers = 4" in line and "num_layers = 2" in line
    line = _refused(base + ["--gin_param=backbone.vocab_size=30522"], capsys)
    assert "vocab_size = 30522" in line and "vocab_size = 154" in line
    line = _refused(base + ["--gin_param=garden.Classification.lower_case=False"], capsys)
    assert "lower_case = False" in line and "lower_case = True" in line
    other = root / "other_vocab.txt"
    other.write_text(open(hf_bert["vocab"]).read() + "extra\n")
    line = _refused(base + [f"--gin_param=VOCAB='{other}'"], capsys)
    assert "155 tokens" in line and "154" in line


def test_a_directory_that_is_no_checkpoint_is_one_clear_line(data, root, capsys):
    empty = root / "not_a_checkpoint"
    empty.mkdir(exist_ok=True)
    (empty / "notes.txt").write_text("hello")
    args = train_args(CONFIGS["classification"], empty, root / "run_none", None,
                       *task_files(data, "classification"), steps=1)
    line = _refused(args, capsys)
    assert str(empty) in line and "neither a garden.train model_dir" in line
    assert "convert_info.json" in line


def test_no_vocab_and_no_converted_checkpoint_is_a_clear_error(data, root, capsys):
    args = train_args(CONFIGS["classification"], "None", root / "run_novocab", None,
                       *task_files(data, "classification"), steps=1)
    args = [a if not a.startswith("--gin_param=INIT_CHECKPOINT") else
            "--gin_param=INIT_CHECKPOINT=None" for a in args]
    line = _refused(args, capsys)
    assert "no vocabulary" in line and "VOCAB" in line


# --- RoBERTa, ALBERT, ELECTRA from Hugging Face into classification -----------------------------

def _hf_family(root, family):
    """A tiny random Hugging Face model of `family` with its own tokenizer files, and OUT."""
    from convert_testing import (bert_vocab_tokens, randomize_torch_, save_hf_dir,
                                 write_bpe_tokenizer, write_sentencepiece_model)

    folder = root / f"hf_{family}"
    folder.mkdir()
    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64)
    if family == "roberta":
        vocab = write_bpe_tokenizer(str(folder))
        config = transformers.RobertaConfig(vocab_size=vocab, max_position_embeddings=130,
                                            type_vocab_size=1, pad_token_id=1, **sizes)
        model = transformers.RobertaModel(config)
    elif family == "albert":
        vocab = write_sentencepiece_model(str(folder / "spiece.model"))
        config = transformers.AlbertConfig(vocab_size=vocab, embedding_size=16,
                                           max_position_embeddings=128, **sizes)
        model = transformers.AlbertModel(config)
    else:
        tokens = bert_vocab_tokens()
        (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
        config = transformers.ElectraConfig(vocab_size=len(tokens), embedding_size=16,
                                            max_position_embeddings=128, **sizes)
        model = transformers.ElectraModel(config)
    if family != "roberta":
        (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    torch.manual_seed(2)
    model = randomize_torch_(model.eval(), seed=2, scale=0.05)
    save_hf_dir(model, str(folder))
    out, _ = _converted(root, f"hf_{family}", "--source=huggingface", f"--model={family}",
                        f"--input={folder}")
    return dict(dir=str(folder), model=model, out=out)


FAMILIES = ("roberta", "albert", "electra")


@pytest.fixture(scope="module")
def hf_families(root):
    return {family: _hf_family(root, family) for family in FAMILIES}


def _source_ids(family, src, a, b):
    """The source tokenizer's ids of the pair (a, b)."""
    if family == "roberta":
        tok = transformers.RobertaTokenizer.from_pretrained(src["dir"])
        return tok(a, b)["input_ids"]
    if family == "electra":
        tok = transformers.ElectraTokenizer.from_pretrained(src["dir"])
        return tok(a, b)["input_ids"]
    # ALBERT: transformers' AlbertTokenizer needs a protobuf this venv does not pair with
    # sentencepiece; its steps are lower-casing, SentencePiece and [CLS] a [SEP] b [SEP].
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(src["dir"], "spiece.model"))
    cls, sep = sp.piece_to_id("[CLS]"), sp.piece_to_id("[SEP]")
    return [cls] + sp.encode(a.lower()) + [sep] + sp.encode(b.lower()) + [sep]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_tokenizer_and_step0_parity(family, hf_families, data):
    from garden import pretrained
    from garden.serving.text import load_packer
    from garden.tasks.classification import Classification

    src = hf_families[family]
    info = _info(src["out"])
    assert info["tokenizer"]["lower_case"] is (family != "roberta")
    converted, vocab, lower_case, kind, layout = pretrained.text_settings(
        "test", str(src["out"]), None, None)
    packer = load_packer(vocab, 48, kind=kind, lower_case=lower_case, layout=layout)
    pairs = [("the movie was good !", "bad plot ."), ("The film was Great", "dull story")]
    for a, b in pairs:
        ids = packer.encode_numpy([a], [b])
        n = int(ids["padding_mask"].sum())
        assert ids["token_ids"][0, :n].tolist() == _source_ids(family, src, a, b), (a, b)
    task, backbone = step0_backbone(src["out"], Classification,
                                     train_file=str(data / "train.tsv"),
                                     eval_file=str(data / "dev.tsv"))
    if family == "roberta":  # no segments; <pad> = 1, which RoBERTa's positions skip
        rng = np.random.default_rng(6)
        token_ids = rng.integers(4, src["model"].config.vocab_size, (3, 16)).astype("int32")
        mask = np.ones_like(token_ids)
        mask[1, 10:], mask[2, 5:] = 0, 0
        token_ids[mask == 0] = 1
        with torch.no_grad():
            ref = src["model"](input_ids=torch.tensor(token_ids, dtype=torch.long),
                               attention_mask=torch.tensor(mask, dtype=torch.long)
                               ).last_hidden_state.numpy()
        ours = backbone({"token_ids": token_ids, "padding_mask": mask},
                        training=False)["sequence_output"].numpy()
        assert max_abs_diff(ours[mask == 1], ref[mask == 1]) <= TOL
    else:
        _assert_parity(backbone, src["model"])


@pytest.fixture(scope="module")
def family_exports(hf_families, data, root):
    """Classification exports of 3 fine-tuning steps from each family's converted directory;
    ELECTRA's run restores the converted directory's `discriminator` object (what an ELECTRA
    config restores: test_electra_config_restoring_the_discriminator_takes_the_converted_dir),
    the others their `backbone`. Returns (exports, {family: the run's stdout})."""
    import contextlib
    import io

    exports, logs = {}, {}
    for family, src in hf_families.items():
        model_dir = root / f"run_{family}"
        extra = (["--gin_param=garden.Classification.init_checkpoint_object='discriminator'"]
                 if family == "electra" else [])
        args = train_args(CONFIGS["classification"], src["out"], model_dir, root / "exports",
                           *task_files(data, "classification"),
                           f"--gin_param=garden.Classification.model_name='{family}_classification'",
                           *extra)
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            train_in_process(args, str(model_dir), steps=3)
        logs[family] = log.getvalue()
        exports[f"{family}_classification"] = str(root / "exports" /
                                                 f"{family}_classification" / "1")
    return exports, logs


def test_family_exports_answer_in_a_fresh_process(family_exports):
    exports, _ = family_exports
    proc = run_code(_ANSWER, json.dumps(exports))
    answered = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(answered) == sorted(exports) and all(answered.values()), answered


def test_electra_config_restoring_the_discriminator_takes_the_converted_dir(hf_families,
                                                                           family_exports):
    # An ELECTRA config restores `discriminator` (a pretraining model_dir's name,
    # classification_electra_tiny.gin); a converted ELECTRA directory holds the same tower under
    # that name too. (classification_electra_tiny.gin itself also binds electra_tiny's sizes,
    # which a checkpoint of other sizes refuses, as it should.) The run: family_exports' ELECTRA
    # fine-tuning, which binds garden.Classification.init_checkpoint_object='discriminator'.
    out = hf_families["electra"]["out"]
    from garden import pretrained

    assert {"backbone", "discriminator"} <= set(pretrained.checkpoint_objects(
        str(out / "checkpoints" / "ckpt-0")))
    _, logs = family_exports
    restored = [line for line in logs["electra"].splitlines() if "initialised from" in line]
    assert restored and str(out) in restored[-1] and "(its 'discriminator')" in restored[-1], \
        logs["electra"][-2000:]


# --- GPT-2 (Hugging Face) into causal-LM fine-tuning ---------------------------------------------

@pytest.fixture(scope="module")
def hf_gpt2(root):
    from convert_testing import write_hf_gpt2

    folder = root / "hf_gpt2"
    model, _ = write_hf_gpt2(folder, seed=3, n_positions=128)  # no <pad>, <|endoftext|> last
    out, _ = _converted(root, "hf_gpt2", "--source=huggingface", "--model=gpt2",
                        f"--input={folder}")
    rows = [{"source": f"the {a} was", "target": b}
            for a in ("movie", "film", "plot") for b in ("good", "bad", "dull")]
    (root / "lm_train.jsonl").write_text("\n".join(json.dumps(r) for r in rows * 3) + "\n")
    (root / "lm_dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:3]) + "\n")
    return dict(dir=str(folder), model=model, out=out)


def test_gpt2_tokenizer_and_step0_lm_parity(hf_gpt2, root):
    from text import tokenizers

    info = _info(hf_gpt2["out"])
    assert info["tokenizer"]["tokenizer"] == "bpe" and info["tokenizer"]["lower_case"] is False
    ours = tokenizers.load_tokenizer("bpe", str(hf_gpt2["out"] / "vocab.json"), lower_case=False)
    reference = transformers.GPT2Tokenizer.from_pretrained(hf_gpt2["dir"])
    for text in ("The movie was good!", "the plot was dull, the film great."):
        assert ours.tokenize([text])[0] == reference(text)["input_ids"], text
    _assert_step0_lm_parity(hf_gpt2["out"], hf_gpt2, root)


def _assert_step0_lm_parity(out, hf_gpt2, root):
    """The LM CausalLMFinetuning builds from OUT at step 0 gives the source's logits."""
    import gin

    from garden.models import factory
    from garden.tasks.causal_lm_finetuning import CausalLMFinetuning

    gin.clear_config()
    task = CausalLMFinetuning(model=factory.generative_lm, vocab=None,
                              train_file=str(root / "lm_train.jsonl"),
                              eval_file=str(root / "lm_dev.jsonl"),
                              init_checkpoint=str(out), max_prompt_length=16,
                              max_target_length=8)
    task.prepare()
    model, _ = task.build_model()
    ids = np.random.default_rng(7).integers(0, hf_gpt2["model"].config.vocab_size, (2, 12))
    with torch.no_grad():
        ref = hf_gpt2["model"](input_ids=torch.tensor(ids)).logits.numpy()
    out = model({"token_ids": ids.astype("int32"), "padding_mask": np.ones_like(ids, "int32")},
                training=False)
    logits = out["logits"] if isinstance(out, dict) else out
    assert max_abs_diff(np.asarray(logits), ref) <= TOL


_ANSWER_GENERATION = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
names = sorted(serve.structured_input_signature[1])
inputs = {n: tf.constant(["the movie was"]) for n in names
          if serve.structured_input_signature[1][n].dtype == tf.string}
print(json.dumps({k: v.numpy().tolist() if v.dtype != tf.string else
                  [t.decode() for t in v.numpy().reshape(-1)] for k, v in serve(**inputs).items()}))
"""


def _finetune_causal_lm(out, root, name):
    """CausalLMFinetuning from the converted directory OUT, 2 steps through garden.train, exported
    with beams up to 2; the export's answer to a prompt in a fresh process."""
    model_dir = root / f"run_{name}"
    args = [f"--config=configs/finetune/causal_lm_tiny.gin", f"--model_dir={model_dir}",
            f"--gin_param=INIT_CHECKPOINT='{out}'", "--gin_param=TRAIN_STEPS=2",
            f"--gin_param=TRAIN_FILE='{root / 'lm_train.jsonl'}'",
            f"--gin_param=EVAL_FILE='{root / 'lm_dev.jsonl'}'",
            f"--gin_param=garden.CausalLMFinetuning.export_base='{root / name}'",
            "--gin_param=garden.CausalLMFinetuning.max_prompt_length=16",
            "--gin_param=garden.CausalLMFinetuning.max_target_length=8",
            # One beam loop (width 2) in the export instead of three (2, 3, 4): the export
            # still holds beam search as well as greedy and sampling decoding.
            "--gin_param=garden.CausalLMFinetuning.max_beams=2",
            "--gin_param=train.global_batch_size=8", "--gin_param=train.warmup_steps=1"]
    train_in_process(args, str(model_dir), steps=2)
    export = root / name / "gpt2_tiny_causal_lm" / "1"
    proc = run_code(_ANSWER_GENERATION, str(export))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_gpt2_causal_lm_finetunes_exports_and_answers(hf_gpt2, root):
    assert _finetune_causal_lm(hf_gpt2["out"], root, "exports")


def test_openai_gpt2_release_gives_the_same_tokenizer_ids_and_step0_lm(hf_gpt2, root):
    """OpenAI's release layout (models/<size>/model.ckpt + hparams.json + encoder.json +
    vocab.bpe) converted with --source=tf1: the same tokenizer ids as the source's
    GPT2Tokenizer, the same LM at step 0 (CausalLMFinetuning prepared and built from the
    converted directory: logits within 1e-4 of the Hugging Face source). What follows from
    there, fine-tuning, the export and its answer in a fresh process, is the code path of the
    Hugging Face conversion's test above; it is not run a second time (~20 CPU-s)."""
    from convert_testing import openai_gpt2_weights
    from text import tokenizers

    release = root / "openai_124M"
    release.mkdir()
    prefix = write_tf1_checkpoint(
        openai_gpt2_weights(torch_state_dict_to_numpy(hf_gpt2["model"])), str(release / "model.ckpt"))
    config = hf_gpt2["model"].config
    (release / "hparams.json").write_text(json.dumps({
        "n_vocab": config.vocab_size, "n_ctx": config.n_positions, "n_embd": config.n_embd,
        "n_head": config.n_head, "n_layer": config.n_layer}))
    shutil.copy(os.path.join(hf_gpt2["dir"], "vocab.json"), release / "encoder.json")
    shutil.copy(os.path.join(hf_gpt2["dir"], "merges.txt"), release / "vocab.bpe")
    out, _ = _converted(root, "openai_gpt2", "--source=tf1", "--model=gpt2", f"--input={prefix}",
                        f"--config={release / 'hparams.json'}")
    info = _info(out)
    assert info["tokenizer"]["tokenizer"] == "bpe" and info["tokenizer"]["layout"] == "gpt2"
    assert (out / "vocab.json").read_text() == (release / "encoder.json").read_text()
    # The merges came from vocab.bpe: the ids of texts whose pieces need them.
    ours = tokenizers.load_tokenizer("bpe", str(out / "vocab.json"), lower_case=False)
    reference = transformers.GPT2Tokenizer.from_pretrained(hf_gpt2["dir"])
    for text in ("The movie was good!", "the plot was dull, the film great."):
        assert ours.tokenize([text])[0] == reference(text)["input_ids"], text
    _assert_step0_lm_parity(out, hf_gpt2, root)
