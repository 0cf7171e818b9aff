"""A model trained with garden.train opens by its run directory in garden.generate,
garden.fewshot, garden.extract_features and garden.analyze (garden.runs: one loader).

A tiny GPT-2 and a tiny T5 are trained for a few steps (configs/gpt2_tiny.gin,
configs/t5_tiny.gin on tests/conftest.py's generative_data); each tool runs on the run directory
in a process of its own, and what it gives is compared with the model restored here from the
same checkpoint, decoded or run with ids laid out by hand (GPT-2: <|endoftext|> prompt; T5:
prompt </s>, decoder start <pad>). The untrained model gives other text (GPT-2 greedy, T5
sampled), weights and hidden states, so a tool that did not load the run's weights fails."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from testing import REPO_ROOT, run_tool, train_in_process

# 5 steps at 3e-2 move greedy GPT-2 text off the untrained model's (it repeats the prompt's
# last token); T5's greedy text is empty either way (sentinels or <pad>), its samples differ.
STEPS = 5
LR = 3e-2
SEQ = 64  # tests/conftest.py FAMILY_SEQ: the generative_data blocks
PROMPT = "the history of the"
CONFIGS = {"gpt2": "configs/gpt2_tiny.gin", "t5": "configs/t5_tiny.gin"}


@dataclasses.dataclass
class Trained:
    run_dir: str
    task: object      # the task of the run's operative_config.gin, prepared
    model: object     # its GenerativeLM, restored from the run's checkpoint
    initial: object   # the same model untrained (the task's seeded init)


def _train(family: str, data, run_dir: str) -> None:
    vocab = data.bpe if family == "gpt2" else data.sentencepiece
    bindings = [f"VOCAB = '{vocab}'", f"DATA_DIR = '{data.data[family + '-train']}'",
                f"garden.Pretraining.phases = [{{'start_step': 0, 'data_dir': "
                f"'{data.data[family + '-train']}', 'max_seq_length': {SEQ}}}]",
                f"train.train_steps = {STEPS}", "train.global_batch_size = 8",
                "train.warmup_steps = 1", "train.log_every = 1",
                f"train.checkpoint_every = {STEPS}", "train.eval_every = 0",
                "train.peak_flops = 1e12", f"train.learning_rate = {LR}",
                "garden.Pretraining.shuffle_buffer = 100"]
    if family == "gpt2":
        bindings.append("garden.Pretraining.tokenizer = 'bpe'")
    argv = [f"--config={CONFIGS[family]}", f"--model_dir={run_dir}", "--strategy=one_device",
            *[f"--gin_param={b}" for b in bindings]]
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)  # the configs include each other by repo-relative paths
    try:
        train_in_process(argv, run_dir, steps=STEPS)
    finally:
        os.chdir(cwd)


def _restored(run_dir: str) -> Trained:
    """The run's task and model, restored here by hand (not through garden.runs)."""
    import gin
    import tensorflow as tf

    from garden import tasks, train  # noqa: F401 (registers the task table)

    tasks.register_with_gin()
    gin.clear_config()
    gin.parse_config_files_and_bindings([os.path.join(run_dir, "operative_config.gin")], [],
                                        skip_unknown=True, finalize_config=False)
    task = gin.query_parameter("train.task").scoped_configurable_fn()
    task.prepare()
    tf.keras.utils.set_random_seed(0)
    initial, _ = task.build_model()
    tf.keras.utils.set_random_seed(0)
    model, objects = task.build_model()
    ckpt = tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    status = tf.train.Checkpoint(**objects).read(ckpt)
    status.expect_partial().assert_existing_objects_matched()
    return Trained(run_dir, task, model, initial)


@pytest.fixture(scope="module")
def trained(generative_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_runs")
    out = {}
    for family in CONFIGS:
        run_dir = str(root / family)
        _train(family, generative_data, run_dir)
        out[family] = _restored(run_dir)
    return out


def _prompt(family: str, t: Trained):
    """The prompt ids laid out by hand, as the pretraining data lays a text out."""
    from garden.generate_dir import left_pad

    tok = t.task.vocabulary
    ids = _tokenizer(t).tokenize([PROMPT])[0]
    if family == "gpt2":
        token_ids, mask = left_pad([[tok.specials["eod"]] + list(ids)])
        return {"token_ids": token_ids, "padding_mask": mask}, tok.specials["eod"]
    enc, enc_mask = left_pad([list(ids) + [tok.specials["eos"]]])
    dec, dec_mask = left_pad([[tok.specials["pad"]]])
    return ({"encoder_token_ids": enc, "encoder_padding_mask": enc_mask,
             "decoder_token_ids": dec, "decoder_padding_mask": dec_mask}, tok.specials["eos"])


def _tokenizer(t: Trained):
    from text import tokenizers

    return tokenizers.load_tokenizer(t.task.tokenizer_kind, t.task.vocab,
                                     lower_case=t.task.lower_case)


DECODINGS = {"greedy": ["--method=greedy"], "sample": ["--method=sample", "--seed=1"]}


def _decoded_text(family: str, t: Trained, model, method: str) -> str:
    """What garden.generate prints for PROMPT: the prompt, the new tokens' text up to EOS."""
    from garden.generate import TextStream, token_bytes
    from garden.models.decoding import GenerationConfig, generate

    prompt, eos = _prompt(family, t)
    pad = t.task.vocabulary.specials.get("pad", eos)
    config = GenerationConfig(max_new_tokens=8, method=method, seed=1)
    out = generate(model, prompt, config, eos_id=eos, pad_id=pad, jit_compile=False)  # --no-jit
    stream, text = TextStream(token_bytes(_tokenizer(t))), PROMPT
    for token in np.asarray(out["token_ids"])[0, :int(out["lengths"][0])]:
        if int(token) == eos:
            break
        text += stream.feed(int(token))
    return text + stream.flush()


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_generate_decodes_the_run_directory_as_the_restored_model(trained, family):
    t = trained[family]
    expected = {m: _decoded_text(family, t, t.model, m) for m in DECODINGS}
    # The check can fail: the untrained model's samples (and GPT-2's greedy text) differ.
    assert _decoded_text(family, t, t.initial, "sample") != expected["sample"]
    if family == "gpt2":
        assert _decoded_text(family, t, t.initial, "greedy") != expected["greedy"]
    # GPT-2's greedy text tells the weights apart; T5's greedy text is empty, its samples not.
    for method in ["greedy"] + (["sample"] if family == "t5" else []):
        flags = DECODINGS[method]
        proc = run_tool("garden.generate", f"--model_dir={t.run_dir}", f"--prompt={PROMPT}",
                        "--max_new_tokens=8", "--no-jit", *flags)
        assert proc.stdout.splitlines() == [expected[method]], (method, proc.stdout,
                                                                 proc.stderr[-2000:])


def test_generate_refuses_a_directory_of_no_model_in_one_line(tmp_path):
    from garden import runs

    proc = run_tool("garden.generate", f"--model_dir={tmp_path}", "--prompt=x", check=False)
    line = _refused_in_one_line(proc, str(tmp_path), runs.OPERATIVE_CONFIG, "generation.json")
    assert "a garden.train run directory" in line, line


def test_fewshot_opens_the_run_directory(trained, tmp_path):
    from garden import fewshot

    demos, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    rows = [{"question": "what is the history", "answer": "the history"},
            {"question": "who wrote it", "answer": "the people"}]
    for path in (demos, dev):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for family, t in sorted(trained.items()):
        args = ["--model_dir", t.run_dir, "--task=freeform", f"--demos={demos}",
                f"--eval={dev}", "--k=1", "--max_new_tokens=2", "--batch_size=2"]
        proc = run_tool("garden.fewshot", *args)
        result = json.loads(proc.stdout)
        assert result["n"] == 2 and result["k"] == 1, result
        # The loader restores the run's weights: the scorer's model is the checkpoint's.
        scorer = fewshot.load_scorer(fewshot.build_parser().parse_args(args))
        _same_weights(scorer.model, t.model, t.initial)


def _same_weights(loaded, restored, initial) -> None:
    """Weight for weight (in build order: Keras numbers the names of a second build)."""
    got, want = [w.numpy() for w in loaded.weights], [w.numpy() for w in restored.weights]
    assert [w.shape for w in got] == [w.shape for w in want]
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(a, b, err_msg=loaded.weights[i].path)
    assert any(not np.array_equal(w.numpy(), b) for w, b in zip(initial.weights, want))


def _refused_in_one_line(proc, *names) -> str:
    lines = proc.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, (proc.returncode, lines[-5:])
    assert "Traceback" not in proc.stderr and all(n in errors[0] for n in names), errors
    return errors[0]


def test_extract_features_opens_the_run_directory(trained, tmp_path):
    """GPT-2: the run's hidden states, as the backbone restored here gives them; T5's
    backbone has no hidden-state output: refused by name in one line."""
    import tensorflow as tf

    lines = tmp_path / "in.txt"
    lines.write_text("the history of science\nit was a good day\n")
    t = trained["gpt2"]
    out = tmp_path / "gpt2"
    run_tool("garden.extract_features", f"--model_dir={t.run_dir}", f"--input={lines}",
             f"--output={out}.jsonl", f"--numpy={out}.npz", "--layers=-1,0",
             "--max_seq_length=16")
    got = np.load(f"{out}.npz")
    backbone = t.model.backbone
    reference = type(backbone).from_config({**backbone.get_config(),
                                            "output_hidden_states": True})
    reference.set_weights(backbone.get_weights())
    inputs = {"token_ids": tf.constant(got["token_ids"]),
              "padding_mask": tf.constant(got["padding_mask"])}
    states = reference(inputs, training=False)["hidden_states"]
    real = got["padding_mask"].astype(bool)
    np.testing.assert_allclose(got["layer_-1"][real], np.asarray(states[-1])[real], atol=1e-5)
    np.testing.assert_allclose(got["layer_0"][real], np.asarray(states[0])[real], atol=1e-5)
    untrained = type(backbone).from_config(reference.get_config())
    untrained.set_weights(t.initial.backbone.get_weights())
    assert not np.allclose(got["layer_-1"][real],
                           np.asarray(untrained(inputs)["hidden_states"][-1])[real], atol=1e-3)

    proc = run_tool("garden.extract_features", f"--model_dir={trained['t5'].run_dir}",
                    f"--input={lines}", f"--output={tmp_path / 't5.jsonl'}", check=False)
    _refused_in_one_line(proc, "T5Backbone")


def test_analyze_opens_the_run_directory(trained, tmp_path):
    """garden.analyze's loader restores the run's backbone, and `attention` runs on the run
    directory of GPT-2 (causal: a query's keys are itself and the tokens before it, and the
    report says which shares have no meaning) and of T5 (its encoder, bidirectional)."""
    from garden import analyze

    sentences = tmp_path / "s.txt"
    sentences.write_text("the history of science\nit was a good day\n")
    for family, t in sorted(trained.items()):
        opened = analyze.open_model(t.run_dir, 16)
        assert opened.family == family, opened.family
        _same_weights(opened.backbone, t.model.backbone, t.initial.backbone)
        proc = run_tool("garden.analyze", "attention", f"--model={t.run_dir}",
                        f"--input={sentences}", f"--output={tmp_path / family}",
                        "--max_seq_length=16", check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads((tmp_path / family / "attention.json").read_text())
        causal_rule = "cannot see the next token" in json.dumps(report)
        assert causal_rule == (family == "gpt2"), (family, report.get("shares", {}).keys())
