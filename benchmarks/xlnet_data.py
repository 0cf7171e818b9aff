"""XLNet pretraining data: our Beam job against Model Garden's create_xlnet_pretraining_data.

Both tools get the same corpus files (data_pipelines.sample_corpus, --repeat_corpus k times
longer) and the same SentencePiece model, learnt here on the corpus in XLNet's released layout
(<unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop> = ids 0..8, what Model Garden hard-codes
in its ``special_symbols``; our tokenizer reads <cls>/<sep>/<eod> by name). Nothing is
downloaded. Timed, each as its own process tree measured from outside with
benchmarks.pretrain_data.measure (CPU = user + sys of the tree, wall, peak RSS), one worker each:

1. ours: ``python -m data_pipelines.make_pretrain --objective=xlnet`` (DirectRunner in_memory,
   1 worker). Its records hold everything a training step needs: tokens, segment ids, targets
   and the factorization order (``perm_rank``, one [seq_len] vector per instance, drawn
   offline) from which the trainer expands the [seq_len, seq_len] permutation mask and the
   target_mapping in its step (garden/tasks/pretraining/xlnet.py).
2. Model Garden, creation: ``python -m official.nlp.data.create_xlnet_pretraining_data``
   (--bi_data=False, --per_host_batch_size=1: one stream, as ours; cased, <eod> on). Its
   records hold tokens, segment ids and word boundaries only: no targets, no masks.
3. Model Garden, loader: ``official.nlp.data.pretrain_dataloader.XLNetPretrainDataLoader``
   over all of step 2's output once (is_training=False, no drop_remainder), in its own process
   (this module with --mg_loader_input); it samples the targets and the permutation masks on
   the fly, as Model Garden does in every training epoch. Its process also reports its own CPU
   seconds before the first batch (imports, graph) and while iterating.

The fair figure is ours against Model Garden's creation + loader (both then have the same
content: targets and masks); ours against the creation alone is printed too. With
--measure_startup (default) each of 1 and 2 is also run on 2 documents
(benchmarks.pretrain_data.startup_corpus) and rates net of that fixed cost are printed; the
loader's net figure is its iteration time.

Then, untimed, both outputs are read back (ours: its TFRecords through text.features,
its masks and target_mapping expanded by the trainer's own functions; Model Garden: a fresh
pass of its loader, so a new random draw of the same distribution) and compared: sequences,
targets per sequence (and in the reuse half), lengths of the runs of consecutive targets (the
observable span lengths, in pieces), random-B fraction, and the
permutation-mask invariants of every sequence (``perm_mask_violations``). Model Garden's
defaults that differ from ours (num_predict 76, word spans with p(n) ~ 1/(n+1), leak_ratio 0.1,
<sep>/<cls> as context, bi_data) are listed in the report (``DIFFERENCES``); num_predict is
passed to both (--num_predict) and the leak ratio is Model Garden's own (--mg_leak_ratio).

    python -m benchmarks.xlnet_data --output_json=/tmp/xlnet_data.json
    python -m benchmarks.xlnet_data --repeat_corpus=4 --seq_length=512 --reuse_length=256
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import json
import os
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Optional

import numpy as np

from benchmarks import pretrain_data as pd
from benchmarks.common import log, write_report

MG_CREATE_MODULE = "official.nlp.data.create_xlnet_pretraining_data"
# XLNet's released SentencePiece layout (its README's spm_train flags): unk/bos/eos 0..2, the
# control symbols 3..7, <eop> user-defined at 8. Model Garden's creation script assumes these ids.
SP_CONTROL = ["<cls>", "<sep>", "<pad>", "<mask>", "<eod>"]
SP_USER = ["<eop>"]
CLS_ID, SEP_ID, EOD_ID = 3, 4, 7
LOADER_BATCH = 16

# What differs between the two recipes, stated in every report rather than hidden.
DIFFERENCES = [
    "targets: ours draws them offline with the original XLNet _sample_mask per half (n pieces, n in 1..5 with "
    "p ~ 1/n, context 6n, then topped up to exactly num_predict: 43 + 42 of 512); Model Garden's loader "
    "draws word spans over the whole sequence each epoch (n words, p ~ 1/(n+1), alpha = seq/num_predict/1.2), "
    "capped at num_predict and never topped up (a sequence can have fewer), so its spans are longer",
    "num_predict: Model Garden's loader default max_predictions_per_seq is 76; both get --num_predict here",
    "leak: Model Garden's leak_ratio 0.1 lets ~10% of targets see themselves (and be seen as context); ours 0",
    "<sep>/<cls>: Model Garden makes them context (everyone sees them); ours puts them in the factorization "
    "order (they see context, themselves and earlier targets; context does not see them)",
    "order: ours one factorization order per instance, written once; Model Garden a new one every epoch",
    "bi_data: Model Garden's creation default bi_data=True adds every stream reversed (2x the data); run here "
    "with --bi_data=False, ours has no data-level bi_data",
    "documents: Model Garden shuffles files (a file is its unit) and joins them; ours pools documents by hash",
]


# ---------------------------------------------------------------------------------------------
# Invariants of a permutation mask


def perm_mask_violations(cannot: np.ndarray, is_target: np.ndarray, is_functional: np.ndarray,
                         reuse_len: int, leaked_as_context: bool = False) -> Dict[str, np.ndarray]:
    """Which sequences break which rule of XLNet's permutation masks.

    Args:
      cannot: bool [B, L, L], True where position i may NOT attend to j (ours' perm_mask; Model
        Garden's permutation_mask is the complement).
      is_target: bool [B, L], the prediction targets.
      is_functional: bool [B, L], <sep>/<cls>.
      reuse_len: the reuse half [0, reuse_len); the rest is [reuse_len, L). 0: one block.
      leaked_as_context: treat targets that see themselves (Model Garden's leak_ratio) as
        context for every rule but "target_sees_itself".

    Returns:
      rule name -> bool [B], True where sequence b breaks the rule. "Context" is a position
      that is neither a target nor functional; "visible" pairs are those of the same half plus
      (rest row, reuse column). Rules:
        target_functional: a target sits on <sep>/<cls>.
        target_sees_itself: a target attends to itself (its query stream would see its content).
        reuse_sees_rest: a reuse-half position attends to the rest (its states become memory).
        rest_misses_reuse: a rest position cannot attend to some reuse-half position.
        context_misses_context: context cannot attend to visible context (itself included).
        context_sees_target: context attends to a target of its own half.
        target_misses_context: a target cannot attend to visible context.
        functional_misses_context: <sep>/<cls> cannot attend to itself or to visible context.
        targets_not_ordered: within a half, "attends to" among targets is not a strict total
          order (not one permutation: a cycle, a mutual pair, or two targets unordered).
    """
    cannot = np.asarray(cannot, dtype=bool)
    is_target = np.asarray(is_target, dtype=bool)
    is_functional = np.asarray(is_functional, dtype=bool)
    b, length = is_target.shape
    if cannot.shape != (b, length, length):
        raise ValueError(f"cannot has shape {cannot.shape}, expected {(b, length, length)}")
    sees = ~cannot
    eye = np.eye(length, dtype=bool)
    self_sees = sees[:, eye]  # [B, L]: the diagonal
    reuse = np.arange(length) < reuse_len
    same_half = reuse[:, None] == reuse[None, :]
    visible = same_half | (~reuse[:, None] & reuse[None, :])
    target = is_target & ~self_sees if leaked_as_context else is_target
    context = ~target & ~is_functional

    def pairs(rows, cols, where):  # bool [B, L, L]
        return rows[:, :, None] & cols[:, None, :] & where[None]

    out = {
        "target_functional": (is_target & is_functional).any(1),
        "target_sees_itself": (is_target & self_sees).any(1),
        "reuse_sees_rest": (sees & (reuse[:, None] & ~reuse[None, :])[None]).any((1, 2)),
        "rest_misses_reuse": (cannot & (~reuse[:, None] & reuse[None, :])[None]).any((1, 2)),
        "context_misses_context": (cannot & pairs(context, context, visible)).any((1, 2)),
        "context_sees_target": (sees & pairs(context, target, same_half)).any((1, 2)),
        "target_misses_context": (cannot & pairs(target, context, visible)).any((1, 2)),
        "functional_misses_context": (cannot & (pairs(is_functional, context, visible)
                                                | (is_functional[:, :, None] & eye[None]))).any((1, 2)),
    }
    unordered = np.zeros(b, dtype=bool)
    for half in ((reuse,) if reuse_len <= 0 else (reuse, ~reuse)):
        t = target & half[None]
        tt = pairs(t, t, ~eye)
        before = sees & tt                          # i attends to target j: j is earlier
        rank = before.sum(2)                        # targets before i; a permutation gives 0..k-1
        # A strict total order is exactly: ranks distinct and "j before i" iff rank j < rank i.
        consistent = before == (tt & (rank[:, None, :] < rank[:, :, None]))
        tie = tt & (rank[:, None, :] == rank[:, :, None])
        unordered |= ~consistent.all((1, 2)) | tie.any((1, 2))
    out["targets_not_ordered"] = unordered
    return out


def run_lengths(is_target: np.ndarray) -> np.ndarray:
    """Lengths of the maximal runs of consecutive targets, over all rows of bool [B, L]."""
    t = np.asarray(is_target, dtype=bool)
    padded = np.zeros((t.shape[0], t.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = t
    edges = np.diff(padded.ravel())
    return np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)


class Summary:
    """Accumulates the statistics of one tool's sequences, batch by batch."""

    def __init__(self, reuse_len: int):
        self.reuse_len = reuse_len
        self.sequences = 0
        self.targets: List[np.ndarray] = []
        self.targets_reuse: List[np.ndarray] = []
        self.runs: List[np.ndarray] = []
        self.leaked = 0
        self.mapping_errors = 0
        self.violations: Dict[str, int] = {}
        self.violations_leak_as_context: Dict[str, int] = {}

    def add(self, tokens: np.ndarray, cannot: np.ndarray, target_mapping: np.ndarray,
            target_weight: np.ndarray, target_ids: np.ndarray) -> None:
        """tokens [B, L]; cannot [B, L, L]; target_mapping [B, P, L] one-hot rows;
        target_weight [B, P] (1 real, 0 padding); target_ids [B, P]."""
        mapping = target_mapping.astype(bool) & (target_weight > 0)[:, :, None]
        is_target = mapping.any(1)
        # The k-th real row names the k-th target: one position per row, each position once,
        # and the target id is the token there.
        per_row = mapping.sum(2)
        positions = mapping.argmax(2)
        real = target_weight > 0
        wrong_id = real & (np.take_along_axis(tokens, positions, 1) != target_ids)
        self.mapping_errors += int(((per_row != real.astype(int)).any(1) | wrong_id.any(1)
                                    | (is_target.sum(1) != real.sum(1))).sum())
        functional = (tokens == SEP_ID) | (tokens == CLS_ID)
        self.sequences += len(tokens)
        self.targets.append(is_target.sum(1))
        self.targets_reuse.append(is_target[:, :self.reuse_len].sum(1))
        self.runs.append(run_lengths(is_target))
        self.leaked += int((is_target & ~cannot[:, np.eye(tokens.shape[1], dtype=bool)]).sum())
        for store, leak in ((self.violations, False), (self.violations_leak_as_context, True)):
            for name, bad in perm_mask_violations(cannot, is_target, functional, self.reuse_len, leak).items():
                store[name] = store.get(name, 0) + int(bad.sum())

    def result(self) -> dict:
        targets = np.concatenate(self.targets) if self.targets else np.zeros(0)
        runs = np.concatenate(self.runs) if self.runs else np.zeros(0)
        total = int(targets.sum())
        hist = {str(n): int((runs == n).sum()) for n in range(1, 11)}
        hist[">10"] = int((runs > 10).sum())
        return {
            "sequences": self.sequences,
            "targets_per_sequence": float(targets.mean()) if len(targets) else 0.0,
            "targets_min": int(targets.min()) if len(targets) else 0,
            "targets_max": int(targets.max()) if len(targets) else 0,
            "targets_in_reuse_half_fraction": float(np.concatenate(self.targets_reuse).sum() / total) if total else 0.0,
            "runs": int(len(runs)),
            "run_length_mean": float(runs.mean()) if len(runs) else 0.0,
            "run_length_histogram": hist,
            "leaked_target_fraction": self.leaked / total if total else 0.0,
            "mapping_errors": self.mapping_errors,
            "violations": self.violations,
            "violations_leaked_as_context": self.violations_leak_as_context,
        }


# ---------------------------------------------------------------------------------------------
# Reading the two outputs


def ours_batches(files: List[str], seq_len: int, num_predict: int, batch: int = LOADER_BATCH) -> Iterator[dict]:
    """Our records with the permutation mask and target_mapping the trainer's step expands
    (garden.tasks.pretraining.xlnet: perm_rank and input_q -> [B, L, L], [B, P, L])."""
    import tensorflow as tf
    from text import features
    from garden.tasks.pretraining.xlnet import perm_mask_from_rank, target_mapping_from

    spec = features.tf_parsing_spec(features.xlnet_pretrain_spec(seq_len, num_predict))

    def expand(x):
        x = tf.io.parse_example(x, spec)
        return {"tokens": x["input_k"], "cannot": perm_mask_from_rank(x["perm_rank"], x["input_q"]) > 0,
                "target_mapping": target_mapping_from(x["input_q"], num_predict),
                "target_weight": x["target_mask"], "target_ids": x["target"]}

    yield from tf.data.TFRecordDataset(files).batch(batch).map(expand).as_numpy_iterator()


def mg_loader(files: List[str], args):
    """Model Garden's XLNet loader over `files` once, in order, batches of LOADER_BATCH."""
    from official.nlp.data import pretrain_dataloader

    config = pretrain_dataloader.XLNetPretrainDataConfig(
        input_path=",".join(files), global_batch_size=LOADER_BATCH, is_training=False, drop_remainder=False,
        seq_length=args.seq_length, max_predictions_per_seq=args.num_predict, reuse_length=args.reuse_length,
        permutation_size=args.reuse_length, sample_strategy=args.mg_sample_strategy,
        leak_ratio=args.mg_leak_ratio, segment_sep_id=SEP_ID, segment_cls_id=CLS_ID)
    return pretrain_dataloader.XLNetPretrainDataLoader(config).load()


def mg_batches(files: List[str], args) -> Iterator[dict]:
    for ex in mg_loader(files, args).as_numpy_iterator():
        yield {"tokens": ex["input_word_ids"], "cannot": ex["permutation_mask"] == 0,  # 1 = may attend
               "target_mapping": ex["target_mapping"], "target_weight": ex["target_mask"],
               "target_ids": ex["target"]}


def mg_random_b_fraction(files: List[str]) -> float:
    """Model Garden's `label` feature: 0 = B drawn at random, 1 = the real continuation."""
    import tensorflow as tf

    spec = {"label": tf.io.FixedLenFeature([1], tf.int64)}
    labels = np.concatenate([b["label"][:, 0] for b in tf.data.TFRecordDataset(files).batch(256).map(
        lambda x: tf.io.parse_example(x, spec)).as_numpy_iterator()])
    return float((labels == 0).mean())


def run_loader_only(args) -> None:
    """--mg_loader_input: the timed loader process. Prints one JSON line."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    ds = mg_loader(sorted(glob.glob(args.mg_loader_input)), args)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    n = 0
    for ex in ds:
        n += int(ex["input_word_ids"].shape[0])
    print(json.dumps({"loader": {"sequences": n, "setup_cpu_s": cpu1 - cpu0,
                                 "iterate_cpu_s": time.process_time() - cpu1,
                                 "setup_wall_s": wall1 - wall0, "iterate_wall_s": time.perf_counter() - wall1}}),
          flush=True)


# ---------------------------------------------------------------------------------------------
# The timed steps


def train_sentencepiece(corpus: pd.Corpus, path: str, vocab_size: int) -> None:
    """A unigram model in XLNet's released layout, learnt on the corpus before repetition."""
    code = (
        "import glob, io, sentencepiece as spm\n"
        "from data_pipelines import make_vocab\n"
        f"files = sorted(glob.glob({corpus.source_pattern!r}))\n"
        "model = io.BytesIO()\n"
        "spm.SentencePieceTrainer.train(sentence_iterator=make_vocab.iter_lines(files), model_writer=model,\n"
        f"    model_type='unigram', vocab_size={vocab_size}, hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2,\n"
        f"    pad_id=-1, control_symbols={SP_CONTROL!r}, user_defined_symbols={SP_USER!r}, minloglevel=2)\n"
        f"make_vocab.write_sentencepiece(model.getvalue(), {path!r})\n")
    pd.run_step([sys.executable, "-c", code], "SentencePiece model (XLNet layout)")
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=path)
    got = {sp.IdToPiece(i): i for i in (CLS_ID, SEP_ID, EOD_ID)}
    if got != {"<cls>": CLS_ID, "<sep>": SEP_ID, "<eod>": EOD_ID}:
        raise RuntimeError(f"{path}: special pieces at unexpected ids {got}; Model Garden assumes XLNet's layout")


@dataclasses.dataclass
class Timed:
    usage: pd.Usage
    files: List[str]
    sequences: int
    startup: Optional[pd.Usage] = None
    loader: Optional[dict] = None  # the loader process's own account


def run_ours(args, corpus: pd.Corpus, spm_path: str, work_dir: str, name: str = "ours") -> Timed:
    out = os.path.join(work_dir, name)
    cmd = [sys.executable, "-m", "data_pipelines.make_pretrain", "--objective=xlnet", f"--input={corpus.pattern}",
           f"--output_dir={out}", f"--vocab={spm_path}", f"--max_seq_length={args.seq_length}",
           f"--reuse_len={args.reuse_length}", f"--num_predict={args.num_predict}", "--no-lower_case",
           "--dupe_factor=1", f"--num_shards={args.num_shards}", f"--seed={args.seed}", "--overwrite",
           "--direct_num_workers=1", "--direct_running_mode=in_memory"]
    usage = pd.measure(cmd, name, os.path.join(work_dir, f"{name}.log"))
    files = sorted(glob.glob(os.path.join(out, "train-*.tfrecord*")))
    return Timed(usage, files, pd.reported_instances(out) or 0)


def run_mg_create(args, corpus: pd.Corpus, spm_path: str, work_dir: str, name: str = "mg_create") -> Timed:
    out = os.path.join(work_dir, name)
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", MG_CREATE_MODULE, f"--input_file={','.join(corpus.files)}", f"--save_dir={out}",
           f"--sp_model_file={spm_path}", f"--seq_length={args.seq_length}", f"--reuse_length={args.reuse_length}",
           "--bi_data=False", "--per_host_batch_size=1", "--do_lower_case=False", "--use_eod_token=True"]
    usage = pd.measure(cmd, name, os.path.join(work_dir, f"{name}.log"))
    files = sorted(glob.glob(os.path.join(out, "*.tfrecord")))
    if not files:
        raise RuntimeError(f"{name}: no .tfrecord in {out}")
    return Timed(usage, files, count_records(files))


def run_mg_loader(args, create: Timed, work_dir: str) -> Timed:
    if len(create.files) != 1:
        raise RuntimeError(f"expected one Model Garden file, got {create.files}")
    log_path = os.path.join(work_dir, "mg_loader.log")
    cmd = [sys.executable, "-m", "benchmarks.xlnet_data", f"--mg_loader_input={create.files[0]}",
           f"--seq_length={args.seq_length}", f"--reuse_length={args.reuse_length}",
           f"--num_predict={args.num_predict}", f"--mg_leak_ratio={args.mg_leak_ratio}",
           f"--mg_sample_strategy={args.mg_sample_strategy}"]
    usage = pd.measure(cmd, "mg_loader", log_path)
    with open(log_path) as f:
        own = [json.loads(line)["loader"] for line in f if line.startswith('{"loader"')]
    if not own or own[-1]["sequences"] != create.sequences:
        raise RuntimeError(f"the loader saw {own[-1]['sequences'] if own else '?'} sequences, "
                           f"Model Garden wrote {create.sequences}; see {log_path}")
    return Timed(usage, create.files, own[-1]["sequences"], loader=own[-1])


def count_records(files: List[str]) -> int:
    # By the framing alone: TensorFlow stays out of this process until the timed runs are over.
    from text import tfrecord

    return sum(1 for path in files for _ in tfrecord.frame_lengths(path))


# ---------------------------------------------------------------------------------------------
# Report


def throughput_rows(ours: Timed, create: Timed, loader: Timed) -> List[dict]:
    def row(what, sequences, cpu, wall, net_cpu, includes, rss):
        return {"what": what, "sequences": sequences, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                "peak_rss_mib": round(rss / pd.MIB),
                "seq_per_cpu_s": round(sequences / cpu, 2), "net_cpu_s": None if net_cpu is None else round(net_cpu, 2),
                "net_seq_per_cpu_s": round(sequences / net_cpu, 2) if net_cpu and net_cpu > 0 else None,
                "includes": includes}

    def written(t: Timed):
        return round(sum(os.path.getsize(f) for f in t.files) / pd.MIB, 1)

    def net(t: Timed):
        return t.usage.cpu_s - t.startup.cpu_s if t.startup else None

    lo = loader.loader
    both_net = None if create.startup is None else net(create) + lo["iterate_cpu_s"]
    rows = [
        row("ours make_pretrain", ours.sequences, ours.usage.cpu_s, ours.usage.wall_s, net(ours),
            "tokenize, A/B, targets, perm orders, write", ours.usage.peak_rss_bytes),
        row("MG create", create.sequences, create.usage.cpu_s, create.usage.wall_s, net(create),
            "tokenize, A/B, boundaries, write (no targets/masks)", create.usage.peak_rss_bytes),
        row("MG loader (1 pass)", loader.sequences, loader.usage.cpu_s, loader.usage.wall_s, lo["iterate_cpu_s"],
            "read, sample targets, perm masks (net: iteration only)", loader.usage.peak_rss_bytes),
        row("MG create + loader", create.sequences, create.usage.cpu_s + loader.usage.cpu_s,
            create.usage.wall_s + loader.usage.wall_s, both_net, "the same content as ours",
            max(create.usage.peak_rss_bytes, loader.usage.peak_rss_bytes)),
    ]
    # On disk: ours holds targets and the [L] perm_rank (the masks are expanded by the trainer),
    # Model Garden's creation neither (its loader draws both).
    rows[0]["mib_written"], rows[1]["mib_written"] = written(ours), written(create)
    return rows


def format_report(rows: List[dict], stats: Dict[str, dict], args) -> str:
    fmt = pd._fmt
    lines = pd._columns(("step", "sequences", "CPU s", "wall s", "seq/CPU-s", "net CPU s", "net seq/CPU-s",
                         "peak RSS MiB", "MiB written", "includes"),
                        [(r["what"], str(r["sequences"]), f"{r['cpu_s']:.1f}", f"{r['wall_s']:.1f}",
                          f"{r['seq_per_cpu_s']:.1f}", fmt(r["net_cpu_s"], ".1f"), fmt(r["net_seq_per_cpu_s"], ".1f"),
                          str(r["peak_rss_mib"]), fmt(r.get("mib_written"), ".1f"), r["includes"]) for r in rows])
    by = {r["what"]: r for r in rows}
    ours = by["ours make_pretrain"]
    lines += ["", "ours / Model Garden, sequences per CPU-second (above 1: ours is faster):"]
    lines += pd._columns(("against", "total", "net of start-up"), [
        (k, fmt(pd._ratio(ours["seq_per_cpu_s"], by[k]["seq_per_cpu_s"])),
         fmt(pd._ratio(ours["net_seq_per_cpu_s"], by[k]["net_seq_per_cpu_s"])))
        for k in ("MG create + loader", "MG create")])
    o, m = stats["ours"], stats["model_garden"]
    lines += ["", f"the two outputs (Model Garden: a fresh pass of its loader; leak_ratio {args.mg_leak_ratio}, "
                  f"{args.mg_sample_strategy}):"]
    both = lambda f: (f(o), f(m))  # noqa: E731
    table = [
        ("sequences", *both(lambda s: str(s["sequences"]))),
        ("targets / sequence (mean)", *both(lambda s: f"{s['targets_per_sequence']:.2f}")),
        ("targets / sequence (min..max)", *both(lambda s: f"{s['targets_min']}..{s['targets_max']}")),
        ("targets in the reuse half", *both(lambda s: f"{s['targets_in_reuse_half_fraction']:.3f}")),
        ("target runs (spans, pieces): mean", *both(lambda s: f"{s['run_length_mean']:.2f}")),
    ]
    for key in list(o["run_length_histogram"]):
        table.append((f"  runs of length {key}", _share(o, key), _share(m, key)))
    table += [
        ("random-B fraction", *both(lambda s: fmt(s.get("random_b_fraction"), ".3f"))),
        ("targets that see themselves (leak)", *both(lambda s: f"{s['leaked_target_fraction']:.3f}")),
        ("target_mapping/target inconsistent", *both(lambda s: str(s["mapping_errors"]))),
    ]
    lines += pd._columns(("statistic", "ours", "Model Garden"), table)
    lines += ["", "permutation-mask invariants: sequences breaking each rule (of all sequences; "
                  "'leak=ctx': targets that see themselves counted as context):"]
    lines += pd._columns(("rule", "ours", "Model Garden", "MG leak=ctx"), [
        (name, str(o["violations"][name]), str(m["violations"][name]), str(m["violations_leaked_as_context"][name]))
        for name in o["violations"]])
    lines += ["", "recipe differences (stated, not corrected for):"] + [f"- {d}" for d in DIFFERENCES]
    return "\n".join(lines)


def _share(stats: dict, key: str) -> str:
    return f"{stats['run_length_histogram'][key] / max(stats['runs'], 1):.3f}"


def summarize(batches: Iterator[dict], reuse_len: int, label: str) -> dict:
    summary = Summary(reuse_len)
    next_log = 0
    for b in batches:
        summary.add(b["tokens"], b["cannot"], b["target_mapping"], b["target_weight"], b["target_ids"])
        if summary.sequences >= next_log:
            log(f"  {label}: {summary.sequences} sequences checked")
            next_log += 500
    return summary.result()


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.xlnet_data", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--corpus_dir", help="directory of corpus files (one sentence per line, blank line between "
                   "documents); default: made by data_pipelines.sample_corpus")
    p.add_argument("--corpus_pattern", default="corpus-*.txt", help="which files of --corpus_dir make the corpus")
    p.add_argument("--repeat_corpus", type=int, default=1, help="k: each corpus file repeated k times (a larger, "
                   "measurable corpus; the SentencePiece model is learnt on one copy)")
    p.add_argument("--vocab_size", type=int, default=8000, help="SentencePiece pieces (a maximum)")
    p.add_argument("--seq_length", type=int, default=512, help="both tools (XLNet's 512)")
    p.add_argument("--reuse_length", type=int, default=256, help="both tools; also Model Garden's permutation_size")
    p.add_argument("--num_predict", type=int, default=85,
                   help="ours --num_predict and Model Garden's max_predictions_per_seq (its default is 76)")
    p.add_argument("--mg_leak_ratio", type=float, default=0.1, help="Model Garden's loader leak_ratio (its default)")
    p.add_argument("--mg_sample_strategy", default="word_span",
                   choices=["single_token", "whole_word", "token_span", "word_span"],
                   help="Model Garden's loader sample_strategy (its default)")
    p.add_argument("--num_shards", type=int, default=2, help="output shards of ours")
    p.add_argument("--seed", type=int, default=12345, help="ours --seed (Model Garden seeds numpy with 0)")
    p.add_argument("--measure_startup", action=argparse.BooleanOptionalAction, default=True,
                   help="also run ours and Model Garden's creation on 2 documents to report rates net of start-up")
    p.add_argument("--work_dir", help="inputs, outputs and logs; default: a temporary directory, removed at the end")
    p.add_argument("--output_json", help="also write the figures here")
    p.add_argument("--mg_loader_input", help=argparse.SUPPRESS)  # internal: the timed loader process
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.repeat_corpus < 1:
        p.error("--repeat_corpus must be >= 1")
    if not 0 < args.reuse_length < args.seq_length or args.seq_length % args.reuse_length:
        p.error("Model Garden's loader needs seq_length a multiple of reuse_length (= permutation_size)")
    return args


def main(argv=None) -> Optional[dict]:
    args = parse_args(argv)
    if args.mg_loader_input:
        run_loader_only(args)
        return None
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
        return _benchmark(args, os.path.abspath(args.work_dir))
    with tempfile.TemporaryDirectory(prefix="bench_xlnet_data_") as work_dir:
        return _benchmark(args, work_dir)


def _benchmark(args, work_dir: str) -> dict:
    machine = pd.machine_info()
    log(f"work dir {work_dir}; {machine['cores']} cores, {machine['cpu_model']}")
    corpus = pd.prepare_corpus(args, work_dir)
    log(f"corpus: {len(corpus.files)} files, {corpus.bytes / pd.MIB:.1f} MiB, {corpus.documents} documents "
        f"(x{args.repeat_corpus})")
    spm_path = os.path.join(work_dir, "spm.model")
    train_sentencepiece(corpus, spm_path, args.vocab_size)

    # Timed runs one after another; TensorFlow enters this process only afterwards.
    ours = run_ours(args, corpus, spm_path, work_dir)
    create = run_mg_create(args, corpus, spm_path, work_dir)
    loader = run_mg_loader(args, create, work_dir)
    if args.measure_startup:
        tiny = pd.startup_corpus(corpus, work_dir)
        ours.startup = run_ours(args, tiny, spm_path, work_dir, name="startup_ours").usage
        create.startup = run_mg_create(args, tiny, spm_path, work_dir, name="startup_mg_create").usage
    rows = throughput_rows(ours, create, loader)

    log("reading both outputs back and checking every sequence")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    stats = {"ours": summarize(ours_batches(ours.files, args.seq_length, args.num_predict), args.reuse_length, "ours"),
             "model_garden": summarize(mg_batches(create.files, args), args.reuse_length, "Model Garden")}
    with open(os.path.join(work_dir, "ours", "stats.json")) as f:
        own = json.load(f)
    # Ours also counts the spans it drew (before <sep>/<cls> were taken out and top-ups added).
    stats["ours"]["random_b_fraction"] = own.get("b_random_fraction")
    stats["ours"]["drawn_span_mean"] = own.get("mean_span_length")
    stats["model_garden"]["random_b_fraction"] = mg_random_b_fraction(create.files)
    if stats["ours"]["sequences"] != ours.sequences:
        log(f"warning: ours reports {ours.sequences} sequences but its shards hold {stats['ours']['sequences']}")

    print()
    print(f"XLNet pretraining data: seq_length {args.seq_length}, reuse_length {args.reuse_length}, num_predict "
          f"{args.num_predict}, corpus x{args.repeat_corpus} ({corpus.bytes / pd.MIB:.1f} MiB, {corpus.documents} "
          f"documents), 1 worker each, {machine['cores']} cores")
    print(format_report(rows, stats, args))
    busy = [name for name, t in (("ours", ours), ("MG create", create), ("MG loader", loader))
            if t.usage.other_load_cores > 0.1]
    if busy:
        print("note: other processes were busy during " + ", ".join(busy) + ": compare CPU-seconds, not wall time")
    print(flush=True)
    result = {
        "benchmark": "xlnet_data",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": ["python", "-m", "benchmarks.xlnet_data", *args.argv],
        "machine": machine,
        "params": {k: getattr(args, k) for k in ("seq_length", "reuse_length", "num_predict", "mg_leak_ratio",
                                                 "mg_sample_strategy", "repeat_corpus", "vocab_size", "seed")},
        "corpus": {**dataclasses.asdict(corpus), "repeat": args.repeat_corpus},
        "throughput": rows,
        "loader_own_account": loader.loader,
        "other_load_cores": {"ours": ours.usage.other_load_cores, "mg_create": create.usage.other_load_cores,
                             "mg_loader": loader.usage.other_load_cores},
        "outputs": stats,
        "differences": DIFFERENCES,
    }
    return write_report(result, args.output_json)


if __name__ == "__main__":
    main()
