"""Causal perplexity of a GPT-2 the garden trains, on held-out text (issue 36's goal): not a
speed benchmark.

    python -m benchmarks.lm_perplexity [--steps=300] [--work_dir=DIR] [--output_json=FILE]

The tiny GPT-2 (configs/gpt2_tiny.gin) is pretrained with garden.train on one file of the sample
corpus (benchmarks.objectives_learn.run_family: byte-level BPE vocabulary of 2,000 learnt by
make_vocab, make_pretrain --objective=gpt2, 128 tokens, batch 32), then `python -m
garden.analyze perplexity` scores the held-out corpus file's first --lines lines (a file the run
never read). Beside it, two baselines of the same pieces: the uniform distribution over the
vocabulary (perplexity = its size) and a unigram model of the training file's pieces with
add-one smoothing, scored on the same pieces the causal LM scores (every piece after a line's
first).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os

from benchmarks import common, objectives_learn
from benchmarks.common import log


def unigram_perplexity(tokenizer, train_lines, held_out_lines, vocab_size: int,
                       max_pieces: int) -> float:
    counts = collections.Counter(i for ids in tokenizer.tokenize(train_lines) for i in ids)
    total = sum(counts.values())
    nll, n = 0.0, 0
    for ids in tokenizer.tokenize(held_out_lines):
        for i in ids[1:max_pieces]:
            nll -= math.log((counts[i] + 1) / (total + vocab_size))
            n += 1
    return math.exp(nll / n)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lm_perplexity",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lines", type=int, default=500)
    p.add_argument("--work_dir", default=None)
    p.add_argument("--output_json", default=None)
    args = p.parse_args(argv)
    with common.work_dir(args.work_dir, "lm_perplexity_") as work:
        log(f"GPT-2 tiny: {args.steps} pretraining steps on the sample corpus' file 0")
        trained = objectives_learn.run_family("gpt2", work, steps=args.steps)
        files = objectives_learn.sample_corpus(work)
        held_out = files[objectives_learn.HELD_OUT]
        from garden import analyze, runs

        report = os.path.join(work, "report")
        assert analyze.main(["perplexity", f"--model={trained['model_dir']}",
                             f"--input={held_out}", f"--max_sentences={args.lines}",
                             "--max_seq_length=128", f"--output={report}"]) == 0
        with open(os.path.join(report, "perplexity.json")) as f:
            scored = json.load(f)
        run = runs.open(trained["model_dir"], who="benchmarks.lm_perplexity")
        tokenizer = run.text.tokenizer()
        with open(files[0], encoding="utf-8") as f:
            train_lines = [line.strip() for line in f if line.strip()]
        with open(held_out, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()][:args.lines]
        vocab_size = tokenizer.vocab.size
        result = {"steps": args.steps, "train_seconds": trained["train_seconds"],
                  "parameters": trained["parameters"], "held_out_file": held_out,
                  "lines": scored["lines"], "pieces_scored": scored["pieces_scored"],
                  "perplexity": scored["perplexity"], "uniform_perplexity": vocab_size,
                  "unigram_perplexity": unigram_perplexity(tokenizer, train_lines, lines,
                                                           vocab_size, 128)}
    common.print_report(result, args.output_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
