"""`python -m garden.analyze` (garden/analyze.py) on a tiny converted Hugging Face BERT and a
classifier fine-tuned from it through garden.train: each analysis writes its JSON, its plots and
index.html; `heads` and `prune` score with the run's own classifier (their baseline is the run's
evaluation accuracy on the same file), `prune` writes the smaller model, `probe` reads CoNLL
files and `wsd` sense-labelled examples; bad models and data are one clear line."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from convert_testing import convert_hf_bert, task_files, train_args  # noqa: E402
from convert_testing import write_task_files  # noqa: E402
from garden import analyze  # noqa: E402
from testing import train_in_process  # noqa: E402

SENTENCES = ["the movie was good , really .", "i liked the plot !", "the film was awful .",
             "we enjoyed the acting and the music .", "it was not dull ?"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze")
    src = convert_hf_bert(root, seed=3)
    out = src["out"]
    (root / "text.txt").write_text("\n".join(SENTENCES) + "\n\n")
    # The classifier fine-tuned from it for 3 steps (in process, the sample classification
    # files under root/data). No float export: nothing here reads one (the int8 test exports
    # from the run's checkpoint); a converted BERT's classification export answering in a fresh
    # process is test_converted_checkpoints.py's test_finetuned_exports_answer_in_a_fresh_process.
    data = write_task_files(root / "data", random.Random(0), ("classification",))
    train_in_process(train_args("configs/finetune/classification_tiny.gin", out,
                                root / "finetune", None, *task_files(data, "classification"),
                                "--gin_param=garden.Classification.max_seq_length=32"),
                     str(root / "finetune"), "classification", 3)
    return {"root": root, "converted": out, "run": root / "finetune",
            "layers": src["model"].config.num_hidden_layers,
            "heads": src["model"].config.num_attention_heads,
            "hidden": src["model"].config.hidden_size}


def _analyze(*args):
    return analyze.main([str(a) for a in args])


def _report(command, tmp_path, *args):
    """`garden.analyze command *args --output=tmp_path` exits 0; its command.json, parsed."""
    assert _analyze(command, *args, f"--output={tmp_path}") == 0
    return json.loads((tmp_path / f"{command}.json").read_text())


def test_attention_writes_statistics_plots_and_index(setup, tmp_path):
    result = _report("attention", tmp_path, f"--model={setup['converted']}",
                     f"--input={setup['root'] / 'text.txt'}", "--sentence=1")
    shares = result["shares"]["shares"]
    assert len(shares["cls"]) == setup["layers"] and len(shares["cls"][0]) == setup["heads"]
    assert result["sentence"] == SENTENCES[1]
    for name in ("attention_shares.png", "attention_js.png", "attention_maps.png"):
        assert (tmp_path / name).stat().st_size > 1000, name
    assert 'src="attention_maps.png"' in (tmp_path / "index.html").read_text()


def test_identifiability_on_the_converted_checkpoint(setup, tmp_path):
    result = _report("identifiability", tmp_path, f"--model={setup['converted']}",
                     f"--input={setup['root'] / 'text.txt'}", "--attribution_sentences=1")
    accuracy = result["token_identifiability"]["accuracy"]
    assert len(accuracy["linear"]) == setup["layers"] + 1
    assert len(result["hidden_token_attribution"]) == 1
    assert (tmp_path / "identifiability.png").exists()


def test_heads_scores_with_the_runs_classifier(setup, tmp_path):
    result = _report("heads", tmp_path, f"--model={setup['run']}",
                     f"--task_data={setup['root'] / 'data' / 'dev.tsv'}", "--max_seq_length=32")
    summary = json.loads((setup["run"] / "summary.json").read_text())
    assert result["baseline"] == pytest.approx(summary["eval_accuracy"], abs=1e-6)
    assert len(result["heads"]["zero"]) == setup["layers"]
    assert len(result["heads"]["uniform"][0]) == setup["heads"]
    assert (tmp_path / "heads.png").exists()


@pytest.mark.parametrize("case", ["not_a_model", "heads_without_classifier", "bad_task_row",
                                  "prune_without_classifier", "bad_senses_row",
                                  "pruned_output_holds_a_model"])
def test_bad_input_is_one_line(setup, tmp_path, capsys, case):
    bad = tmp_path / "bad.tsv"
    bad.write_text("text_a\tlabel\nthe movie\tpos\textra\n")
    senses = tmp_path / "senses.jsonl"
    senses.write_text('{"text": "a bank", "word_index": 1, "lemma": "bank", "sense": "s"}\n'
                      '{"text": "a bank", "word_index": 2, "lemma": "bank", "sense": "s"}\n')
    args = {"not_a_model": ["attention", f"--model={tmp_path}",
                            f"--input={setup['root'] / 'text.txt'}"],
            "heads_without_classifier": ["heads", f"--model={setup['converted']}",
                                         f"--task_data={setup['root'] / 'data' / 'dev.tsv'}"],
            "bad_task_row": ["heads", f"--model={setup['run']}", f"--task_data={bad}",
                             "--max_seq_length=32"],
            "prune_without_classifier": ["prune", f"--model={setup['converted']}",
                                         f"--task_data={setup['root'] / 'data' / 'dev.tsv'}"],
            "bad_senses_row": ["wsd", f"--model={setup['converted']}", f"--senses={senses}"],
            "pruned_output_holds_a_model": [  # refused before any pruning
                "prune", f"--model={setup['run']}", f"--pruned_output={setup['converted']}",
                f"--task_data={setup['root'] / 'data' / 'dev.tsv'}"]}[case]
    assert _analyze(*args, f"--output={tmp_path / 'out'}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert {"not_a_model": str(tmp_path), "heads_without_classifier": "fine-tuned",
            "bad_task_row": "bad.tsv:2", "prune_without_classifier": "prune needs a fine-tuned",
            "bad_senses_row": "senses.jsonl:2: word_index 2",
            "pruned_output_holds_a_model": f"--pruned_output={setup['converted']} "}[case] \
        in err[0]
    assert not (tmp_path / "out").exists()


def test_contextuality_of_two_models_on_one_plot(setup, tmp_path):
    result = _report("contextuality", tmp_path, f"--model={setup['converted']}",
                     f"--model={setup['run']}", f"--input={setup['root'] / 'text.txt'}",
                     "--min_contexts=3", "--max_seq_length=32")
    assert set(result["models"]) == {str(setup["converted"]), str(setup["run"])}
    for values in result["models"].values():
        assert len(values["self_similarity"]) == setup["layers"] + 1
    assert len(result["plots"]) == 3 and (tmp_path / "contextuality_self_similarity.png").exists()
    assert 'contextuality_self_similarity.png' in (tmp_path / "index.html").read_text()


def test_prune_curve_starts_at_the_runs_accuracy_and_writes_the_smaller_model(setup, tmp_path):
    """--prune_threshold=0 prunes one head (10% of 8, at least 1) per step until each layer
    keeps one; the pruned directory is the run's backbone without those heads: fewer
    attention weights, and its outputs equal the run's with the head mask."""
    from garden.models import instrument

    pruned = tmp_path / "pruned"
    assert _analyze("prune", f"--model={setup['run']}", f"--output={tmp_path / 'report'}",
                    f"--task_data={setup['root'] / 'data' / 'dev.tsv'}", "--max_seq_length=32",
                    "--prune_threshold=0", f"--pruned_output={pruned}") == 0
    result = json.loads((tmp_path / "report" / "prune.json").read_text())
    summary = json.loads((setup["run"] / "summary.json").read_text())
    layers, heads = setup["layers"], setup["heads"]
    assert result["curve"][0]["share_pruned"] == 0
    assert result["curve"][0]["metric"] == pytest.approx(summary["eval_accuracy"], abs=1e-6)
    assert result["baseline"] == result["curve"][0]["metric"] and result["threshold"] == 0
    steps = layers * heads - layers  # 2 x 4 heads down to 1 per layer: 6 steps of 1 head
    assert [p["heads_pruned"] for p in result["curve"]] == list(range(steps + 1))
    assert result["stopped"] == "min_heads_per_layer"
    assert np.shape(result["importance"]) == (steps, layers, heads)
    assert np.sum(result["head_mask"], axis=1).tolist() == [1] * layers
    assert (tmp_path / "report" / "prune.png").stat().st_size > 1000
    assert 'src="prune.png"' in (tmp_path / "report" / "index.html").read_text()

    info = json.loads((pruned / "convert_info.json").read_text())
    assert info["architecture"]["config"]["num_heads_per_layer"] == [1] * layers
    hidden = setup["hidden"]
    width = hidden // heads  # each removed head: q/k/v kernel columns + biases, output rows
    assert result["pruned_output"]["unpruned_parameters"] - info["parameters"] == \
        steps * (4 * hidden * width + 3 * width)
    assert info["pruning"]["head_mask"] == result["head_mask"]
    run = analyze.open_model(str(setup["run"]), 32)
    batch = run.packer.encode_numpy(SENTENCES)
    masked = instrument.run(instrument.instrumented(run.backbone, use_head_mask=True), batch,
                            np.asarray(result["head_mask"]))
    smaller = instrument.run(analyze.open_model(str(pruned), 32).backbone, batch)
    np.testing.assert_allclose(smaller["sequence_output"], masked["sequence_output"],
                               atol=1e-5)


def test_probe_reads_conll_files(setup, tmp_path):
    """Tags O and I-LOC (paris, london: 1 word of 4): a probe of the embeddings reads them all,
    the majority baseline is O at 0.75, one accuracy per layer."""
    import random

    from convert_testing import conll_text

    rng = random.Random(1)
    (tmp_path / "train.txt").write_text(conll_text(rng, 30))
    (tmp_path / "dev.txt").write_text(conll_text(rng, 10))
    assert _analyze("probe", f"--model={setup['converted']}", f"--output={tmp_path / 'r'}",
                    f"--probe_train={tmp_path / 'train.txt'}",
                    f"--probe_dev={tmp_path / 'dev.txt'}") == 0
    result = json.loads((tmp_path / "r" / "probe.json").read_text())
    assert result["train_words"] == 30 * 4 and result["dev_words"] == 10 * 4
    assert len(result["accuracy"]) == len(result["macro_f1"]) == setup["layers"] + 1
    assert all(0 <= a <= 1 for a in result["accuracy"])
    # all O: F1 of O = 2 * 0.75 * 1 / 1.75, of I-LOC 0; macro-F1 their mean
    assert result["majority"] == {"label": "O", "accuracy": 0.75,
                                  "macro_f1": pytest.approx(0.75 / 1.75)}
    assert result["accuracy"][0] == 1.0
    assert (tmp_path / "r" / "probe.png").stat().st_size > 1000


def test_wsd_on_the_sample_and_on_a_senses_file(setup, tmp_path):
    """Without --senses: the seeded sample (5 lemmas x 2 senses x 20; 6 of each sense to
    test, the most frequent sense a tie: 0.5); with it, the file's examples."""
    from garden.bertology import wsd

    assert _analyze("wsd", f"--model={setup['converted']}", f"--output={tmp_path / 'a'}") == 0
    result = json.loads((tmp_path / "a" / "wsd.json").read_text())
    assert len(result["accuracy"]) == setup["layers"] + 1
    assert all(0 <= a <= 1 for a in result["accuracy"])
    assert result["test"] == 5 * 2 * 6 and result["train"] == 5 * 2 * 14
    assert result["mfs_accuracy"] == 0.5 and set(result["lemmas"]) == set(wsd.SAMPLE_SENSES)
    assert "sample_senses" in result["senses"]
    assert (tmp_path / "a" / "wsd.png").stat().st_size > 1000
    path = wsd.write_senses(wsd.sample_senses(per_sense=4, lemmas=["bank"], seed=5),
                            str(tmp_path / "senses.jsonl"))
    assert _analyze("wsd", f"--model={setup['converted']}", f"--output={tmp_path / 'b'}",
                    f"--senses={path}") == 0
    result = json.loads((tmp_path / "b" / "wsd.json").read_text())
    assert (result["train"], result["test"]) == (6, 2) and list(result["lemmas"]) == ["bank"]
    assert result["senses"] == path and len(result["accuracy"]) == setup["layers"] + 1


def test_int8_cli_quantizes_the_fine_tuned_run(setup, tmp_path, capsys):
    """python -m garden.bertology.int8 --model_dir=RUN: the int8 export of the run's own task
    answers raw text with its labels, and the .tflite is written; a directory that is no run
    is one clear line."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the tokenizer ops of the export

    from garden.bertology import int8

    # --no-evaluate: the scores of the float model and the export are test_int8.py's
    # test_quantize_run_scores_float_and_int8_on_the_runs_eval_file; without them no report.
    assert int8.main([f"--model_dir={setup['run']}", f"--export_base={tmp_path}",
                      "--no-evaluate"]) == 0
    assert not list(tmp_path.glob("*.json")), list(tmp_path.rglob("*"))
    exports = list((tmp_path).glob("*_int8/*/saved_model.pb"))
    assert len(exports) == 1, list(tmp_path.rglob("*"))
    answer = tf.saved_model.load(str(exports[0].parent)).signatures["serving_default"](
        text_a=tf.constant(["the movie was good .", "the plot was awful ."]))
    labels = {t.decode() for v in answer.values() if v.dtype == tf.string
              for t in v.numpy().reshape(-1)}
    assert labels and labels <= {"pos", "neg"}, labels
    assert list(tmp_path.glob("*_int8-*.tflite"))
    capsys.readouterr()
    assert int8.main([f"--model_dir={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "none" in err[0], err
