"""garden.convert reads checkpoints as users hold them (issue 35 item 2): a Hugging Face model id
in the hub cache, and a keras-hub preset directory.

The hub cache is built here the way huggingface_hub leaves it (models--{org}--{name}/ with
blobs/ named by content hash, snapshots/<commit>/ of symlinks into them, refs/main holding the
commit), from tiny random transformers BertModels; the keras-hub preset from a tiny random
keras_hub.models.BertBackbone and its tokenizer by save_to_preset. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import keras  # noqa: E402

from convert_testing import (  # noqa: E402
    max_abs_diff, random_bert_inputs, torch_forward, write_bpe_tokenizer, write_hf_bert)
from garden import convert  # noqa: E402
from garden.models.bert import BertBackbone  # noqa: E402 - registered for load_model
from garden.models.gpt2 import GPT2Backbone, GPT2CausalLM  # noqa: E402
from text.tokenizers import load_tokenizer  # noqa: E402
from testing import run_tool  # noqa: E402

MODEL_ID = "test-org/tiny-bert"
MAIN, OLD = "a" * 40, "b" * 40  # the commits: refs/main -> MAIN; OLD is reachable by hash only
TOL = 1e-4


def _cache_snapshot(repo: str, commit: str, files_dir: str) -> None:
    """Puts `files_dir`'s files into the cache as the hub does: each file's bytes once in
    blobs/<sha256>, snapshots/<commit>/<name> a relative symlink to it."""
    snapshot = os.path.join(repo, "snapshots", commit)
    os.makedirs(snapshot)
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    for name in os.listdir(files_dir):
        with open(os.path.join(files_dir, name), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        blob = os.path.join(repo, "blobs", digest)
        if not os.path.exists(blob):
            shutil.copyfile(os.path.join(files_dir, name), blob)
        os.symlink(os.path.join("..", "..", "blobs", digest), os.path.join(snapshot, name))


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A hub cache at <root>/hub holding MODEL_ID at two commits (different random weights),
    and each commit's transformers outputs on the same ids."""
    root = tmp_path_factory.mktemp("hf_home")
    repo = os.path.join(root, "hub", "models--test-org--tiny-bert")
    inputs, _ = random_bert_inputs(2, 12, 120, seed=3)
    expected = {}
    for commit, seed in ((MAIN, 0), (OLD, 1)):
        src = write_hf_bert(str(root / f"staging_{seed}"), seed=seed, hidden=16, layers=2, heads=2)
        _cache_snapshot(repo, commit, src["dir"])
        out = torch_forward(src["model"], inputs)
        expected[commit] = {"sequence_output": out.last_hidden_state.numpy(),
                            "pooled_output": out.pooler_output.numpy()}
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(MAIN)  # as the hub writes it: the hash, no newline
    return dict(root=root, cache=str(root / "hub"), inputs=inputs, expected=expected)


def _assert_outputs(out_dir, hub, commit):
    backbone = keras.models.load_model(out_dir / "backbone.keras")
    assert isinstance(backbone, BertBackbone)
    got = backbone(hub["inputs"], training=False)
    real = hub["inputs"]["padding_mask"].astype(bool)
    assert max_abs_diff(got["sequence_output"].numpy()[real],
                        hub["expected"][commit]["sequence_output"][real]) <= TOL
    assert max_abs_diff(got["pooled_output"], hub["expected"][commit]["pooled_output"]) <= TOL
    # the other commit's weights would not pass: the check tells the two apart
    other = OLD if commit == MAIN else MAIN
    assert max_abs_diff(got["pooled_output"], hub["expected"][other]["pooled_output"]) > 10 * TOL


def test_a_model_id_converts_from_the_cache_dir_on_the_command_line(hub, tmp_path):
    out = tmp_path / "out"
    proc = run_tool("garden.convert", "--source=huggingface", "--model=bert",
                    f"--input={MODEL_ID}", f"--cache_dir={hub['cache']}", f"--output={out}")
    assert f"{MODEL_ID} (revision main, commit {MAIN}" in proc.stdout
    _assert_outputs(out, hub, MAIN)
    info = json.loads((out / "convert_info.json").read_text())
    assert info["hub"] == {"model_id": MODEL_ID, "revision": "main", "commit": MAIN}
    assert info["tokenizer"]["vocab"] == "vocab.txt" and info["tokenizer"]["lower_case"] is True
    assert (out / "vocab.txt").read_text() == (
        open(os.path.join(hub["cache"], "models--test-org--tiny-bert", "snapshots", MAIN,
                          "vocab.txt")).read())


def test_hf_home_locates_the_cache_and_revision_takes_a_commit_hash(hub, tmp_path, monkeypatch):
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(hub["root"]))  # the cache is $HF_HOME/hub
    out = tmp_path / "out"
    assert convert.main(["--source=huggingface", "--model=bert", f"--input={MODEL_ID}",
                         f"--revision={OLD}", f"--output={out}"]) == 0
    _assert_outputs(out, hub, OLD)
    assert json.loads((out / "convert_info.json").read_text())["hub"]["commit"] == OLD


def test_a_model_the_cache_lacks_is_one_error_and_nothing_is_written(hub, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--source=huggingface", "--model=bert", f"--cache_dir={hub['cache']}",
            f"--output={out}"]
    assert convert.main([*args, "--input=test-org/absent-bert"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("error: --input=test-org/absent-bert is not a directory")
    assert f"{hub['cache']} holds no models--test-org--absent-bert" in err
    assert "hf download test-org/absent-bert" in err
    # a revision the cached model lacks names what the cache holds
    assert convert.main([*args, f"--input={MODEL_ID}", "--revision=v2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no config.json at revision 'v2'" in err and f"{MAIN}, {OLD}, main" in err, err
    assert "hf download test-org/tiny-bert --revision v2" in err
    assert not out.exists()
    # --revision with a directory is refused, not ignored
    snapshot = os.path.join(hub["cache"], "models--test-org--tiny-bert", "snapshots", MAIN)
    assert convert.main(["--source=huggingface", "--model=bert", f"--input={snapshot}",
                         "--revision=main", f"--output={out}"]) == 2
    assert "--revision apply to a Hugging Face model id" in capsys.readouterr().err
    assert not out.exists()


# --- keras-hub presets --------------------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
TEXT = "w1 W2 w30 w7"  # W2: [UNK] to a cased tokenizer, w2 to one that lower-cases


def _randomize(backbone, seed: int) -> None:
    """Every weight random, biases and LayerNorm offsets too (keras-hub starts them at 0 and
    1), so that any wrongly mapped array moves the outputs. At this 0.02 scale keras-hub's
    BERT tanh GELU and the garden's exact one agree to ~1e-8."""
    rng = np.random.default_rng(seed)
    backbone.set_weights([
        (1.0 if "gamma" in w.path else 0.0) + rng.normal(0, 0.02, w.shape).astype("float32")
        for w in backbone.weights])


@pytest.fixture(scope="module")
def keras_hub_preset(tmp_path_factory):
    """A tiny random keras_hub BertBackbone + a cased BertTokenizer saved by save_to_preset,
    keras-hub's outputs on ids and its ids of TEXT."""
    keras_hub = pytest.importorskip("keras_hub")
    preset = str(tmp_path_factory.mktemp("keras_hub") / "bert_preset")
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(VOCAB), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=24, num_segments=2)
    _randomize(backbone, seed=7)
    backbone.save_to_preset(preset)
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=VOCAB, lowercase=False)
    tokenizer.save_to_preset(preset)
    inputs, _ = random_bert_inputs(2, 10, len(VOCAB), seed=5)
    expected = backbone(inputs, training=False)
    return dict(dir=preset, inputs=inputs, ids=np.asarray(tokenizer(TEXT)).tolist(),
                expected={k: np.asarray(v) for k, v in expected.items()})


def test_a_keras_hub_preset_converts_with_its_vocabulary(keras_hub_preset, tmp_path):
    out = tmp_path / "out"
    assert convert.main(["--source=keras_hub", "--model=bert",
                         f"--input={keras_hub_preset['dir']}", f"--output={out}"]) == 0
    backbone = keras.models.load_model(out / "backbone.keras")
    assert isinstance(backbone, BertBackbone) and backbone.num_layers == 2
    got = backbone(keras_hub_preset["inputs"], training=False)
    real = keras_hub_preset["inputs"]["padding_mask"].astype(bool)
    expected = keras_hub_preset["expected"]
    assert max_abs_diff(got["sequence_output"].numpy()[real],
                        expected["sequence_output"][real]) <= 1e-5
    assert max_abs_diff(got["pooled_output"], expected["pooled_output"]) <= 1e-5
    assert (out / "vocab.txt").read_text().split("\n")[:len(VOCAB)] == VOCAB
    info = json.loads((out / "convert_info.json").read_text())
    # lower_case comes from tokenizer.json (cased here; BERT's default is uncased)
    assert info["tokenizer"]["lower_case"] is False and info["tokenizer"]["tokenizer"] == "wordpiece"
    garden_tokenizer = load_tokenizer("wordpiece", str(out / "vocab.txt"), lower_case=False)
    assert garden_tokenizer.tokenize([TEXT])[0] == keras_hub_preset["ids"]
    assert keras_hub_preset["ids"][1] == VOCAB.index("[UNK]")
    assert info["config"]["class_name"] == "BertBackbone" and info["source"] == "keras_hub"
    assert (out / "checkpoints").is_dir()


def test_keras_hub_refusals_name_the_culprit(keras_hub_preset, tmp_path, capsys):
    out = tmp_path / "out"
    assert convert.main(["--source=keras_hub", "--model=roberta",
                         f"--input={keras_hub_preset['dir']}", f"--output={out}"]) == 2
    assert "no --source=keras_hub converter for 'roberta'" in capsys.readouterr().err
    other = tmp_path / "gpt2_preset"
    shutil.copytree(keras_hub_preset["dir"], other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(dict(config, class_name="GPT2Backbone")))
    assert convert.main(["--source=keras_hub", "--model=bert", f"--input={other}",
                         f"--output={out}"]) == 2
    assert (f"{other}/config.json holds a keras-hub GPT2Backbone, not a BertBackbone"
            in capsys.readouterr().err)
    os.remove(other / "model.weights.h5")
    assert convert.main(["--source=keras_hub", "--model=bert", f"--input={other}",
                         f"--output={out}"]) == 2
    assert f"--input={other} has no model.weights.h5" in capsys.readouterr().err
    assert not out.exists()


def test_a_keras_hub_gpt2_preset_converts_with_its_bpe_files(tmp_path):
    keras_hub = pytest.importorskip("keras_hub")
    size = write_bpe_tokenizer(str(tmp_path), gpt2=True)  # vocab.json + merges.txt
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    merges = [m for m in (tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines()
              if m and not m.startswith("#version")]
    preset, out = str(tmp_path / "gpt2_preset"), tmp_path / "out"
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=size, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=32,
        max_sequence_length=24)
    _randomize(backbone, seed=9)
    backbone.save_to_preset(preset)
    tokenizer = keras_hub.models.GPT2Tokenizer(vocabulary=vocab, merges=merges)
    tokenizer.save_to_preset(preset)
    ids = np.random.default_rng(2).integers(0, size, (2, 9)).astype("int32")
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    expected = np.asarray(backbone({"token_ids": ids, "padding_mask": mask}, training=False))

    assert convert.main(["--source=keras_hub", "--model=gpt2", f"--input={preset}",
                         f"--output={out}"]) == 0
    lm = keras.models.load_model(out / "pretrainer.keras")
    assert isinstance(lm, GPT2CausalLM) and isinstance(lm.backbone, GPT2Backbone)
    got = lm.backbone({"token_ids": ids, "padding_mask": mask}, training=False)
    real = mask.astype(bool)
    assert max_abs_diff(got["sequence_output"].numpy()[real], expected[real]) <= 1e-5
    # the LM's logits: the tied token table, as keras-hub's GPT2CausalLM computes them
    logits = lm({"token_ids": ids, "padding_mask": mask}, training=False)["logits"]
    reference = np.asarray(backbone.token_embedding(expected, reverse=True))
    assert max_abs_diff(np.asarray(logits)[real], reference[real]) <= 1e-4
    info = json.loads((out / "convert_info.json").read_text())
    assert info["tokenizer"]["tokenizer"] == "bpe" and info["tokenizer"]["lower_case"] is False
    text = "the movie was good"
    garden_ids = load_tokenizer("bpe", str(out / "vocab.json"), lower_case=False).tokenize([text])[0]
    assert garden_ids == np.asarray(tokenizer(text)).tolist()
    # the merges were carried: t h e (the merges all start with \u0120, a leading space), then
    # one piece each for " movie", " was", " good"
    assert len(garden_ids) == 6
