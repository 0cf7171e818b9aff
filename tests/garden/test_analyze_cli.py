"""`python -m garden.analyze` (garden/analyze.py) on a tiny converted Hugging Face BERT and a
classifier fine-tuned from it through garden.train: each analysis writes its JSON, its plots and
index.html; `heads` scores with the run's own classifier (its baseline is the run's evaluation
accuracy on the same file); bad models and data are one clear line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from convert_testing import convert_hf_bert, finetune_classification_from  # noqa: E402
from garden import analyze  # noqa: E402

SENTENCES = ["the movie was good , really .", "i liked the plot !", "the film was awful .",
             "we enjoyed the acting and the music .", "it was not dull ?"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyze")
    src = convert_hf_bert(root, seed=3)
    out = src["out"]
    (root / "text.txt").write_text("\n".join(SENTENCES) + "\n\n")
    finetune_classification_from(out, root, "--gin_param=garden.SentenceClassification."
                                            "max_seq_length=32")
    return {"root": root, "converted": out, "run": root / "finetune",
            "layers": src["model"].config.num_hidden_layers,
            "heads": src["model"].config.num_attention_heads}


def _analyze(*args):
    return analyze.main([str(a) for a in args])


def test_attention_writes_statistics_plots_and_index(setup, tmp_path):
    assert _analyze("attention", f"--model={setup['converted']}",
                    f"--input={setup['root'] / 'text.txt'}", f"--output={tmp_path}",
                    "--sentence=1") == 0
    result = json.loads((tmp_path / "attention.json").read_text())
    shares = result["shares"]["shares"]
    assert len(shares["cls"]) == setup["layers"] and len(shares["cls"][0]) == setup["heads"]
    assert result["sentence"] == SENTENCES[1]
    for name in ("attention_shares.png", "attention_js.png", "attention_maps.png"):
        assert (tmp_path / name).stat().st_size > 1000, name
    assert 'src="attention_maps.png"' in (tmp_path / "index.html").read_text()


def test_identifiability_on_the_converted_checkpoint(setup, tmp_path):
    assert _analyze("identifiability", f"--model={setup['converted']}",
                    f"--input={setup['root'] / 'text.txt'}", f"--output={tmp_path}",
                    "--attribution_sentences=1") == 0
    result = json.loads((tmp_path / "identifiability.json").read_text())
    accuracy = result["token_identifiability"]["accuracy"]
    assert len(accuracy["linear"]) == setup["layers"] + 1
    assert len(result["hidden_token_attribution"]) == 1
    assert (tmp_path / "identifiability.png").exists()


def test_heads_scores_with_the_runs_classifier(setup, tmp_path):
    assert _analyze("heads", f"--model={setup['run']}",
                    f"--task_data={setup['root'] / 'data' / 'dev.tsv'}",
                    f"--output={tmp_path}", "--max_seq_length=32") == 0
    result = json.loads((tmp_path / "heads.json").read_text())
    summary = json.loads((setup["run"] / "summary.json").read_text())
    assert result["baseline"] == pytest.approx(summary["eval_accuracy"], abs=1e-6)
    assert len(result["heads"]["zero"]) == setup["layers"]
    assert len(result["heads"]["uniform"][0]) == setup["heads"]
    assert (tmp_path / "heads.png").exists()


@pytest.mark.parametrize("case", ["not_a_model", "heads_without_classifier", "bad_task_row"])
def test_bad_input_is_one_line(setup, tmp_path, capsys, case):
    bad = tmp_path / "bad.tsv"
    bad.write_text("text_a\tlabel\nthe movie\tpos\textra\n")
    args = {"not_a_model": ["attention", f"--model={tmp_path}",
                            f"--input={setup['root'] / 'text.txt'}"],
            "heads_without_classifier": ["heads", f"--model={setup['converted']}",
                                         f"--task_data={setup['root'] / 'data' / 'dev.tsv'}"],
            "bad_task_row": ["heads", f"--model={setup['run']}", f"--task_data={bad}",
                             "--max_seq_length=32"]}[case]
    assert _analyze(*args, f"--output={tmp_path / 'out'}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert {"not_a_model": str(tmp_path), "heads_without_classifier": "fine-tuned",
            "bad_task_row": "bad.tsv:2"}[case] in err[0]


def test_contextuality_of_two_models_on_one_plot(setup, tmp_path):
    assert _analyze("contextuality", f"--model={setup['converted']}", f"--model={setup['run']}",
                    f"--input={setup['root'] / 'text.txt'}", f"--output={tmp_path}",
                    "--min_contexts=3", "--max_seq_length=32") == 0
    result = json.loads((tmp_path / "contextuality.json").read_text())
    assert set(result["models"]) == {str(setup["converted"]), str(setup["run"])}
    for values in result["models"].values():
        assert len(values["self_similarity"]) == setup["layers"] + 1
    assert len(result["plots"]) == 3 and (tmp_path / "contextuality_self_similarity.png").exists()
    assert 'contextuality_self_similarity.png' in (tmp_path / "index.html").read_text()


def test_int8_cli_quantizes_the_fine_tuned_run(setup, tmp_path, capsys):
    """python -m garden.bertology.int8 --model_dir=RUN: the int8 export of the run's own task
    answers raw text with its labels, and the .tflite is written; a directory that is no run
    is one clear line."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the tokenizer ops of the export

    from garden.bertology import int8

    assert int8.main([f"--model_dir={setup['run']}", f"--export_base={tmp_path}"]) == 0
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
