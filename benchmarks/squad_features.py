"""SQuAD feature creation: `make_finetune --task=question_answering` against Model Garden's
`official.nlp.data.create_finetuning_data --fine_tuning_task_type=squad`.

Both tools get the same SQuAD v1.1 JSON file and the same WordPiece vocabulary, with BERT's
defaults (max_seq_length 384, doc_stride 128, max_query_length 64, lower-casing), and write
TFRecords of one record per window. Each runs as its own process tree, measured from outside
with benchmarks/pretrain_data.py's `measure` (wall seconds; CPU seconds of the whole tree, the
Beam worker processes included; peak RSS):

- records written, read back with tf.data; the windows of the two outputs are compared record
  by record (token ids, segment ids, mask, start/end positions), which also shows that both
  made the same windows of the same file;
- records per CPU-second, the headline figure, and the ratio ours / Model Garden's;
- "net" rates: the same commands on a file of the first article only measure each tool's fixed
  cost (interpreter, TensorFlow, Beam, vocabulary), which is subtracted.

The file: the sample corpus (Python's own documentation, `data_pipelines.sample_corpus`) made
into SQuAD v1.1 by data_pipelines/sample_tasks/squad.py's cloze rule, with paragraphs of 6
sentences and 5 questions (about 76 words and 4.7 questions per paragraph; SQuAD v1.1's train
set: about 120 words and 4.6 questions) instead of the sample task's small defaults; --copies
regroups the sentences (shifted by one sentence per copy) for a larger file with other
paragraphs. SQuAD v1.1's train set has 87,599 questions; the default here has 9,723, --copies=8
about 78,000.

    python -m benchmarks.squad_features --output_json=/tmp/squad_features.json
    python -m benchmarks.squad_features --copies=8      # about SQuAD v1.1's size
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import shutil
import sys
import tempfile
from typing import Dict, List, Optional

from benchmarks import common
from benchmarks.common import log, write_report
from benchmarks.pretrain_data import measure, run_step

MAX_SEQ_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH = 384, 128, 64
SENTENCES_PER_PARAGRAPH, QUESTIONS_PER_PARAGRAPH = 6, 5
MODEL_GARDEN_MODULE = "official.nlp.data.create_finetuning_data"


def make_squad_file(path: str, copies: int) -> Dict[str, int]:
    """A SQuAD v1.1 file from the sample corpus (train split of the sample task's rule)."""
    from data_pipelines import sample_corpus
    from data_pipelines.sample_tasks import squad as sample_squad

    documents = sample_corpus.topic_documents() + sample_corpus.module_documents()
    data = []
    for copy in range(copies):
        built = sample_squad.build(documents, sentences_per_paragraph=SENTENCES_PER_PARAGRAPH,
                                   answerable=QUESTIONS_PER_PARAGRAPH, unanswerable=False,
                                   max_paragraphs={}, shift=copy, rule="cloze")
        for article in built["train"]["data"] + built["dev"]["data"]:
            for para in article["paragraphs"]:
                for qa in para["qas"]:
                    qa["id"] = f"{copy}/{qa['id']}"
            data.append({"title": f"{copy}/{article['title']}", "paragraphs": article["paragraphs"]})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": data}, f, ensure_ascii=False)
    paragraphs = [p for a in data for p in a["paragraphs"]]
    return {"articles": len(data), "paragraphs": len(paragraphs),
            "questions": sum(len(p["qas"]) for p in paragraphs),
            "context_words": sum(len(p["context"].split()) for p in paragraphs), "bytes": os.path.getsize(path)}


def first_article_file(path: str, out: str) -> None:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"version": doc["version"], "data": doc["data"][:1]}, f, ensure_ascii=False)


def model_garden_cmd(squad_file: str, vocab: str, out_dir: str) -> List[str]:
    return [sys.executable, "-m", MODEL_GARDEN_MODULE, "--fine_tuning_task_type=squad",
            f"--squad_data_file={squad_file}", f"--vocab_file={vocab}",
            f"--train_data_output_path={os.path.join(out_dir, 'train.tf_record')}",
            f"--meta_data_file_path={os.path.join(out_dir, 'meta.json')}",
            f"--max_seq_length={MAX_SEQ_LENGTH}", f"--doc_stride={DOC_STRIDE}",
            f"--max_query_length={MAX_QUERY_LENGTH}", "--do_lower_case=true",
            "--version_2_with_negative=false"]


def ours_cmd(squad_file: str, vocab: str, out_dir: str, workers: int) -> List[str]:
    mode = "in_memory" if workers == 1 else "multi_processing"
    return [sys.executable, "-m", "data_pipelines.make_finetune", "--task=question_answering",
            f"--input={squad_file}", f"--vocab={vocab}", f"--output_dir={out_dir}",
            f"--max_seq_length={MAX_SEQ_LENGTH}",
            f"--doc_stride={DOC_STRIDE}", f"--max_query_length={MAX_QUERY_LENGTH}", "--lower_case",
            "--num_shards=1", "--progress_seconds=0", f"--direct_num_workers={workers}",
            f"--direct_running_mode={mode}"]


def read_windows(files: List[str], names: Dict[str, str]) -> List[Dict[str, list]]:
    """Each record's token ids, segment ids, mask and positions, under our names. Parsed in
    batches of 1024 records (one record at a time took minutes at SQuAD's size); a feature's
    values are cut back to each record's own length, so records of different lengths compare
    as they are."""
    import tensorflow as tf

    spec = {theirs: tf.io.VarLenFeature(tf.int64) for theirs in names}
    out = []
    for batch in tf.data.TFRecordDataset(files).batch(1024).map(lambda r: tf.io.parse_example(r, spec)):
        columns = {}
        for theirs, ours in names.items():
            sparse = batch[theirs]
            lengths = tf.math.bincount(tf.cast(sparse.indices[:, 0], tf.int32),
                                       minlength=int(sparse.dense_shape[0])).numpy().tolist()
            dense = tf.sparse.to_dense(sparse).numpy().tolist()
            columns[ours] = [row[:n] for row, n in zip(dense, lengths)]
        out.extend(dict(zip(columns, values)) for values in zip(*columns.values()))
    return out


MG_NAMES = {"input_ids": "token_ids", "segment_ids": "segment_ids", "input_mask": "padding_mask",
            "start_positions": "start_position", "end_positions": "end_position"}
OUR_NAMES = {name: name for name in MG_NAMES.values()}


@dataclasses.dataclass
class Run:
    tool: str
    usage: object
    records: int


def run_both(squad_file: str, vocab: str, work: str, label: str, workers: int):
    mg_dir, our_dir = os.path.join(work, f"mg-{label}"), os.path.join(work, f"ours-{label}")
    os.makedirs(mg_dir, exist_ok=True)
    shutil.rmtree(our_dir, ignore_errors=True)
    mg = measure(model_garden_cmd(squad_file, vocab, mg_dir), f"model_garden {label}",
                 os.path.join(work, f"mg-{label}.log"))
    ours = measure(ours_cmd(squad_file, vocab, our_dir, workers), f"ours {label}",
                   os.path.join(work, f"ours-{label}.log"))
    mg_windows = read_windows([os.path.join(mg_dir, "train.tf_record")], MG_NAMES)
    our_windows = read_windows(sorted(glob.glob(os.path.join(our_dir, "train-*.tfrecord"))), OUR_NAMES)
    return Run("model_garden", mg, len(mg_windows)), Run("ours", ours, len(our_windows)), mg_windows, our_windows


def rate(records: int, cpu_s: float) -> float:
    return records / cpu_s if cpu_s > 0 else float("nan")


def _benchmark(args, work: str) -> dict:
    squad_file = os.path.join(work, "squad-v1.1.json")
    file_info = make_squad_file(squad_file, args.copies)
    log(f"SQuAD file {squad_file}: {file_info}")
    vocab = args.vocab
    if vocab is None:
        corpus = os.path.join(work, "corpus")
        run_step([sys.executable, "-m", "data_pipelines.sample_corpus", f"--output={corpus}"], "sample corpus")
        vocab = os.path.join(work, "vocab.txt")
        run_step([sys.executable, "-m", "data_pipelines.make_vocab", f"--input={corpus}/*.txt",
                  f"--output={vocab}", "--vocab_size=8000", "--lower_case"], "vocabulary")
    tiny = os.path.join(work, "startup.json")
    first_article_file(squad_file, tiny)
    mg0, ours0, _, _ = run_both(tiny, vocab, work, "startup", args.workers)
    mg, ours, mg_windows, our_windows = run_both(squad_file, vocab, work, "main", args.workers)
    equal = sum(a == b for a, b in zip(mg_windows, our_windows))
    report = {"file": file_info, "vocab": vocab, "workers": args.workers,
              "machine": common.machine_info(["tensorflow", "tensorflow-text", "apache-beam",
                                              "tf-models-official"]),
              "records_equal": equal, "runs": {}}
    for run, start in ((mg, mg0), (ours, ours0)):
        net_cpu = run.usage.cpu_s - start.usage.cpu_s
        report["runs"][run.tool] = {
            "records": run.records, "wall_s": run.usage.wall_s, "cpu_s": run.usage.cpu_s,
            "peak_rss_mib": run.usage.peak_rss_bytes / (1 << 20),
            "startup_cpu_s": start.usage.cpu_s, "startup_wall_s": start.usage.wall_s,
            "records_per_cpu_s": rate(run.records, run.usage.cpu_s),
            "net_records_per_cpu_s": rate(run.records - start.records, net_cpu),
            "other_load_cores": run.usage.other_load_cores}
    r = report["runs"]
    report["ratio_records_per_cpu_s"] = r["ours"]["records_per_cpu_s"] / r["model_garden"]["records_per_cpu_s"]
    report["ratio_net_records_per_cpu_s"] = (r["ours"]["net_records_per_cpu_s"]
                                             / r["model_garden"]["net_records_per_cpu_s"])
    log(f"records: Model Garden {mg.records}, ours {ours.records}; equal windows {equal}")
    for tool, x in r.items():
        log(f"{tool:>12}: {x['records']} records, wall {x['wall_s']:.1f} s, CPU {x['cpu_s']:.1f} s "
            f"(start-up {x['startup_cpu_s']:.1f}), {x['records_per_cpu_s']:.0f} records/CPU-s, "
            f"net {x['net_records_per_cpu_s']:.0f}, peak RSS {x['peak_rss_mib']:.0f} MiB")
    log(f"ours / Model Garden, records per CPU-second: {report['ratio_records_per_cpu_s']:.2f}x "
        f"(net of start-up: {report['ratio_net_records_per_cpu_s']:.2f}x)")
    return report


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.squad_features", description=__doc__.split("\n\n")[0])
    p.add_argument("--copies", type=int, default=1,
                   help="regroupings of the corpus in the file (1: about 10k questions; 8: about SQuAD v1.1)")
    p.add_argument("--vocab", default=None, help="WordPiece vocab.txt (default: learnt on the sample corpus, 8000)")
    p.add_argument("--workers", type=int, default=1, help="our --direct_num_workers (default %(default)s)")
    p.add_argument("--work_dir", default=None, help="keep inputs, outputs and logs here (default: a temp dir)")
    p.add_argument("--output_json", default=None)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
        return write_report(_benchmark(args, args.work_dir), args.output_json)
    with tempfile.TemporaryDirectory() as work:
        return write_report(_benchmark(args, work), args.output_json)


if __name__ == "__main__":
    main()
