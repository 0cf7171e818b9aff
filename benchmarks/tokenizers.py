"""Tokenizer throughput: `python -m benchmarks.tokenizers [--mb=4]`.

Same text for every tokenizer: ``python -m data_pipelines.sample_corpus`` (Python's own
documentation, about 1 MB), its non-blank lines repeated up to --mb MB. Vocabularies are
learnt on it with ``data_pipelines.make_vocab`` (or given with --wordpiece_vocab etc.).

Pairs, each on the same vocabulary file and the same batches of --batch_size lines:

* wordpiece: ours (``tokenizers.load_tokenizer("wordpiece", ..., lower_case=True)``, end to
  end: lower-casing, accent stripping, basic tokenization, WordPiece, ids back as Python lists)
  against Hugging Face ``tokenizers`` BertWordPieceTokenizer(vocab.txt, lowercase=True)
  .encode_batch (no special tokens). Two rows for ours: ``tokenize`` (text.wordpiece,
  the ``tokenizers`` library, what the Beam job runs) and ``tokenize_in_graph`` (the graph
  module, what training and serving run; TensorFlow's import is not timed), the latter also
  against tensorflow-text's FastBertTokenizer, the graph's tokenizer before issue 32.
* sentencepiece (for information): ours (lower-casing + tensorflow-text SentencepieceTokenizer's
  1-best, SentencePiece's lattice Viterbi) against the sentencepiece Python library (str.lower +
  encode, its "optimized" encoder).
* bpe (for information): ours (GPT-2's pre-tokenizer and merges in core TF ops; keras-hub's
  BytePairTokenizer before issue 32) against Hugging Face ByteLevelBPETokenizer.encode_batch,
  cased (as RoBERTa/GPT-2).

Throughput is MB of UTF-8 text per CPU-second of this process (time.process_time, which
counts every thread: Hugging Face tokenizers encodes a batch on several threads) after one
warm-up batch, with Python's garbage collector off while timing (as timeit does); wall MB/s
is printed too. "same ids" is the share of lines whose ids agree.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

from text import tokenizers, utf8, vocab_files


def _corpus_lines(corpus_dir: str, mb: float) -> List[str]:
    lines: List[str] = []
    for name in sorted(os.listdir(corpus_dir)):
        with open(os.path.join(corpus_dir, name), encoding="utf-8") as f:
            lines.extend(line.strip() for line in f if line.strip())
    target, out, size = mb * 1e6, [], 0
    while size < target:
        for line in lines:
            out.append(line)
            size += len(line.encode("utf-8")) + 1
            if size >= target:
                break
    return out


def _make_vocab(kind: str, corpus_dir: str, output: str, vocab_size: int, lower_case: bool) -> str:
    cmd = [sys.executable, "-m", "data_pipelines.make_vocab", f"--tokenizer={kind}",
           f"--input={corpus_dir}/*.txt", f"--output={output}", f"--vocab_size={vocab_size}"]
    subprocess.run(cmd + (["--lower_case"] if lower_case else []), check=True, capture_output=True)
    return output


def _lists(ids) -> List[List[int]]:
    return utf8.ragged_to_lists(ids.flat_values.numpy(), ids.row_splits.numpy())


def measure(fn: Callable[[Sequence[str]], List[List[int]]], batches: List[List[str]]) -> Dict:
    fn(batches[0])  # warm-up: tracing, caches, thread pools
    # The ids are kept (to compare the two tokenizers); with the garbage collector on, its
    # passes over the growing list of lists cost more than a fast tokenizer itself (ours
    # measured 9 instead of 26 MB per CPU-second), so it is off while timing, as in timeit.
    gc.collect()
    gc.disable()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        ids = []
        for batch in batches:
            ids.extend(fn(batch))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        gc.enable()
    return {"cpu_s": cpu, "wall_s": wall, "ids": ids}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tokenizers", description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=4.0, help="MB of text to tokenize (the sample corpus repeated)")
    p.add_argument("--batch_size", type=int, default=4096, help="lines per tokenize call")
    p.add_argument("--corpus_dir", default=None, help="corpus folder (default: generate the sample corpus)")
    p.add_argument("--wordpiece_vocab", default=None)
    p.add_argument("--sentencepiece_model", default=None)
    p.add_argument("--bpe_vocab", default=None, help="vocab.json (merges.txt beside it)")
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--kinds", default="wordpiece,sentencepiece,bpe")
    p.add_argument("--output_json", default=None)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_tokenizers_") as work:
        run(args, work)


def run(args, work: str) -> None:
    corpus_dir = args.corpus_dir
    if corpus_dir is None:
        corpus_dir = os.path.join(work, "corpus")
        subprocess.run([sys.executable, "-m", "data_pipelines.sample_corpus", f"--output={corpus_dir}"],
                       check=True, capture_output=True)
    lines = _corpus_lines(corpus_dir, args.mb)
    mb = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    batches = [lines[i:i + args.batch_size] for i in range(0, len(lines), args.batch_size)]
    print(f"text: {len(lines)} lines, {mb:.2f} MB (UTF-8, newlines excluded), batches of {args.batch_size}; "
          f"cpu count {os.cpu_count()}", flush=True)

    kinds = args.kinds.split(",")
    rows = []
    if "wordpiece" in kinds:
        from tokenizers import BertWordPieceTokenizer

        path = args.wordpiece_vocab or _make_vocab("wordpiece", corpus_dir, os.path.join(work, "vocab.txt"),
                                                   args.vocab_size, True)
        ours = tokenizers.load_tokenizer("wordpiece", path, lower_case=True)
        hf = BertWordPieceTokenizer(path, lowercase=True)
        hf_ids = measure(lambda b: [e.ids for e in hf.encode_batch(b, add_special_tokens=False)], batches)
        rows.append(("wordpiece", ours.vocab.size, measure(ours.tokenize, batches), hf_ids,
                     "HF tokenizers BertWordPiece"))
        graph = measure(ours.tokenize_in_graph, batches)
        rows.append(("wordpiece in-graph", ours.vocab.size, graph, hf_ids, "HF tokenizers BertWordPiece"))
        # What the graph ran before issue 32: one fused op, but NFKC-style folding (not BERT's
        # rules). The ratio is the price of BERT's normalisation in core ops.
        import tensorflow as tf
        import tensorflow_text as tf_text

        fast = tf_text.FastBertTokenizer(vocab=ours.vocab.tokens, suffix_indicator="##", max_bytes_per_word=100,
                                         token_out_type=tf.int64, unknown_token=vocab_files.UNK,
                                         lower_case_nfd_strip_accents=True)
        rows.append(("wordpiece in-graph", ours.vocab.size, graph,
                     measure(lambda b: _lists(fast.tokenize(tf.constant(b))), batches),
                     "tensorflow-text FastBertTokenizer (before issue 32)"))
    if "sentencepiece" in kinds:
        import sentencepiece as spm

        path = args.sentencepiece_model or _make_vocab("sentencepiece", corpus_dir, os.path.join(work, "sp.model"),
                                                       args.vocab_size, True)
        ours = tokenizers.load_tokenizer("sentencepiece", path, lower_case=True)
        sp = spm.SentencePieceProcessor(model_file=path)
        rows.append(("sentencepiece", ours.vocab.size,
                     measure(ours.tokenize, batches),
                     measure(lambda b: sp.encode([t.lower() for t in b]), batches),
                     "sentencepiece python"))
    if "bpe" in kinds:
        from tokenizers import ByteLevelBPETokenizer

        path = args.bpe_vocab or _make_vocab("bpe", corpus_dir, os.path.join(work, "bpe", "vocab.json"),
                                             args.vocab_size, False)
        ours = tokenizers.load_tokenizer("bpe", path, lower_case=False)
        vocab_json, merges = vocab_files.bpe_files(path)
        hf = ByteLevelBPETokenizer(vocab_json, merges)
        rows.append(("bpe", ours.vocab.size,
                     measure(ours.tokenize, batches),
                     measure(lambda b: [e.ids for e in hf.encode_batch(b)], batches),
                     "HF tokenizers ByteLevelBPE"))

    print()
    print("| kind | vocab | ours MB/CPU-s | peer MB/CPU-s | ratio (CPU) | ours MB/s wall | peer MB/s wall "
          "| same ids | peer |")
    print("|---|---|---|---|---|---|---|---|---|")
    report = []
    for kind, size, ours_m, peer_m, peer_name in rows:
        same = sum(a == b for a, b in zip(ours_m["ids"], peer_m["ids"])) / len(lines)
        r = {"kind": kind, "vocab_size": size, "mb": mb, "peer": peer_name,
             "ours_mb_per_cpu_s": mb / ours_m["cpu_s"], "peer_mb_per_cpu_s": mb / peer_m["cpu_s"],
             "ours_mb_per_wall_s": mb / ours_m["wall_s"], "peer_mb_per_wall_s": mb / peer_m["wall_s"],
             "same_ids": same}
        r["ratio_cpu"] = r["ours_mb_per_cpu_s"] / r["peer_mb_per_cpu_s"]
        report.append(r)
        print(f"| {kind} | {size} | {r['ours_mb_per_cpu_s']:.2f} | {r['peer_mb_per_cpu_s']:.2f} | "
              f"{r['ratio_cpu']:.1f}x | {r['ours_mb_per_wall_s']:.2f} | {r['peer_mb_per_wall_s']:.2f} | "
              f"{same:.1%} | {peer_name} |")
    if args.output_json:
        with open(args.output_json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
