"""The models before the Transformer beside BERT-tiny, on the same data and tasks:

    make demo                                              # demo_out/: corpus, vocab, tasks
    python -m benchmarks.contextual_compare --demo_dir=demo_out [--work_dir=DIR]

From the demo's sample corpus and WordPiece vocabulary, pretrains ELMo's biLM and ULMFiT's
AWD-LSTM LM (make_pretrain --objective=bilm, garden.train) and CoVe's encoder (on the
synthetic sentence-reversal pair task, garden/models/cove/sample_pairs.py: a stand-in for
translation) at sizes near the demo's BERT-tiny (which `make demo` pretrained for 300
steps), then fine-tunes each of the four, and CVT's
BiLSTM (no LM: it learns from unlabelled corpus sentences while tagging), on the demo's
sample classification task and the sample CoNLL tagging task, every run through garden.train
with the family's config. Tagging is also run with a few labels (--few_labels of the train
sentences), where CVT's unlabelled batches should help: CVT against the same tagger trained on
those labels alone, for the same labelled batches and for as many updates (CVT alternates
them with as many unlabelled ones, corpus sentences less the dev set's). Prints one table:
parameters, pretraining and fine-tuning seconds, dev accuracy (vs the majority class) and
entity F1 (vs all-O, 0), and writes it as JSON.
Tiny models and short runs: the ranking, not the absolute scores, is the point.

    python -m benchmarks.contextual_compare --contextuality [--families=elmo,bert,gpt2,minilm]
        [--pretrain_steps=300 --batch_size=32 --seq_length=64] [--minilm=DIR]
        [--plot=PNG] [--output_json=FILE] [--work_dir=DIR]

--contextuality (issue 36 item 2; no `make demo` needed): Ethayarajh's (2019) comparison of
ELMo, BERT and GPT-2 on models the garden trains alike. data_pipelines.sample_corpus is built
in the work directory; its files other than file 1 are the training text, file 1 (never
trained on) gives the analysed sentences. Each family gets its own lower-cased vocabulary of
8,000 pieces from the training files (WordPiece for ELMo and BERT, byte-level BPE for
GPT-2), make_pretrain data (bilm with characters, bert, gpt2) and garden.train of its tiny
config (configs/<family>_tiny.gin, its own learning rate) for the same budget: --pretrain_steps
x --batch_size blocks of --seq_length pieces. The real all-MiniLM-L6-v2 (--minilm, converted
with garden.convert) is analysed beside them. garden.analyze's contextuality (its open_model
and garden.bertology.contextuality; ELMo's run read as `analyse` says) runs on all of them
over the first --analysis_sentences sentences of file 1; prints the table (per layer:
self-similarity, intra-sentence similarity and maximum explainable variance, raw and
anisotropy-adjusted, and the baselines), writes the plot (--plot: a panel per measure, a line
per family) and the JSON that benchmarks/bertology_report.py renders into docs/bertology.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import subprocess
import sys
import time
from typing import List, Optional, Tuple

import numpy as np

from benchmarks import common
from benchmarks.bf16_accuracy import add_minilm_flag, check_minilm
from text.finetune import tagging
from data_pipelines.sample_tasks import conll as sample_conll

# Sizes near BERT-tiny's (L2 H128 A2 FFN512) on the demo vocabulary.
ELMO = ["backbone.preset='elmo_tiny'", "backbone.char_embedding_size=16",
        "backbone.filters=((1, 32), (2, 32), (3, 64), (4, 128))", "backbone.projection_size=128",
        "backbone.lstm_units=256", "backbone.max_characters=20"]
ULMFIT = ["backbone.preset='ulmfit_tiny'", "backbone.embedding_size=128",
          "backbone.hidden_size=256"]
CVT = ["backbone.preset='cvt_tiny'", "backbone.embedding_size=128",
       "backbone.layer_units=(128, 64)"]
# CVT's unlabelled sentences at most: all of the sample corpus's (about 11,600).
UNLABELED_MAX = 50_000
COVE = ["backbone.preset='cove_tiny'", "backbone.embedding_size=128", "backbone.lstm_units=128"]


def _train(name: str, config: str, model_dir: str, bindings, work: str) -> dict:
    """garden.train in a fresh process; its summary.json plus the wall seconds."""
    common.log(f"{name}: garden.train --config={config}")
    start = time.time()
    with open(os.path.join(work, f"{name}.log"), "w") as log:
        proc = subprocess.run([sys.executable, "-m", "garden.train", f"--config={config}",
                               f"--model_dir={model_dir}",
                               *[f"--gin_param={b}" for b in bindings]],
                              cwd=common.REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise SystemExit(f"{name} failed (exit {proc.returncode}); see {work}/{name}.log")
    with open(os.path.join(model_dir, "summary.json")) as f:
        summary = json.load(f)
    summary["wall_s"] = round(time.time() - start, 1)
    common.log(f"{name}: done in {summary['wall_s']:.0f}s")
    return summary


def _bilm_data(args, work: str) -> str:
    out = os.path.join(work, "bilm")
    if not os.path.exists(os.path.join(out, "COMPLETED")):
        subprocess.run([sys.executable, "-m", "data_pipelines.make_pretrain", "--objective=bilm",
                        f"--input={os.path.join(args.demo_dir, 'corpus', '*.txt')}",
                        f"--output_dir={out}", f"--vocab={args.vocab}", "--characters",
                        "--max_characters=20", "--num_shards=2"],
                       cwd=common.REPO_ROOT, check=True, capture_output=True)
    return out


def _few(path: str, share: float, out: str) -> str:
    """The first `share` of a CoNLL file's sentences."""
    with open(path, encoding="utf-8") as f:
        blocks = [b for b in f.read().split("\n\n") if b.strip()]
    keep = blocks[:max(1, int(share * len(blocks)))]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n\n".join(keep) + "\n")
    return out


def _unlabeled(args, work: str, held_out: str = "") -> str:
    """Corpus sentences of more than 3 words, one per line (CoVe's sentence pairs, CVT's
    unlabelled batches); with held_out (a CoNLL file), less the lines whose words are one of
    its sentences: CVT never reads the text it is scored on."""
    return unlabeled_sentences(sorted(glob.glob(os.path.join(args.demo_dir, "corpus", "*.txt"))),
                               os.path.join(work, "unlabeled_cvt.txt" if held_out else
                                            "unlabeled.txt"), held_out)


def unlabeled_sentences(corpus_files, out: str, held_out: str = "") -> str:
    """_unlabeled's file from the given corpus files; prints how many lines held_out took."""
    skip = ({s.words for s in tagging.read_examples(held_out)} if held_out else set())
    kept = dropped = 0
    with open(out, "w", encoding="utf-8") as f:
        for name in corpus_files:
            with open(name, encoding="utf-8") as src:
                for line in src:
                    if len(line.split()) <= 3:
                        continue
                    if tuple(sample_conll.words_of(line)) in skip:
                        dropped += 1
                        continue
                    f.write(line)
                    kept += 1
    if held_out:
        common.log(f"unlabelled sentences: {kept:,} ({dropped:,} dropped: sentences of "
                   f"{held_out})")
    return out


def _common(args, task: str, steps: int) -> list:
    demo = args.demo_dir
    files = ({"TRAIN_FILE": f"'{demo}/task/train.tsv'", "EVAL_FILE": f"'{demo}/task/dev.tsv'"}
             if task == "classification" else
             {"TRAIN_DATA": f"'{args.tagging_train}'",
              "EVAL_DATA": f"'{demo}/tasks/conll/dev.txt'"})
    return [f"VOCAB='{args.vocab}'", "EXPORT_BASE=None", f"TRAIN_STEPS={steps}",
            "train.global_batch_size=32", "train.log_every=50",
            *[f"{k}={v}" for k, v in files.items()]]


def run(args, work: str) -> dict:
    lms = _pretrain(args, work)
    inits = {"elmo": os.path.join(work, "elmo_lm"), "ulmfit": os.path.join(work, "ulmfit_lm"),
             "bert": os.path.join(args.demo_dir, "bert_tiny"),
             "cove": os.path.join(work, "cove_mt")}
    sizes = {"elmo": ELMO + [f"backbone.vocab='{args.vocab}'"], "ulmfit": ULMFIT, "bert": [],
             "cove": COVE}
    cvt_unlabeled = (_unlabeled(args, work, held_out="" if args.cvt_dev_text else
                                f"{args.demo_dir}/tasks/conll/dev.txt")
                     if "cvt" in args.families else "")
    runs = {}
    for labels, train_file in (("all", f"{args.demo_dir}/tasks/conll/train.txt"),
                               ("few", _few(f"{args.demo_dir}/tasks/conll/train.txt",
                                            args.few_labels, os.path.join(work, "few.txt")))):
        args.tagging_train = train_file
        if labels not in args.labels:
            continue
        for family in (f for f in ("elmo", "ulmfit", "bert", "cove") if f in args.families):
            for task in ("classification", "tagging"):
                if task == "classification" and labels == "few":
                    continue
                name = f"{family}_{task}_{labels}"
                config = f"{task}_{family}_tiny" if family != "bert" else f"{task}_tiny"
                runs[name] = _train(name, f"configs/finetune/{config}.gin",
                                    os.path.join(work, name), [
                                        *_common(args, task, args.finetune_steps),
                                        f"INIT_CHECKPOINT='{inits[family]}'", *sizes[family]],
                                    work)
        if "cvt" in args.families:
            runs.update(_cvt_runs(args, work, labels, cvt_unlabeled))
    return {"pretraining": lms, "finetuning": runs}


def _pretrain(args, work: str) -> dict:
    """The LM / MT runs of the families that have one (BERT-tiny's is the demo's)."""
    lms = {}
    if "cove" in args.families:
        pairs = os.path.join(work, "pairs")
        subprocess.run([sys.executable, "-m", "garden.models.cove.sample_pairs",
                        f"--input={_unlabeled(args, work)}", f"--output={pairs}"],
                       cwd=common.REPO_ROOT, check=True, capture_output=True)
        lms["cove"] = _train("cove_mt", "configs/cove_tiny.gin", os.path.join(work, "cove_mt"), [
            f"VOCAB='{args.vocab}'", f"TRAIN_FILE='{pairs}/train.tsv'",
            f"EVAL_FILE='{pairs}/dev.tsv'", f"train.train_steps={args.pretrain_steps}",
            "train.log_every=100", *COVE], work)
    bilm = [f for f in ("elmo", "ulmfit") if f in args.families]
    if bilm:
        pretrain = ["train.global_batch_size=32", f"train.train_steps={args.pretrain_steps}",
                    f"VOCAB='{args.vocab}'", f"DATA_DIR='{_bilm_data(args, work)}'",
                    "train.log_every=100", "garden.Pretraining.phases=[{'start_step': 0, "
                    "'data_dir': %DATA_DIR, 'max_seq_length': 20}]"]
    for family in bilm:
        lms[family] = _train(f"{family}_lm", f"configs/{family}_tiny.gin",
                             os.path.join(work, f"{family}_lm"),
                             pretrain + (ELMO if family == "elmo" else ULMFIT), work)
    return lms


def _cvt_runs(args, work: str, labels: str, unlabeled: str) -> dict:
    """CVT and the same tagger on the labels alone, on the same finetune_steps labelled
    batches: CVT's run alternates them with as many unlabelled batches from the first step
    (as Clark et al.), so it is twice as long; its unlabelled sentences are the file
    `unlabeled` (run(): the corpus's less the dev sentences, all of them with --cvt_dev_text).
    The labels alone also run as long as CVT (2 * finetune_steps labelled
    batches: as many updates). Once per seed of --cvt_seeds (train.seed --cvt_first_seed,
    ...)."""
    n = args.finetune_steps
    runs = {}
    for seed_value in range(args.cvt_first_seed, args.cvt_first_seed + args.cvt_seeds):
        seed = "" if seed_value == 42 else f"_seed{seed_value}"
        for name, data, steps in ((f"cvt_tagging_{labels}{seed}", f"'{unlabeled}'", 2 * n),
                                  (f"cvt_labels_only_{labels}{seed}", "None", n),
                                  (f"cvt_labels_only_2x_{labels}{seed}", "None", 2 * n)):
            runs[name] = _train(name, "configs/finetune/tagging_cvt_tiny.gin",
                                os.path.join(work, name), [
                                    *_common(args, "tagging", steps), "INIT_CHECKPOINT=None",
                                    f"UNLABELED_DATA={data}", f"train.seed={seed_value}",
                                    "garden.CvtTagging.supervised_batches=0",
                                    f"garden.CvtTagging.max_unlabeled={UNLABELED_MAX}", *CVT],
                                work)
    return runs


def cvt_gain(runs: dict) -> list:
    """Per label setting and baseline (the labels alone on the same labelled batches, and on
    as many updates as CVT's): CVT's entity F1 minus the baseline's per seed, their mean,
    standard deviation, how many seeds CVT is ahead in and the paired t statistic."""
    lines = []
    for labels in ("all", "few"):
        for baseline, what in (("cvt_labels_only_", "the same labelled batches"),
                               ("cvt_labels_only_2x_", "as many updates")):
            gains = [runs[name]["eval_f1"] - runs[name.replace("cvt_tagging_", baseline)][
                "eval_f1"] for name in runs if name.startswith(f"cvt_tagging_{labels}")]
            if gains:
                lines.append(f"CVT - labels alone ({what}), {labels} labels: "
                             + " ".join(f"{g:+.3f}" for g in gains) + f" ({summary(gains)})")
    return lines


def summary(gains) -> str:
    """Mean, sd, seeds ahead and the paired t statistic (mean / (sd / sqrt(n))) of gains."""
    n, mean = len(gains), float(np.mean(gains))
    if n < 2:
        return f"mean {mean:+.3f}, 1 seed"
    sd = float(np.std(gains, ddof=1))
    t = f"paired t {mean / (sd / np.sqrt(n)):.2f} at {n - 1} df" if sd else "sd 0: no t"
    return f"mean {mean:+.3f}, sd {sd:.3f}, ahead in {sum(g > 0 for g in gains)} of {n}, {t}"


def table(result: dict) -> str:
    lms, runs = result["pretraining"], result["finetuning"]
    rows = ["| model | run | parameters | seconds | score | baseline |",
            "|---|---|---|---|---|---|"]
    for family, lm in lms.items():
        what = "MT pretraining" if family == "cove" else "LM pretraining"
        rows.append(f"| {family} | {what} ({lm['steps']} steps) | "
                    f"{lm['parameters']:,} | {lm['wall_s']:.0f} | loss "
                    f"{lm['last_logged_metrics']['loss']:.3f} | |")
    for name, run in runs.items():
        if "eval_accuracy" in run:
            score = f"accuracy {run['eval_accuracy']:.3f}"
            base = f"majority {run['majority_baseline_accuracy']:.3f}"
        else:
            score, base = f"entity F1 {run['eval_f1']:.3f}", "all-O 0.000"
        rows.append(f"| {name.split('_')[0]} | {name} | {run['parameters']:,} | "
                    f"{run['wall_s']:.0f} | {score} | {base} |")
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------
# --contextuality: Ethayarajh's three families trained alike, and the real MiniLM
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LanguageModel:
    """How one family's LM is pretrained for --contextuality: its tiny config, make_pretrain
    objective and flags, vocabulary kind and the gin sizes on top of the config."""

    config: str
    objective: str
    tokenizer: str  # make_vocab --tokenizer
    data_flags: Tuple[str, ...] = ()
    static_masks: bool = False  # make_pretrain takes --max_predictions_per_seq
    sizes: Tuple[str, ...] = ()


LANGUAGE_MODELS = {
    # ELMo's biLM over the WordPiece pieces (20 characters each), sized as in the fine-tuning
    # comparison above; BERT-tiny (L2 H128 A2) with MLM + NSP; GPT-2 tiny (L2 H128 A2) on
    # byte-level BPE.
    "elmo": LanguageModel("configs/elmo_tiny.gin", "bilm", "wordpiece",
                          ("--characters", "--max_characters=20"), sizes=tuple(ELMO)),
    "bert": LanguageModel("configs/bert_tiny.gin", "bert", "wordpiece", static_masks=True),
    "gpt2": LanguageModel("configs/gpt2_tiny.gin", "gpt2", "bpe"),
}
MINILM = "minilm"  # --families entry: the real all-MiniLM-L6-v2, converted, not trained
CONTEXTUALITY_FAMILIES = (*LANGUAGE_MODELS, MINILM)
NAMES = {"elmo": "ELMo (tiny)", "bert": "BERT (tiny)", "gpt2": "GPT-2 (tiny)",
         MINILM: "all-MiniLM-L6-v2"}
HELD_OUT = 1  # the sample corpus file the models never see: the analysed sentences
VOCAB_SIZE = 8000


def budget(args) -> dict:
    """What every family is given: the same steps x batch x block length, hence the same
    number of pieces (of its own tokenizer) read."""
    return {"steps": args.pretrain_steps, "batch_size": args.batch_size,
            "seq_length": args.seq_length,
            "tokens": args.pretrain_steps * args.batch_size * args.seq_length}


def _lm_data(family: str, corpus: str, vocab: str, work: str, args) -> str:
    """make_pretrain --objective=<family's> on the training files, lower-cased like every
    vocabulary here; BERT's masks are drawn afresh on each of --dupe_factor passes."""
    lm = LANGUAGE_MODELS[family]
    out = os.path.join(work, f"data_{family}_{args.seq_length}")
    if os.path.exists(os.path.join(out, "COMPLETED")):
        return out
    flags = list(lm.data_flags)
    if lm.static_masks:
        # 15% of 64 -> 10 predictions (BERT's max_predictions_per_seq rule).
        flags += [f"--max_predictions_per_seq={max(1, round(0.15 * args.seq_length + 0.4))}",
                  f"--dupe_factor={args.dupe_factor}"]
    common.log(f"{family}: make_pretrain --objective={lm.objective}")
    subprocess.run([sys.executable, "-m", "data_pipelines.make_pretrain",
                    f"--objective={lm.objective}", f"--input={corpus}", f"--output_dir={out}",
                    f"--vocab={vocab}", f"--tokenizer={lm.tokenizer}", "--lower_case",
                    f"--max_seq_length={args.seq_length}", "--num_shards=1", "--overwrite",
                    *flags], cwd=common.REPO_ROOT, check=True, capture_output=True)
    return out


def _pretrain_lm(family: str, data: str, vocab: str, work: str, args) -> dict:
    """garden.train of the family's tiny config for the budget (its own learning rate)."""
    lm = LANGUAGE_MODELS[family]
    b = budget(args)
    phases = [{"start_step": 0, "data_dir": data, "max_seq_length": b["seq_length"]}]
    return _train(f"{family}_lm", lm.config, os.path.join(work, f"{family}_lm"), [
        f"VOCAB='{vocab}'", f"DATA_DIR='{data}'", f"garden.Pretraining.phases={phases!r}",
        f"train.train_steps={b['steps']}", f"train.global_batch_size={b['batch_size']}",
        f"train.warmup_steps={max(1, b['steps'] // 10)}",
        f"train.log_every={max(1, b['steps'] // 10)}",
        f"train.checkpoint_every={b['steps']}",
        "train.peak_flops=1e12",  # no matmul peak measurement: MFU means nothing here
        *lm.sizes], work)


def contextuality_run(args, work: str) -> dict:
    """Builds the sample corpus, trains the --families' LMs on the same files for the same
    budget, converts MiniLM, and runs garden.analyze contextuality on all of them over the
    held-out file's first --analysis_sentences sentences."""
    from benchmarks import objectives_learn

    files = objectives_learn.sample_corpus(work)
    train_files = [f for i, f in enumerate(files) if i != HELD_OUT]
    corpus = objectives_learn.training_corpus(work, files, len(train_files))
    models, pretraining = {}, {}
    for family in (f for f in args.families if f in LANGUAGE_MODELS):
        kind = LANGUAGE_MODELS[family].tokenizer
        vocab = objectives_learn.vocabulary(work, kind, corpus, VOCAB_SIZE)
        data = _lm_data(family, corpus, vocab, work, args)
        pretraining[family] = _pretrain_lm(family, data, vocab, work, args)
        models[family] = os.path.join(work, f"{family}_lm")
    if MINILM in args.families:
        converted = os.path.join(work, "minilm")
        if not os.path.exists(os.path.join(converted, "convert_info.json")):
            subprocess.run([sys.executable, "-m", "garden.convert", "--source=huggingface",
                            "--model=bert", f"--input={args.minilm}", f"--output={converted}"],
                           cwd=common.REPO_ROOT, check=True, capture_output=True)
        models[MINILM] = converted
    common.log(f"contextuality of {', '.join(models)}")
    start = time.time()
    analysed = analyse(models, files[HELD_OUT], args)
    return {"budget": budget(args), "pretraining": pretraining,
            "held_out": os.path.basename(files[HELD_OUT]),
            "train_files": [os.path.basename(f) for f in train_files],
            "sentences": args.analysis_sentences, "min_contexts": MIN_CONTEXTS,
            "analysis_s": round(time.time() - start, 1), "contextuality": analysed}


MIN_CONTEXTS = 5  # Ethayarajh's: words seen in at least 5 contexts


def analyse(models: dict, text: str, args) -> dict:
    """garden.analyze contextuality of each model (its open_model and
    garden.bertology.contextuality, as `python -m garden.analyze contextuality` runs them)
    over the first --analysis_sentences sentences of `text` (an ELMo LM run's backbone, which
    reads characters, is opened reading pieces: garden.analyze.reading_pieces)."""
    from garden import analyze as garden_analyze
    from garden.bertology import contextuality, report

    sentences = report.read_sentences(text, args.analysis_sentences)
    results = {}
    for family, path in models.items():
        opened = garden_analyze.open_model(path, args.seq_length)
        common.log(f"contextuality of {family}: {opened.description}")
        results[family] = contextuality.contextuality(opened.backbone, opened.packer, sentences,
                                                      MIN_CONTEXTS, seed=0)
    return results


# The rows of the table and the panels of the plot: (measure, its adjusted twin, what the
# adjustment subtracts).
MEASURES = (("self_similarity", "adjusted_self_similarity", "anisotropy"),
            ("intra_sentence_similarity", "adjusted_intra_sentence_similarity", "anisotropy"),
            ("max_explainable_variance", "adjusted_max_explainable_variance", "anisotropy_mev"))


def whole_sentence(metrics: dict, key: str) -> Optional[List[float]]:
    """A causal model's intra-sentence similarity to the whole sentence's mean (the figure
    Ethayarajh gives for GPT-2) for `key` (raw or adjusted intra-sentence similarity, adjusted
    by the same baseline); None for a bidirectional model or another measure."""
    whole = metrics.get("whole_sentence_intra_sentence_similarity")
    if whole is None or key not in ("intra_sentence_similarity",
                                    "adjusted_intra_sentence_similarity"):
        return None
    if key == "intra_sentence_similarity":
        return whole
    return [w - a for w, a in zip(whole, metrics["anisotropy"])]


def contextuality_table(result: dict) -> str:
    """Markdown: a row per measure and family, a column per layer (0: the input layer)."""
    ctx = result["contextuality"]
    layers = max(len(m["self_similarity"]) for m in ctx.values())
    rows = ["| measure | model | " + " | ".join(f"L{i}" for i in range(layers)) + " |",
            "|---|---|" + "---|" * layers]

    def row(measure, family, values):
        cells = [f"{v:.2f}" for v in values] + [""] * (layers - len(values))
        rows.append(f"| {measure} | {NAMES.get(family, family)} | " + " | ".join(cells) + " |")

    for raw, adjusted, baseline in MEASURES:
        for key in (raw, adjusted):
            for family, metrics in ctx.items():
                row(key.replace("_", " "), family, metrics[key])
                whole = whole_sentence(metrics, key)
                if whole is not None:
                    row(key.replace("_", " ") + " (whole sentence)", family, whole)
    for key in ("anisotropy", "anisotropy_mev"):
        for family, metrics in ctx.items():
            row(key.replace("_", " "), family, metrics[key])
    return "\n".join(rows)


def contextuality_plot(result: dict, path: str) -> str:
    """One panel per measure (raw above, anisotropy-adjusted below; the cosine baseline and
    the MEV baseline in the last column), a line per family over its layers."""
    from garden import plots

    plt = plots.pyplot()
    ctx = result["contextuality"]
    figure, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True)
    panels = [[raw for raw, _, _ in MEASURES] + ["anisotropy"],
              [adjusted for _, adjusted, _ in MEASURES] + ["anisotropy_mev"]]
    for r, keys in enumerate(panels):
        for c, key in enumerate(keys):
            axis = axes[r][c]
            for family, metrics in ctx.items():
                line, = axis.plot(range(len(metrics[key])), metrics[key], marker="o",
                                  label=NAMES.get(family, family))
                whole = whole_sentence(metrics, key)
                if whole is not None:
                    axis.plot(range(len(whole)), whole, ls=":", marker=".",
                              color=line.get_color(),
                              label=f"{NAMES.get(family, family)}, whole sentence")
            axis.set_title(key.replace("_", " ").replace("anisotropy mev",
                                                         "anisotropy (MEV baseline)"),
                           fontsize=10)
            axis.grid(alpha=0.3)
            if r == 1:
                axis.set_xlabel("layer (0: input layer)")
    axes[0][0].legend(fontsize=7)
    b = result["budget"]
    figure.suptitle(f"Contextuality (Ethayarajh 2019) on {result['sentences']} held-out "
                    f"sentences; tiny models trained {b['steps']} steps x {b['batch_size']} x "
                    f"{b['seq_length']} pieces", fontsize=11)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return plots.save(figure, path)


def _contextuality_main(p, args) -> int:
    unknown = sorted(set(args.families) - set(CONTEXTUALITY_FAMILIES))
    if unknown:
        p.error(f"--families: {unknown} are not compared under --contextuality; choose from "
                f"{', '.join(CONTEXTUALITY_FAMILIES)}")
    if MINILM in args.families:
        check_minilm(p, args.minilm)
    with common.work_dir(args.work_dir, "contextuality_compare_") as work:
        result = contextuality_run(args, work)
        result["machine"] = common.machine_info(("tensorflow", "keras"))
        result["argv"] = list(args.argv)
        print(contextuality_table(result))
        if args.plot:
            common.log(f"wrote {contextuality_plot(result, args.plot)}")
        if args.output_json:
            common.write_report(result, args.output_json)
    return 0


FINETUNE_FAMILIES = ("elmo", "ulmfit", "bert", "cove", "cvt")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contextuality", action="store_true",
                   help="instead of fine-tuning: pretrain --families' LMs (elmo, bert, gpt2) "
                        "on the sample corpus for the same budget and compare their "
                        "contextuality with the real MiniLM's (no --demo_dir needed)")
    p.add_argument("--demo_dir", default="demo_out", help="a `make demo` work directory")
    p.add_argument("--work_dir", default="", help="kept when given (default: a temporary "
                                                  "directory, removed at the end)")
    p.add_argument("--pretrain_steps", type=int, default=300)
    p.add_argument("--finetune_steps", type=int, default=200)
    p.add_argument("--few_labels", type=float, default=0.1,
                   help="share of the tagging train sentences of the few-label runs")
    p.add_argument("--families", default=None,
                   help="a subset to run (comma-separated; default: "
                        f"{','.join(FINETUNE_FAMILIES)}; with --contextuality "
                        f"{','.join(CONTEXTUALITY_FAMILIES)})")
    p.add_argument("--labels", default="all,few", help="tagging label settings to run")
    p.add_argument("--cvt_seeds", type=int, default=1,
                   help="CVT and its two labels-only baselines once per seed (train.seed 42, "
                        "43, ...)")
    p.add_argument("--cvt_first_seed", type=int, default=42,
                   help="the first train.seed of --cvt_seeds (more seeds after an earlier run)")
    p.add_argument("--cvt_dev_text", action="store_true",
                   help="CVT's unlabelled sentences include the dev sentences it is scored on "
                        "(transductive, like the LMs' pretraining corpus; default: left out)")
    p.add_argument("--batch_size", type=int, default=32,
                   help="--contextuality: every LM's batch (blocks per step)")
    p.add_argument("--seq_length", type=int, default=64,
                   help="--contextuality: every LM's block, in pieces of its own tokenizer; "
                        "also the analysis' rows")
    p.add_argument("--dupe_factor", type=int, default=4,
                   help="--contextuality: BERT's passes over the corpus, each with fresh masks")
    p.add_argument("--analysis_sentences", type=int, default=300,
                   help="--contextuality: sentences of the held-out corpus file analysed")
    add_minilm_flag(p)
    p.add_argument("--plot", default="", help="--contextuality: the figure's PNG path")
    p.add_argument("--output_json", default="")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.families = [f for f in (args.families or ",".join(
        CONTEXTUALITY_FAMILIES if args.contextuality else FINETUNE_FAMILIES)).split(",") if f]
    if args.contextuality:
        return _contextuality_main(p, args)
    args.labels = [x for x in args.labels.split(",") if x]
    args.vocab = os.path.abspath(os.path.join(args.demo_dir, "vocab.txt"))
    args.demo_dir = os.path.abspath(args.demo_dir)
    for needed in ("vocab.txt", "bert_tiny/operative_config.gin", "task/train.tsv",
                   "tasks/conll/train.txt"):
        if not os.path.exists(os.path.join(args.demo_dir, needed)):
            p.error(f"--demo_dir={args.demo_dir} has no {needed}: run `make demo` first")
    with common.work_dir(args.work_dir, "contextual_compare_") as work:
        result = run(args, work)
    result["machine"] = common.machine_info(("tensorflow", "keras"))
    result["argv"] = args.argv
    print(table(result))
    for line in cvt_gain(result["finetuning"]):
        print(line)
    if args.output_json:
        common.write_report(result, args.output_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
