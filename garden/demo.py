"""`python -m garden.demo --work_dir=DIR` (what `make demo` runs): raw text to a served model.

Runs the real command-line tools one after another, each in its own process, exactly as a
user would type them, on a small corpus built from the Python installation's own docs:

  1. data_pipelines.sample_corpus   corpus + a labelled task (reference vs library sentences)
  2. data_pipelines.make_vocab      WordPiece vocabulary (tensorflow-text learner)
  3. data_pipelines.make_pretrain   masked MLM+NSP TFRecords (Apache Beam, DirectRunner)
  4. garden.train bert_tiny.gin     a few hundred steps of BERT-tiny pretraining
                                    (garden.report draws its curves to bert_tiny/curves.png)
  5. garden.train classification    fine-tuning from that checkpoint + SavedModel export
  6. a fresh process loads the export and classifies raw sentences via serving_default
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLASSIFY_SNIPPET = r"""
import sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops the export uses
export_dir = sys.argv[1]
texts = sys.argv[2:]
loaded = tf.saved_model.load(export_dir)
out = loaded.signatures["serving_default"](text_a=tf.constant(texts))
for text, label, probs in zip(texts, out["label"].numpy(), out["probabilities"].numpy()):
    print(f"  {label.decode():>10s}  p={probs.max():.3f}  {text}")
"""


def _run(step: str, args, env=None) -> float:
    shown = " ".join("<script>" if "\n" in a else a for a in args)
    print(f"\n=== {step}\n$ {shown}", flush=True)
    start = time.time()
    proc = subprocess.run(args, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"demo step failed ({step}): exit code {proc.returncode}")
    took = time.time() - start
    print(f"=== {step}: done in {took:.0f}s", flush=True)
    return took


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="demo_out", help="where every output goes (wiped)")
    parser.add_argument("--vocab_size", type=int, default=4000)
    parser.add_argument("--dupe_factor", type=int, default=3)
    parser.add_argument("--pretrain_steps", type=int, default=300)
    parser.add_argument("--finetune_steps", type=int, default=200)
    args = parser.parse_args(argv)

    work = os.path.abspath(args.work_dir)
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    py = sys.executable
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
    corpus, task = os.path.join(work, "corpus"), os.path.join(work, "task")
    vocab = os.path.join(work, "vocab.txt")
    data = os.path.join(work, "pretrain_data")
    pretrain_dir, finetune_dir = os.path.join(work, "bert_tiny"), os.path.join(work, "classifier")
    export_base = os.path.join(work, "export")
    total = time.time()

    _run("1/6 sample corpus", [py, "-m", "data_pipelines.sample_corpus", f"--output={corpus}",
                               f"--task_output={task}"], env)
    _run("2/6 WordPiece vocabulary", [py, "-m", "data_pipelines.make_vocab",
                                      f"--input={corpus}/*.txt", f"--output={vocab}",
                                      f"--vocab_size={args.vocab_size}", "--lower_case"], env)
    _run("3/6 pretraining data (Beam)", [
        py, "-m", "data_pipelines.make_pretrain", "--objective=bert", f"--input={corpus}/*.txt",
        f"--output_dir={data}", f"--vocab={vocab}", "--max_seq_length=128",
        "--max_predictions_per_seq=20", f"--dupe_factor={args.dupe_factor}", "--num_shards=4"], env)
    _run("4/6 pretrain BERT-tiny", [
        py, "-m", "garden.train", "--config=configs/bert_tiny.gin", f"--model_dir={pretrain_dir}",
        f"--gin_param=VOCAB='{vocab}'", f"--gin_param=DATA_DIR='{data}'",
        f"--gin_param=train.train_steps={args.pretrain_steps}"], env)
    _run("4/6 (curves) render the pretraining curves",
         [py, "-m", "garden.report", f"--model_dir={pretrain_dir}"], env)
    _run("5/6 fine-tune + export", [
        py, "-m", "garden.train", "--config=configs/finetune/classification_tiny.gin",
        f"--model_dir={finetune_dir}", f"--gin_param=VOCAB='{vocab}'",
        f"--gin_param=TRAIN_FILE='{task}/train.tsv'", f"--gin_param=EVAL_FILE='{task}/dev.tsv'",
        f"--gin_param=INIT_CHECKPOINT='{pretrain_dir}'", f"--gin_param=EXPORT_BASE='{export_base}'",
        f"--gin_param=TRAIN_STEPS={args.finetune_steps}"], env)

    with open(os.path.join(finetune_dir, "summary.json")) as f:
        summary = json.load(f)
    accuracy, baseline = summary["eval_accuracy"], summary["majority_baseline_accuracy"]
    texts = [
        "The import statement binds a name in the local namespace.",
        "Return a new list containing all items from the iterable in ascending order.",
        "An expression statement evaluates the expression list.",
        "Open the file and return a stream; raise OSError upon failure.",
    ]
    _run("6/6 classify raw text with the export in a fresh process",
         [py, "-c", CLASSIFY_SNIPPET, summary["export_dir"], *texts], env)

    print(f"\nDemo finished in {time.time() - total:.0f}s. Fine-tuned accuracy {accuracy:.3f} vs "
          f"majority-class baseline {baseline:.3f}; SavedModel at {summary['export_dir']}")
    if accuracy <= baseline:
        print("error: the fine-tuned classifier does not beat the majority-class baseline",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
