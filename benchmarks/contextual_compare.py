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
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks import common
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo_dir", default="demo_out", help="a `make demo` work directory")
    p.add_argument("--work_dir", default="", help="kept when given (default: a temporary "
                                                  "directory, removed at the end)")
    p.add_argument("--pretrain_steps", type=int, default=300)
    p.add_argument("--finetune_steps", type=int, default=200)
    p.add_argument("--few_labels", type=float, default=0.1,
                   help="share of the tagging train sentences of the few-label runs")
    p.add_argument("--families", default="elmo,ulmfit,bert,cove,cvt",
                   help="a subset to run (comma-separated)")
    p.add_argument("--labels", default="all,few", help="tagging label settings to run")
    p.add_argument("--cvt_seeds", type=int, default=1,
                   help="CVT and its two labels-only baselines once per seed (train.seed 42, "
                        "43, ...)")
    p.add_argument("--cvt_first_seed", type=int, default=42,
                   help="the first train.seed of --cvt_seeds (more seeds after an earlier run)")
    p.add_argument("--cvt_dev_text", action="store_true",
                   help="CVT's unlabelled sentences include the dev sentences it is scored on "
                        "(transductive, like the LMs' pretraining corpus; default: left out)")
    p.add_argument("--output_json", default="")
    args = p.parse_args(argv)
    args.families = [f for f in args.families.split(",") if f]
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
    result["argv"] = list(sys.argv[1:] if argv is None else argv)
    print(table(result))
    for line in cvt_gain(result["finetuning"]):
        print(line)
    if args.output_json:
        common.write_report(result, args.output_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
