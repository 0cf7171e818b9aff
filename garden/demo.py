"""`python -m garden.demo --work_dir=DIR` (what `make demo` runs): raw text to a served model.

Runs the real command-line tools, each in its own process, exactly as a user would type them,
on a small corpus built from the Python installation's own docs. Steps that do not depend on
each other run side by side (the vocabulary beside the task sampling, pretraining beside the
SQuAD windows, the three fine-tunings together); `--full` runs them one after another with
more data and steps. Each step's time is printed, and a table at the end gives every step's
seconds and each fine-tuned model's metric against its trivial baseline.

  1. data_pipelines.sample_corpus   corpus + a labelled task (reference vs library sentences)
  2. data_pipelines.make_vocab      WordPiece vocabulary (tensorflow-text learner)
  3. data_pipelines.make_pretrain   masked MLM+NSP TFRecords (Apache Beam, DirectRunner)
  4. garden.train bert_tiny.gin     300 steps of BERT-tiny pretraining (--full: 1000)
                                    (garden.curves draws its curves to bert_tiny/curves.png)
  5. garden.train classification    fine-tuning from that checkpoint + SavedModel export
                                    (after 10: garden.curves draws the three fine-tuning runs'
                                    loss and eval/ scores to each run's curves.png)
  6. a fresh process loads the export and classifies raw sentences via serving_default
  7. data_pipelines.sample_tasks     sample tasks from the same corpus: SQuAD v2.0 ("which
                                    module ?" relations + unanswerable) and CoNLL (keywords,
                                    modules, code names)
  8. data_pipelines.make_finetune    windowed SQuAD features (Apache Beam)
  9. garden.train question_answering_tiny
                                    extractive QA fine-tuning from the pretraining checkpoint,
                                    null threshold tuned on held-out training paragraphs
 10. garden.train tagging_tiny       token tagging fine-tuning
 11. garden.serve                    the three exports behind TensorFlow Serving's REST and gRPC
                                    APIs: a raw question answered and a raw sentence tagged over
                                    HTTP (the equivalent curl commands are printed), a sentence
                                    classified over gRPC with tensorflow-serving-api's stub
Each fine-tuning must beat its trivial baseline (majority class, always-null answer, all-O tags)
or the demo fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Sequence

from text import onednn

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A TF Serving gRPC client as production code writes it: tensorflow-serving-api's stub.
GRPC_SNIPPET = r"""
import sys
import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
address, model, text = sys.argv[1:4]
stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(address))
request = predict_pb2.PredictRequest()
request.model_spec.name = model  # signature_name "" = serving_default, the latest version
request.inputs["text_a"].CopyFrom(tf.make_tensor_proto([text]))
response = stub.Predict(request, timeout=60)
label = tf.make_ndarray(response.outputs["label"])[0].decode()
probabilities = tf.make_ndarray(response.outputs["probabilities"])[0]
print(f"  gRPC Predict {model} v{response.model_spec.version.value}: {label} "
      f"p={probabilities.max():.3f}  {text}")
"""

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


@dataclasses.dataclass
class Step:
    """One demo step: a command line (run in its own process), its wall time once run."""

    name: str
    args: List[str]
    seconds: float = 0.0


def _shown(args) -> str:
    return " ".join("<script>" if "\n" in a else a for a in args)


def _run(step: Step, env) -> Step:
    """Runs one step in the foreground, its output on the console."""
    print(f"\n=== {step.name}\n$ {_shown(step.args)}", flush=True)
    start = time.time()
    proc = subprocess.run(step.args, cwd=REPO_ROOT, env=env)
    step.seconds = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"demo step failed ({step.name}): exit code {proc.returncode}")
    print(f"=== {step.name}: done in {step.seconds:.0f}s", flush=True)
    return step


def _run_together(steps: Sequence[Step], env, log_dir: str) -> None:
    """Runs independent steps side by side (each in its own process, its output to
    <log_dir>/<n>.log, shown whole when it ends). Most of a tiny model's fine-tuning is
    single-threaded start-up, tracing, evaluation and export, so two cores finish three such
    runs in well under the sum of their times."""
    running = []
    for n, step in enumerate(steps):
        print(f"\n=== {step.name} (started; runs beside the others)\n$ {_shown(step.args)}",
              flush=True)
        log_path = os.path.join(log_dir, f"step-{n}.log")
        log = open(log_path, "w")
        running.append((step, subprocess.Popen(step.args, cwd=REPO_ROOT, env=env, stdout=log,
                                               stderr=subprocess.STDOUT), log, log_path,
                        time.time()))
    failed = []
    while running:
        for entry in list(running):
            step, proc, log, log_path, start = entry
            if proc.poll() is None:
                continue
            running.remove(entry)
            step.seconds = time.time() - start
            log.close()
            with open(log_path) as f:
                output = f.read()
            print(f"\n=== {step.name}: output", flush=True)
            print(output.rstrip(), flush=True)
            if proc.returncode != 0:
                failed.append(f"{step.name}: exit code {proc.returncode} (log {log_path})")
            else:
                print(f"=== {step.name}: done in {step.seconds:.0f}s", flush=True)
        time.sleep(0.2)
    if failed:
        raise SystemExit("demo step failed (" + "; ".join(failed) + ")")


def _parse(argv) -> argparse.Namespace:
    from text.flags import add_bool

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", default="demo_out", help="where every output goes (wiped)")
    add_bool(parser, "full", False,
             "the full-length run: more pretraining data (dupe_factor 5) and steps (1000), "
             "longer fine-tuning, every step one after the other with its output live "
             "(several times the default's time)")
    parser.add_argument("--vocab_size", type=int, default=4000)
    parser.add_argument("--dupe_factor", type=int, default=None, help="default 3; --full 5")
    parser.add_argument("--pretrain_steps", type=int, default=None, help="default 300; --full 1000")
    parser.add_argument("--finetune_steps", type=int, default=None, help="default 150; --full 300")
    parser.add_argument("--qa_steps", type=int, default=None, help="default 300; --full 600")
    parser.add_argument("--tagging_steps", type=int, default=None, help="default 200; --full 500")
    args = parser.parse_args(argv)
    for name, quick, full in (("dupe_factor", 3, 5), ("pretrain_steps", 300, 1000),
                              ("finetune_steps", 150, 300), ("qa_steps", 300, 600),
                              ("tagging_steps", 200, 500)):
        if getattr(args, name) is None:
            setattr(args, name, full if args.full else quick)
    return args


def _paths(work: str) -> Dict[str, str]:
    """Every path of the demo under `work`."""
    names = dict(corpus="corpus", task="task", vocab="vocab.txt", data="pretrain_data",
                 pretrain="bert_tiny", classifier="classifier", export="export", tasks="tasks",
                 squad="tasks/squad", conll="tasks/conll", qa_records="squad_records",
                 qa="qa", tagger="tagger")
    return {key: os.path.join(work, name) for key, name in names.items()}


def _data_steps(args, p: Dict[str, str], py: str, run, together) -> List[Step]:
    """Steps 1-4 and 7-8: corpus, vocabulary, pretraining data, pretraining, the sample QA and
    tagging tasks and the SQuAD windows (independent ones side by side)."""
    steps = [run(Step("1/11 sample corpus", [
        py, "-m", "data_pipelines.sample_corpus", f"--output={p['corpus']}",
        f"--task_output={p['task']}"]))]
    vocab_step = Step("2/11 WordPiece vocabulary", [
        py, "-m", "data_pipelines.make_vocab", f"--input={p['corpus']}/*.txt",
        f"--output={p['vocab']}", f"--vocab_size={args.vocab_size}", "--lower_case"])
    tasks_step = Step("7/11 sample QA and tagging tasks", [
        py, "-m", "data_pipelines.sample_tasks", f"--output={p['tasks']}", "--kinds=squad,conll"])
    together([vocab_step, tasks_step])
    steps += [vocab_step, tasks_step]
    steps.append(run(Step("3/11 pretraining data (Beam)", [
        py, "-m", "data_pipelines.make_pretrain", "--objective=bert",
        f"--input={p['corpus']}/*.txt", f"--output_dir={p['data']}", f"--vocab={p['vocab']}",
        "--max_seq_length=128", "--max_predictions_per_seq=20",
        f"--dupe_factor={args.dupe_factor}", "--num_shards=4"])))
    squad_step = Step("8/11 SQuAD windows (Beam)", [
        py, "-m", "data_pipelines.make_finetune", "--task=question_answering",
        f"--input={p['squad']}/train-v2.0.json", f"--output_dir={p['qa_records']}",
        f"--vocab={p['vocab']}", "--max_seq_length=128", "--doc_stride=64",
        "--max_query_length=32", "--num_shards=2"])
    pretrain_step = Step("4/11 pretrain BERT-tiny", [
        py, "-m", "garden.train", "--config=configs/bert_tiny.gin",
        f"--model_dir={p['pretrain']}", f"--gin_param=VOCAB='{p['vocab']}'",
        f"--gin_param=DATA_DIR='{p['data']}'",
        f"--gin_param=train.train_steps={args.pretrain_steps}"])
    together([pretrain_step, squad_step])
    return steps + [pretrain_step, squad_step]


def _finetune_steps(args, p: Dict[str, str], py: str) -> List[Step]:
    """Steps 4 (curves), 5, 9 and 10: independent of each other, run side by side."""
    def finetune(name, config, model_dir, steps, *files):
        return Step(name, [
            py, "-m", "garden.train", f"--config=configs/finetune/{config}",
            f"--model_dir={model_dir}", f"--gin_param=VOCAB='{p['vocab']}'", *files,
            f"--gin_param=INIT_CHECKPOINT='{p['pretrain']}'",
            f"--gin_param=EXPORT_BASE='{p['export']}'", f"--gin_param=TRAIN_STEPS={steps}"])

    return [
        Step("4/11 (curves) render the pretraining curves",
             [py, "-m", "garden.curves", f"--model_dir={p['pretrain']}"]),
        finetune("5/11 fine-tune a classifier + export", "classification_tiny.gin",
                 p["classifier"], args.finetune_steps,
                 f"--gin_param=TRAIN_FILE='{p['task']}/train.tsv'",
                 f"--gin_param=EVAL_FILE='{p['task']}/dev.tsv'"),
        finetune("9/11 fine-tune extractive QA + export", "question_answering_tiny.gin", p["qa"],
                 args.qa_steps,
                 f"--gin_param=TRAIN_FILE='{p['squad']}/train-v2.0.json'",
                 f"--gin_param=TRAIN_RECORDS='{p['qa_records']}'",
                 f"--gin_param=EVAL_FILE='{p['squad']}/dev-v2.0.json'"),
        finetune("10/11 fine-tune token tagging + export", "tagging_tiny.gin", p["tagger"],
                 args.tagging_steps, f"--gin_param=TRAIN_DATA='{p['conll']}/train.txt'",
                 f"--gin_param=EVAL_DATA='{p['conll']}/dev.txt'"),
    ]


TEXTS = [
    "The import statement binds a name in the local namespace.",
    "Return a new list containing all items from the iterable in ascending order.",
    "An expression statement evaluates the expression list.",
    "Open the file and return a stream; raise OSError upon failure.",
]


def main(argv=None) -> int:
    args = _parse(argv)
    work = os.path.abspath(args.work_dir)
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    p, py = _paths(work), sys.executable
    # The steps inherit TF_CPP_MIN_LOG_LEVEL: on a CPU-only host the garden set it to 3 when
    # this process imported text/ (text/tf_logging.py), on a GPU host the demo keeps its 2 (no
    # INFO, no WARNING); a value the user set is kept (TF_CPP_MIN_LOG_LEVEL=0 shows it all).
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = lambda step: _run(step, env)  # noqa: E731
    # Run sequentially with --full (each step's output live); side by side where independent
    # otherwise.
    together = (lambda steps: [run(s) for s in steps]) if args.full else \
        (lambda steps: _run_together(steps, env, work))
    total = time.time()
    print(f"garden demo ({'full-length' if args.full else 'default; --full for the full-length run'}) "
          f"in {work}; {onednn.state()}", flush=True)

    steps = _data_steps(args, p, py, run, together)
    finetuning = _finetune_steps(args, p, py)
    together(finetuning)
    steps += finetuning
    _, classify_step, qa_step, tagging_step = finetuning
    summary, qa, tagger = _summary(p["classifier"]), _summary(p["qa"]), _summary(p["tagger"])
    # One garden.curves process for the three fine-tuning runs (loss, and eval/ at the end),
    # beside step 6: a second TensorFlow start-up on the idle core, not a step of its own.
    after = [Step("6/11 classify raw text with the export in a fresh process",
                  [py, "-c", CLASSIFY_SNIPPET, summary["export_dir"], *TEXTS]),
             Step("10/11 (curves) render the three fine-tuning runs' curves",
                  [py, "-m", "garden.curves", *(f"--model_dir={p[k]}"
                                                for k in ("classifier", "qa", "tagger"))])]
    together(after)
    steps += after
    serve_step = Step("11/11 garden.serve: the exports over REST and gRPC", [])
    start = time.time()
    answers = _serve_and_ask(py, env, work, [summary, qa, tagger])
    serve_step.seconds = time.time() - start
    steps.append(serve_step)

    results = {
        classify_step.name: ("accuracy", summary["eval_accuracy"], "majority class",
                             summary["majority_baseline_accuracy"]),
        qa_step.name: ("F1 (SQuAD v2.0 script)", qa["eval_f1"], "always-null",
                       qa["null_baseline_f1"]),
        tagging_step.name: ("entity F1 (seqeval)", tagger["eval_f1"], "all-O",
                            tagger["all_o_baseline_f1"]),
    }
    failed = _print_table(steps, results, time.time() - total)
    print(f"SavedModels under {p['export']}; answers over HTTP and gRPC: "
          f"{json.dumps(answers)[:300]}")
    if failed:
        print("error: a fine-tuned model does not beat its trivial baseline", file=sys.stderr)
        return 1
    return 0


def _print_table(steps, results, wall: float) -> bool:
    """The summary: each step's seconds, and the fine-tuned models' metric against their
    baseline. Returns whether a model failed to beat its baseline. Steps run side by side have
    overlapping seconds, so the column adds up to more than the wall time."""
    print(f"\nDemo finished in {wall:.0f}s (wall). Steps (those run side by side overlap):")
    width = max(len(step.name) for step in steps)
    print(f"  {'step':{width}s} {'seconds':>7s}  metric vs baseline")
    failed = False
    for step in sorted(steps, key=lambda s: int(s.name.split("/")[0])):  # stable: 4 then its curves
        line = f"  {step.name:{width}s} {step.seconds:7.0f}"
        if step.name in results:
            metric, score, baseline_name, baseline = results[step.name]
            verdict = "beats" if score > baseline else "DOES NOT BEAT"
            failed |= score <= baseline
            line += f"  {metric} {score:.3f} {verdict} {baseline_name} {baseline:.3f}"
        print(line)
    return failed


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
    print("\n=== 11/11 garden.serve: the exports behind TensorFlow Serving's REST and gRPC APIs",
          flush=True)
    models = {s["export_dir"].rstrip("/").split("/")[-2]: os.path.dirname(s["export_dir"].rstrip("/"))
              for s in summaries}
    config = os.path.join(work, "models.config")
    with open(config, "w") as f:
        f.write("model_config_list {\n" + "".join(
            f'  config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" }}\n'
            for name, base in models.items()) + "}\n")
    log_path = os.path.join(work, "serve.log")
    with open(log_path, "w") as log:
        server = subprocess.Popen([py, "-m", "garden.serve", "--rest_api_port=0", "--port=0",
                                   f"--model_config_file={config}"], cwd=REPO_ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, port, grpc_port = time.time() + 300, None, None
        while port is None or grpc_port is None:
            with open(log_path) as f:
                log_text = f.read()
            found = re.search(r"Exporting HTTP/REST API at:[\d.]+:(\d+)", log_text)
            found_grpc = re.search(r"Running gRPC ModelServer at [\d.]+:(\d+)", log_text)
            if found and found_grpc:
                port, grpc_port = int(found.group(1)), int(found_grpc.group(1))
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
        # The same classifier through TF Serving's gRPC API, with the stock client stub.
        address = f"127.0.0.1:{grpc_port}"
        print(f"$ python -c <gRPC client: tensorflow-serving-api's PredictionServiceStub> "
              f"{address} {names[0]} ...\n{GRPC_SNIPPET.strip()}", flush=True)
        text = "Return the number of items in a container."
        proc = subprocess.run([py, "-c", GRPC_SNIPPET, address, names[0], text], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"demo step failed (11/11 gRPC Predict): {proc.stderr[-2000:]}")
        print(proc.stdout.rstrip(), flush=True)
        answers[f"{names[0]} (gRPC)"] = proc.stdout.strip()
        return answers
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
