"""Throughput of every make_pretrain objective on the same corpus, one process tree each.

For each objective: its default tokenizer kind (vocabulary learned once per kind by
make_vocab), its published defaults except the sequence length (--max_seq_length, 128 by
default, T5's --inputs_length) and dupe_factor 1, one DirectRunner worker. Measured from
outside with benchmarks.pretrain_data.measure (wall, CPU of the whole process tree, peak RSS).

    python -m benchmarks.objectives_data [--objectives=bert,t5] [--repeat_corpus=2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks import common
from benchmarks import pretrain_data as pd

KIND_OUTPUT = {"wordpiece": "vocab.txt", "sentencepiece": "spm.model", "bpe": os.path.join("bpe", "vocab.json")}
KIND = {"bert": "wordpiece", "albert": "sentencepiece", "roberta": "bpe", "spanbert": "wordpiece",
        "ernie": "wordpiece", "electra": "wordpiece", "xlnet": "sentencepiece", "t5": "sentencepiece",
        "bart": "bpe", "gpt2": "bpe"}


def length_flags(name: str, length: int):
    if name == "t5":
        return [f"--inputs_length={length}"]
    if name == "xlnet":
        return [f"--max_seq_length={length}", f"--reuse_len={length // 2}", f"--num_predict={max(1, length * 85 // 512)}"]
    flags = [f"--max_seq_length={length}"]
    if name in ("bert", "albert", "ernie"):
        flags.append("--max_predictions_per_seq=20")
    if name == "spanbert":
        flags.append(f"--max_predictions_per_seq={int(0.15 * length) + 2}")
    return flags


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.objectives_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--objectives", default=",".join(KIND))
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--repeat_corpus", type=int, default=1)
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--work_dir")
    p.add_argument("--output_json")
    args = p.parse_args(argv)
    names = [n for n in args.objectives.split(",") if n]
    with common.work_dir(args.work_dir, "bench_objectives_") as work_dir:
        corpus_args = argparse.Namespace(corpus_dir=None, corpus_pattern="corpus-*.txt",
                                         repeat_corpus=args.repeat_corpus)
        corpus = pd.prepare_corpus(corpus_args, work_dir)
        pd.log(f"corpus: {corpus.bytes / pd.MIB:.1f} MiB, {corpus.documents} documents, {corpus.lines} sentences")
        vocabs = {}
        for kind in sorted({KIND[n] for n in names}):
            path = os.path.join(work_dir, KIND_OUTPUT[kind])
            pd.run_step([sys.executable, "-m", "data_pipelines.make_vocab", f"--tokenizer={kind}",
                         f"--input={corpus.source_pattern}", f"--output={path}",
                         f"--vocab_size={args.vocab_size}", *(["--lower_case"] if kind == "wordpiece" else [])],
                        f"{kind} vocabulary")
            vocabs[kind] = path
        rows = []
        for name in names:
            out = os.path.join(work_dir, f"out_{name}")
            cmd = [sys.executable, "-m", "data_pipelines.make_pretrain", f"--objective={name}",
                   f"--input={corpus.pattern}", f"--output_dir={out}", f"--vocab={vocabs[KIND[name]]}",
                   "--dupe_factor=1", "--num_shards=2", "--overwrite", "--direct_num_workers=1",
                   *length_flags(name, args.max_seq_length)]
            usage = pd.measure(cmd, name, os.path.join(work_dir, f"{name}.log"))
            with open(os.path.join(out, "stats.json")) as f:
                stats = json.load(f)
            row = {"objective": name, "tokenizer": KIND[name], "instances": stats["instances"],
                   "wall_s": usage.wall_s, "cpu_s": usage.cpu_s, "peak_rss_mib": usage.peak_rss_bytes / pd.MIB,
                   "instances_per_cpu_s": stats["instances"] / max(usage.cpu_s, 1e-9),
                   "corpus_mib_per_cpu_s": corpus.bytes / pd.MIB / max(usage.cpu_s, 1e-9)}
            rows.append(row)
            pd.log(f"{name}: {row['instances']} instances, {row['cpu_s']:.1f} CPU s, "
                   f"{row['instances_per_cpu_s']:.0f} inst/CPU-s, peak RSS {row['peak_rss_mib']:.0f} MiB")
        header = ["objective", "tokenizer", "instances", "wall s", "CPU s", "inst/CPU-s", "MiB text/CPU-s", "peak RSS MiB"]
        table = [[r["objective"], r["tokenizer"], str(r["instances"]), f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                  f"{r['instances_per_cpu_s']:.0f}", f"{r['corpus_mib_per_cpu_s']:.3f}", f"{r['peak_rss_mib']:.0f}"]
                 for r in rows]
        print()
        print(f"make_pretrain throughput per objective: sequence length {args.max_seq_length}, dupe_factor 1, "
              f"1 worker, corpus {corpus.bytes / pd.MIB:.1f} MiB (startup included)")
        print("\n".join(pd._columns(header, table)))
        result = {"rows": rows, "corpus_bytes": corpus.bytes, "machine": pd.machine_info()}
        if args.output_json:
            with open(args.output_json, "w") as f:
                json.dump(result, f, indent=2)
        return result


if __name__ == "__main__":
    main()
