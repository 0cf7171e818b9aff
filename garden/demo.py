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
  7. data_pipelines.sample_tasks     sample tasks from the same corpus: SQuAD v2.0 ("which
                                    module ?" relations + unanswerable) and CoNLL (keywords,
                                    modules, code names)
  8. data_pipelines.make_finetune    windowed SQuAD features (Apache Beam)
  9. garden.train qa_tiny            extractive QA fine-tuning from the pretraining checkpoint,
                                    null threshold tuned on held-out training paragraphs
 10. garden.train tagging_tiny       token tagging fine-tuning
 11. garden.serve                    the three exports behind TensorFlow Serving's REST API; a
                                    raw question is answered and a raw sentence tagged over HTTP
                                    (the equivalent curl commands are printed)
Each fine-tuning must beat its trivial baseline (majority class, always-null answer, all-O tags)
or the demo fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

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
    parser.add_argument("--qa_steps", type=int, default=300)
    parser.add_argument("--tagging_steps", type=int, default=300)
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

    _run("1/11 sample corpus", [py, "-m", "data_pipelines.sample_corpus", f"--output={corpus}",
                               f"--task_output={task}"], env)
    _run("2/11 WordPiece vocabulary", [py, "-m", "data_pipelines.make_vocab",
                                      f"--input={corpus}/*.txt", f"--output={vocab}",
                                      f"--vocab_size={args.vocab_size}", "--lower_case"], env)
    _run("3/11 pretraining data (Beam)", [
        py, "-m", "data_pipelines.make_pretrain", "--objective=bert", f"--input={corpus}/*.txt",
        f"--output_dir={data}", f"--vocab={vocab}", "--max_seq_length=128",
        "--max_predictions_per_seq=20", f"--dupe_factor={args.dupe_factor}", "--num_shards=4"], env)
    _run("4/11 pretrain BERT-tiny", [
        py, "-m", "garden.train", "--config=configs/bert_tiny.gin", f"--model_dir={pretrain_dir}",
        f"--gin_param=VOCAB='{vocab}'", f"--gin_param=DATA_DIR='{data}'",
        f"--gin_param=train.train_steps={args.pretrain_steps}"], env)
    _run("4/11 (curves) render the pretraining curves",
         [py, "-m", "garden.report", f"--model_dir={pretrain_dir}"], env)
    _run("5/11 fine-tune + export", [
        py, "-m", "garden.train", "--config=configs/finetune/classification_tiny.gin",
        f"--model_dir={finetune_dir}", f"--gin_param=VOCAB='{vocab}'",
        f"--gin_param=TRAIN_FILE='{task}/train.tsv'", f"--gin_param=EVAL_FILE='{task}/dev.tsv'",
        f"--gin_param=INIT_CHECKPOINT='{pretrain_dir}'", f"--gin_param=EXPORT_BASE='{export_base}'",
        f"--gin_param=TRAIN_STEPS={args.finetune_steps}"], env)

    summary = _summary(finetune_dir)
    texts = [
        "The import statement binds a name in the local namespace.",
        "Return a new list containing all items from the iterable in ascending order.",
        "An expression statement evaluates the expression list.",
        "Open the file and return a stream; raise OSError upon failure.",
    ]
    _run("6/11 classify raw text with the export in a fresh process",
         [py, "-c", CLASSIFY_SNIPPET, summary["export_dir"], *texts], env)

    tasks = os.path.join(work, "tasks")
    _run("7/11 sample QA and tagging tasks", [py, "-m", "data_pipelines.sample_tasks",
                                              f"--output={tasks}", "--kinds=squad,conll"], env)
    squad_dir, conll_dir = os.path.join(tasks, "squad"), os.path.join(tasks, "conll")
    qa_records = os.path.join(work, "squad_records")
    _run("8/11 SQuAD windows (Beam)", [
        py, "-m", "data_pipelines.make_finetune", "--task=squad",
        f"--input={squad_dir}/train-v2.0.json", f"--output_dir={qa_records}", f"--vocab={vocab}",
        "--max_seq_length=128", "--doc_stride=64", "--max_query_length=32", "--num_shards=2"], env)
    qa_dir, tagger_dir = os.path.join(work, "qa"), os.path.join(work, "tagger")
    _run("9/11 fine-tune extractive QA + export", [
        py, "-m", "garden.train", "--config=configs/finetune/qa_tiny.gin", f"--model_dir={qa_dir}",
        f"--gin_param=VOCAB='{vocab}'", f"--gin_param=TRAIN_FILE='{squad_dir}/train-v2.0.json'",
        f"--gin_param=TRAIN_RECORDS='{qa_records}'",
        f"--gin_param=EVAL_FILE='{squad_dir}/dev-v2.0.json'",
        f"--gin_param=INIT_CHECKPOINT='{pretrain_dir}'", f"--gin_param=EXPORT_BASE='{export_base}'",
        f"--gin_param=TRAIN_STEPS={args.qa_steps}"], env)
    _run("10/11 fine-tune token tagging + export", [
        py, "-m", "garden.train", "--config=configs/finetune/tagging_tiny.gin",
        f"--model_dir={tagger_dir}", f"--gin_param=VOCAB='{vocab}'",
        f"--gin_param=TRAIN_DATA='{conll_dir}/train.txt'",
        f"--gin_param=EVAL_DATA='{conll_dir}/dev.txt'",
        f"--gin_param=INIT_CHECKPOINT='{pretrain_dir}'", f"--gin_param=EXPORT_BASE='{export_base}'",
        f"--gin_param=TRAIN_STEPS={args.tagging_steps}"], env)
    qa, tagger = _summary(qa_dir), _summary(tagger_dir)
    answers = _serve_and_ask(py, env, work, [summary, qa, tagger])

    print(f"\nDemo finished in {time.time() - total:.0f}s.")
    results = [
        ("classifier accuracy", summary["eval_accuracy"], "majority class",
         summary["majority_baseline_accuracy"]),
        ("QA F1 (SQuAD v2.0 script)", qa["eval_f1"], "always-null", qa["null_baseline_f1"]),
        ("tagger entity F1 (seqeval)", tagger["eval_f1"], "all-O", tagger["all_o_baseline_f1"]),
    ]
    failed = False
    for what, score, baseline_name, baseline in results:
        verdict = "beats" if score > baseline else "DOES NOT BEAT"
        failed |= score <= baseline
        print(f"  {what:28s} {score:8.3f}  {verdict} the {baseline_name} baseline {baseline:.3f}")
    print(f"SavedModels under {export_base}; answers over HTTP: {json.dumps(answers)[:300]}")
    if failed:
        print("error: a fine-tuned model does not beat its trivial baseline", file=sys.stderr)
        return 1
    return 0


def _summary(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "summary.json")) as f:
        return json.load(f)


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def _serve_and_ask(py: str, env: dict, work: str, summaries) -> dict:
    """Step 11: garden.serve over the three exports (a model_config_file, as TF Serving takes
    it), one raw-text request per model over HTTP; returns the answers."""
    print("\n=== 11/11 garden.serve: the exports behind TensorFlow Serving's REST API", flush=True)
    models = {s["export_dir"].rstrip("/").split("/")[-2]: os.path.dirname(s["export_dir"].rstrip("/"))
              for s in summaries}
    config = os.path.join(work, "models.config")
    with open(config, "w") as f:
        f.write("model_config_list {\n" + "".join(
            f'  config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" }}\n'
            for name, base in models.items()) + "}\n")
    log_path = os.path.join(work, "serve.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([py, "-m", "garden.serve", "--rest_api_port=0",
                                   f"--model_config_file={config}"], cwd=REPO_ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, port = time.time() + 300, None
        while port is None:
            with open(log_path) as f:
                found = re.search(r"Exporting HTTP/REST API at:[\d.]+:(\d+)", f.read())
            if found:
                port = int(found.group(1))
            elif server.poll() is not None or time.time() > deadline:
                with open(log_path) as f:
                    print(f.read()[-3000:], file=sys.stderr)
                raise SystemExit("demo step failed (11/11 garden.serve): the server did not start")
            else:
                time.sleep(0.5)
        names = list(models)
        context = "Return a new file object for the path."
        requests = [
            (names[0], {"instances": [{"text_a": "Return the number of items in a container."}]}),
            (names[1], {"instances": [{"question": "which object ?",
                                       "context": context}]}),
            (names[2], {"instances": [{"sentences": "Use the json module and import os "
                                                    "before calling ArgumentParser."}]}),
        ]
        answers = {}
        for name, body in requests:
            url = f"http://127.0.0.1:{port}/v1/models/{name}:predict"
            print(f"$ curl -s -d '{json.dumps(body)}' {url}", flush=True)
            answers[name] = _post(url, body)
            print(json.dumps(answers[name], indent=1)[:1500], flush=True)
        return answers
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
