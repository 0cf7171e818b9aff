"""More converted checkpoints as starting points (garden/pretrained.py): DistilBERT (Hugging
Face) into sentence classification, a converted directory as garden.extract_features' model,
and GPT-2 (Hugging Face) into last-token classification.

Each tiny random source model is written in Hugging Face's layout with its own tokenizer files,
converted by garden.convert (in-process main()), checked at step 0 against the source model
within 1e-4 (and the copied tokenizer against the source tokenizer), fine-tuned a few steps by
garden.train (DistilBERT through a fresh `python -m garden.train`), exported, and the exports
answered in a fresh process.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (bert_vocab_tokens, max_abs_diff, random_bert_inputs,  # noqa: E402
                             randomize_torch_, save_hf_dir, task_files, train_args,
                             write_task_files)
from testing import run_code, run_tool, train_in_process  # noqa: E402

TOL = 1e-4
PAIRS = [("the movie was GOOD, really!", "I liked the plot."),
         ("très bien: the acting wasn't dull", "it was fun ?"),
         ("unknownword film", "bad")]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("byoc_more")


@pytest.fixture(scope="module")
def data(root):
    return write_task_files(root / "data", random.Random(0), ("classification",))


def _convert(family, folder, out):
    from garden import convert

    assert convert.main(["--source=huggingface", f"--model={family}", f"--input={folder}",
                         f"--output={out}"]) == 0
    return out


@pytest.fixture(scope="module")
def hf_distilbert(root):
    """A tiny random Hugging Face DistilBertModel with vocab.txt (uncased), and OUT."""
    folder = root / "hf_distilbert"
    folder.mkdir()
    tokens = bert_vocab_tokens()
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "tokenizer_class": "DistilBertTokenizer"}))
    config = transformers.DistilBertConfig(vocab_size=len(tokens), dim=32, n_layers=2, n_heads=4,
                                           hidden_dim=64, max_position_embeddings=128)
    torch.manual_seed(4)
    model = randomize_torch_(transformers.DistilBertModel(config).eval(), seed=4, scale=0.05)
    save_hf_dir(model, str(folder))
    return dict(dir=str(folder), model=model,
                out=_convert("distilbert", folder, root / "out_distilbert"))


# --- DistilBERT (Hugging Face) into sentence classification ------------------------------------

def test_distilbert_tokenizer_and_step0_parity(hf_distilbert, data):
    import gin

    from garden import pretrained
    from garden.models import factory
    from garden.serving.text import load_packer
    from garden.tasks.classification import Classification

    info = json.loads((hf_distilbert["out"] / "convert_info.json").read_text())
    assert info["tokenizer"]["tokenizer"] == "wordpiece" and info["tokenizer"]["lower_case"]
    _, vocab, lower_case, kind, layout = pretrained.text_settings(
        "test", str(hf_distilbert["out"]), None, None)
    packer = load_packer(vocab, 32, kind=kind, lower_case=lower_case, layout=layout)
    reference = transformers.DistilBertTokenizer.from_pretrained(hf_distilbert["dir"])
    a, b = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    ours = packer.encode_numpy(a, b)
    theirs = reference(a, b, max_length=32, padding="max_length", truncation=True)
    np.testing.assert_array_equal(ours["token_ids"], np.array(theirs["input_ids"]))
    np.testing.assert_array_equal(ours["padding_mask"], np.array(theirs["attention_mask"]))
    assert (ours["token_ids"] == 100).any()  # the unknown word maps to [UNK] = 100

    gin.clear_config()
    task = Classification(backbone=factory.backbone, vocab=None,
                          init_checkpoint=str(hf_distilbert["out"]),
                          train_file=str(data / "train.tsv"),
                          eval_file=str(data / "dev.tsv"))
    task.prepare()
    model, objects = task.build_model()
    backbone = objects["backbone"]
    assert type(backbone).__name__ == "DistilBertBackbone"
    inputs, _ = random_bert_inputs(3, 16, hf_distilbert["model"].config.vocab_size, seed=5)
    inputs.pop("segment_ids")  # DistilBERT has no token types
    with torch.no_grad():
        ref = hf_distilbert["model"](
            input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long)
        ).last_hidden_state.numpy()
    ours = backbone(inputs, training=False)["sequence_output"].numpy()
    real = inputs["padding_mask"].astype(bool)
    assert max_abs_diff(ours[real], ref[real]) <= TOL
    # The classifier's head is DistilBertForSequenceClassification's: [CLS] state ->
    # pre_classifier Dense(H) + ReLU -> dropout -> classifier.
    assert model.pre_classifier is not None and model.pre_classifier.units == 32
    logits = model(inputs, training=False)["logits"].numpy()
    state = np.maximum(ours[:, 0] @ model.pre_classifier.kernel.numpy()
                       + model.pre_classifier.bias.numpy(), 0.0)
    expected = state @ model.classifier_dense.kernel.numpy() + model.classifier_dense.bias.numpy()
    assert max_abs_diff(logits, expected) <= 1e-5
    # The "bert" layout's segment_ids, which the task and the export pass along, are dropped,
    # not paired with the inputs by position.
    segments = np.ones_like(inputs["token_ids"])
    with_segments = model({**inputs, "segment_ids": segments}, training=False)["logits"]
    assert max_abs_diff(with_segments, logits) == 0.0


_ANSWER = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 - registers the tokenizer ops the exports use
out = {}
for name, path in json.loads(sys.argv[1]).items():
    serve = tf.saved_model.load(path).signatures["serving_default"]
    r = serve(text_a=tf.constant(["the movie was great .", "the plot was dull ."]))
    out[name] = {k: v.numpy().tolist() if v.dtype != tf.string else
                 [t.decode() for t in v.numpy().reshape(-1)] for k, v in r.items()}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def exports(hf_distilbert, data, root):
    """Exports of a few fine-tuning steps: DistilBERT into classification through a fresh
    `python -m garden.train`."""
    out = {}
    log = run_tool("garden.train", *train_args(
        "configs/finetune/classification_tiny.gin", hf_distilbert["out"], root / "run_distilbert",
        root / "exports", *task_files(data, "classification"),
        "--gin_param=garden.Classification.model_name='distilbert_classification'"),
        timeout=600).stdout
    assert "DistilBertBackbone from converted huggingface distilbert checkpoint" in log
    out["distilbert_classification"] = str(root / "exports" / "distilbert_classification" / "1")
    return out


def test_exports_answer_in_a_fresh_process(exports):
    proc = run_code(_ANSWER, json.dumps(exports))
    answered = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(answered) == sorted(exports) and all(answered.values()), answered


# --- a converted directory as garden.extract_features' model ------------------------------------

def test_extract_features_of_a_converted_directory_are_the_sources_hidden_states(
        hf_distilbert, root, capsys):
    from garden import extract_features

    text = root / "features.txt"
    text.write_text("the movie was GOOD, really! ||| i liked the plot .\n"
                    "unknownword film ||| bad\n")
    jsonl, npz = root / "features.jsonl", root / "features.npz"
    # No --config, --vocab or casing: the architecture, tokenizer and casing are OUT's.
    assert extract_features.main([f"--init_checkpoint={hf_distilbert['out']}",
                                  f"--input={text}", f"--output={jsonl}", f"--numpy={npz}",
                                  "--layers=-1,-2,0", "--max_seq_length=24"]) == 0
    arrays = np.load(npz)
    ids, mask = arrays["token_ids"], arrays["padding_mask"]
    with torch.no_grad():
        ref = hf_distilbert["model"](input_ids=torch.tensor(ids, dtype=torch.long),
                                     attention_mask=torch.tensor(mask, dtype=torch.long),
                                     output_hidden_states=True).hidden_states
    real = mask.astype(bool)
    for index in (-1, -2, 0):
        diff = max_abs_diff(arrays[f"layer_{index}"][real], ref[index].numpy()[real])
        assert diff <= TOL, (index, diff)
    # The packed ids are the source tokenizer's; the JSON lines name its tokens.
    reference = transformers.DistilBertTokenizer.from_pretrained(hf_distilbert["dir"])
    expected = reference(["the movie was GOOD, really!", "unknownword film"],
                         ["i liked the plot .", "bad"])["input_ids"]
    assert [row[m.astype(bool)].tolist() for row, m in zip(ids, mask)] == expected
    first = json.loads(jsonl.read_text().splitlines()[0])
    assert first["features"][0]["token"] == "[CLS]"
    assert len(first["features"][0]["layers"][0]["values"]) == 32


def test_extract_features_of_a_run_finetuned_from_a_converted_directory(exports, root):
    text = root / "features_run.txt"
    text.write_text("the movie was good .\n")
    npz = root / "features_run.npz"
    run_tool("garden.extract_features", f"--model_dir={root / 'run_distilbert'}",
             f"--input={text}", f"--output={root / 'features_run.jsonl'}", f"--numpy={npz}",
             "--layers=-1", "--max_seq_length=16", timeout=300)
    assert np.load(npz)["layer_-1"].shape[-1] == 32  # the converted DistilBERT's width


# --- GPT-2 (Hugging Face) into last-token classification ---------------------------------------

@pytest.fixture(scope="module")
def hf_gpt2(root):
    """A tiny random Hugging Face GPT-2 with OpenAI's kind of vocabulary (no <s> </s> <pad>,
    <|endoftext|> last), and OUT."""
    from convert_testing import write_hf_gpt2

    folder = root / "hf_gpt2"
    model, vocab = write_hf_gpt2(folder, seed=6, n_positions=64)
    return dict(dir=str(folder), model=model, eos=vocab - 1,
                out=_convert("gpt2", folder, root / "out_gpt2"))


def _gpt2_task(hf_gpt2, data):
    import gin

    from garden.models import factory
    from garden.tasks.last_token_classification import LastTokenClassification

    gin.clear_config()
    task = LastTokenClassification(backbone=factory.backbone, vocab=None,
                                   init_checkpoint=str(hf_gpt2["out"]), max_seq_length=48,
                                   train_file=str(data / "train.tsv"),
                                   eval_file=str(data / "dev.tsv"))
    task.prepare()
    return task


def test_gpt2_layout_ids_and_step0_last_token_parity(hf_gpt2, data):
    info = json.loads((hf_gpt2["out"] / "convert_info.json").read_text())
    assert info["tokenizer"]["layout"] == "gpt2" and info["tokenizer"]["lower_case"] is False
    task = _gpt2_task(hf_gpt2, data)
    packer = task.packer
    assert packer.layout == "gpt2" and packer.input_names == ("token_ids", "padding_mask")
    eos = hf_gpt2["eos"]
    assert (packer.pad_id, packer.sep_id) == (eos, eos)
    # A (<|endoftext|> B) with the source tokenizer's ids, right-padded with <|endoftext|>.
    reference = transformers.GPT2Tokenizer.from_pretrained(hf_gpt2["dir"])
    a, b = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
    pairs, singles = packer.encode_numpy(a, b), packer.encode_numpy(a)
    for i in range(len(PAIRS)):
        want = reference(a[i])["input_ids"] + [eos] + reference(b[i])["input_ids"]
        n = int(pairs["padding_mask"][i].sum())
        assert pairs["token_ids"][i, :n].tolist() == want
        assert (pairs["token_ids"][i, n:] == eos).all()
        n = int(singles["padding_mask"][i].sum())
        assert singles["token_ids"][i, :n].tolist() == reference(a[i])["input_ids"]
    # A pair longer than max_seq_length is trimmed to it.
    long = packer.encode_numpy(["the movie was good " * 10], ["the plot was bad " * 10])
    assert long["padding_mask"].sum() == 48

    model, objects = task.build_model()
    assert type(objects["backbone"]).__name__ == "GPT2Backbone"
    inputs = {k: pairs[k] for k in ("token_ids", "padding_mask")}
    with torch.no_grad():
        ref = hf_gpt2["model"].transformer(
            input_ids=torch.tensor(inputs["token_ids"], dtype=torch.long),
            attention_mask=torch.tensor(inputs["padding_mask"], dtype=torch.long)
        ).last_hidden_state.numpy()
    out = model(inputs, training=False)
    ours = out["sequence_output"].numpy()
    last = inputs["padding_mask"].sum(1) - 1
    rows = np.arange(len(last))
    # The classified state: the last real token's (HF: the last non-pad token's, pad = eos).
    assert max_abs_diff(ours[rows, last], ref[rows, last]) <= TOL
    real = inputs["padding_mask"].astype(bool)
    assert max_abs_diff(ours[real], ref[real]) <= TOL
    expected = ours[rows, last] @ model.classifier_dense.kernel.numpy() + \
        model.classifier_dense.bias.numpy()
    assert max_abs_diff(out["logits"], expected) <= 1e-5


def test_gpt2_last_token_classification_finetunes_and_the_export_answers(hf_gpt2, data, root):
    model_dir = root / "run_gpt2"
    summary = train_in_process(train_args(
        "configs/finetune/last_token_classification_gpt_tiny.gin", hf_gpt2["out"], model_dir,
        root / "exports", *task_files(data, "classification"),
        "--gin_param=garden.LastTokenClassification.max_seq_length=48",
        "--gin_param=garden.LastTokenClassification.model_name='gpt2_classification'"),
        str(model_dir), steps=3)
    assert summary["task"] == "last_token_classification"
    export = str(root / "exports" / "gpt2_classification" / "1")
    proc = run_code(_ANSWER, json.dumps({"gpt2": export}))
    answered = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answered["gpt2"], answered
