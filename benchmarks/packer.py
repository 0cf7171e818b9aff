"""The WordPiece packer's throughput: BERT's rules (text.wordpiece) against the
tensorflow-text FastBertTokenizer it replaced (issue 32), in one run on the same text.

    python -m benchmarks.packer [--vocab demo_out/vocab.txt] [--corpus_dir demo_out/corpus]

Both packers are garden.serving.text.TextPacker (BERT layout, max_seq_length 128, pairs of
consecutive lines as the classification task packs them) inside one tf.function per batch of
--batch_size pairs; "before" swaps the packer's tokenizer module for FastBertTokenizer. The
text is the demo corpus (generated when --corpus_dir is not given), the vocabulary learnt on it
as make demo learns it. Throughput is pairs per CPU-second of this process after a warm-up
batch; the rounds alternate between the two, and the median round is reported with the share of
pairs whose ids differ (texts with characters that FastBertTokenizer folds, e.g. "\u2026").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _lines(corpus_dir: str):
    out = []
    for name in sorted(os.listdir(corpus_dir)):
        with open(os.path.join(corpus_dir, name), encoding="utf-8") as f:
            out.extend(line.strip() for line in f if line.strip())
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.packer", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus_dir", default=None, help="corpus folder (default: generate the demo corpus)")
    p.add_argument("--vocab", default=None, help="WordPiece vocab.txt (default: learn 4000 pieces on the corpus)")
    p.add_argument("--batch_size", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_packer_") as work:
        corpus = args.corpus_dir or os.path.join(work, "corpus")
        if not args.corpus_dir:
            subprocess.run([sys.executable, "-m", "data_pipelines.sample_corpus", f"--output={corpus}"],
                           check=True, capture_output=True)
        vocab = args.vocab or os.path.join(work, "vocab.txt")
        if not args.vocab:
            subprocess.run([sys.executable, "-m", "data_pipelines.make_vocab", f"--input={corpus}/*.txt",
                            f"--output={vocab}", "--vocab_size=4000", "--lower_case"], check=True, capture_output=True)
        run(_lines(corpus), vocab, args.batch_size, args.rounds)


def run(lines, vocab_path: str, batch_size: int, rounds: int) -> None:
    import tensorflow as tf
    import tensorflow_text as tf_text

    from text import tokenizers, vocab_files
    from garden.serving.text import TextPacker

    tok = tokenizers.load_tokenizer("wordpiece", vocab_path, lower_case=True)
    after = TextPacker(tok, 128)
    before = TextPacker(tok, 128)
    fast = tf_text.FastBertTokenizer(vocab=tok.vocab.tokens, suffix_indicator="##", max_bytes_per_word=100,
                                     token_out_type=tf.int64, unknown_token=vocab_files.UNK,
                                     lower_case_nfd_strip_accents=True)
    before.tokenizer = lambda text: fast.tokenize(text)
    spec = [tf.TensorSpec([None], tf.string)] * 2
    calls = {name: tf.function(lambda a, b, p=packer: p(a, b)["token_ids"], input_signature=spec)
             for name, packer in (("before", before), ("after", after))}
    pairs = [(lines[i], lines[i + 1]) for i in range(0, len(lines) - 1, 2)]
    batches = [(tf.constant([a for a, _ in pairs[i:i + batch_size]]), tf.constant([b for _, b in pairs[i:i + batch_size]]))
               for i in range(0, len(pairs), batch_size)]
    print(f"{len(pairs)} pairs ({sum(len(a) + len(b) for a, b in pairs) / 1e6:.2f} MB), batches of {batch_size}, "
          f"{rounds} rounds; cpu count {os.cpu_count()}", flush=True)
    ids, rates = {}, {"before": [], "after": []}
    for name, call in calls.items():
        call(*batches[0])
        ids[name] = [call(a, b).numpy() for a, b in batches]
    for _ in range(rounds):
        for name, call in calls.items():
            cpu = time.process_time()
            for a, b in batches:
                call(a, b)
            rates[name].append(len(pairs) / (time.process_time() - cpu))
    differ = sum(int((x != y).any(axis=1).sum()) for x, y in zip(ids["before"], ids["after"]))
    b, a = statistics.median(rates["before"]), statistics.median(rates["after"])
    print("| packer | pairs per CPU-s (median of rounds) |\n|---|---|")
    print(f"| before: FastBertTokenizer | {b:.0f} |\n| after: BERT's rules | {a:.0f} |")
    print(f"after / before: {a / b:.2f}; pairs whose ids differ: {differ} of {len(pairs)}")


if __name__ == "__main__":
    main(sys.argv[1:])
