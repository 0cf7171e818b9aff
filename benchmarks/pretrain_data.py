"""BERT pretraining data: our Beam job against Model Garden's create_pretraining_data.

Both tools get the same corpus files, the same WordPiece vocabulary and the same arguments
(max_seq_length 128, 20 predictions, masked_lm_prob 0.15, short_seq_prob 0.1, seed 12345,
--dupe_factor). Each runs as its own process tree and is measured from outside:

- wall seconds, from start to exit (imports and pipeline start-up included);
- CPU seconds (user + sys) of the whole tree: the DirectRunner in multi_processing mode starts
  SDK worker processes, so the tree is polled with psutil and also accounted with
  getrusage(RUSAGE_CHILDREN); each method can only miss time, so the larger is reported;
- peak memory: RSS summed over the tree, sampled every 50 ms (plus PSS, which counts shared
  library pages once, sampled every 0.5 s);
- instances written, counted by reading the TFRecords back with tf.data (ours' info.json /
  stats.json figure is checked against it).

Throughput per core = instances / wall / cores used (1 for Model Garden, a single process;
direct_num_workers for ours). Throughput per CPU-second charges each tool for what it burnt,
threads and helper processes included: the fairest single figure on a shared machine.

    python -m benchmarks.pretrain_data --output_json=/tmp/pretrain_data.json
    python -m benchmarks.pretrain_data --workers=1,2 --repeat_corpus=4

See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

import psutil

from benchmarks import common
from benchmarks.common import busy_s, log, write_report

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The published BERT recipe (docs/objectives.md section 1) except dupe_factor, which sets the size.
PARAMS = {
    "max_seq_length": 128,
    "max_predictions_per_seq": 20,
    "masked_lm_prob": 0.15,
    "short_seq_prob": 0.1,
    "seed": 12345,
    "lower_case": True,
}

# The sampler shares the 2 cores with the tools: at 20 Hz with PSS every 0.5 s it burnt 16 CPU-s
# over Model Garden's 278 s run (smaps_rollup walks the page tables of a 5 GB process) and took
# CPU from ours when its 2 workers keep both cores busy. Since 2026-11-25 (2): RSS at 10 Hz,
# PSS every 2 s.
RSS_INTERVAL_S = 0.1        # peak RSS is a sampled maximum: spikes shorter than this can be missed
SLOW_EVERY_N_SAMPLES = 5    # new descendants (a scan of /proc): every 0.5 s
PSS_EVERY_N_SAMPLES = 20    # PSS (smaps_rollup, ~1 ms per process and more for large ones): every 2 s
PROGRESS_INTERVAL_S = 15.0
MODEL_GARDEN_MODULE = "official.nlp.data.create_pretraining_data"
MIB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Measuring a process tree


@dataclasses.dataclass
class Usage:
    wall_s: float
    cpu_s: float                 # max(cpu_s_rusage, cpu_s_polled)
    cpu_s_rusage: float          # getrusage(RUSAGE_CHILDREN) delta: reaped descendants only
    cpu_s_polled: float          # last user+sys seen per process: misses <= 50 ms per process
    peak_rss_bytes: int          # RSS summed over the tree (shared pages counted per process)
    peak_pss_bytes: Optional[int]
    peak_single_rss_bytes: int   # the largest single process
    max_processes: int
    monitor_cpu_s: float         # this process (the sampler) meanwhile: not charged to the tool
    other_load_cores: float      # CPU busy outside the tool and the sampler, in cores on average
    steal_cores: float           # time the hypervisor gave our vCPUs to someone else


class TreeSampler(threading.Thread):
    """Polls a process and all its descendants until stopped."""

    def __init__(self, pid: int, label: str):
        super().__init__(daemon=True)
        self._root = psutil.Process(pid)
        self._procs: List[psutil.Process] = [self._root]
        self._label = label
        self._stop_event = threading.Event()
        self._t0 = time.perf_counter()
        self.cpu_by_process: Dict[tuple, float] = {}
        self.peak_rss = 0
        self.peak_pss: Optional[int] = None
        self.peak_single_rss = 0
        self.max_processes = 0
        self._last_rss = 0
        self._last_n = 0

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        n = 0
        next_progress = self._t0 + PROGRESS_INTERVAL_S
        while not self._stop_event.is_set():
            if n % SLOW_EVERY_N_SAMPLES == 0:
                self._discover()
            self._sample(with_pss=n % PSS_EVERY_N_SAMPLES == 0)
            n += 1
            now = time.perf_counter()
            if now >= next_progress:
                next_progress += PROGRESS_INTERVAL_S
                log(f"  {self._label}: {now - self._t0:6.0f} s, {self._last_n} processes, "
                    f"RSS {self._last_rss / MIB:7.0f} MiB (peak {self.peak_rss / MIB:.0f}), "
                    f"CPU {sum(self.cpu_by_process.values()):7.1f} s")
            self._stop_event.wait(RSS_INTERVAL_S)

    def _discover(self) -> None:
        # Listing descendants scans every process on the machine (~3 ms): done every 0.5 s;
        # a process living less than that is still charged through getrusage.
        try:
            children = self._root.children(recursive=True)
        except psutil.Error:  # the root has exited; Popen.wait() is about to return
            return
        known = {p.pid for p in self._procs}
        self._procs = [p for p in self._procs if p.is_running()]
        self._procs += [c for c in children if c.pid not in known]

    def _sample(self, with_pss: bool) -> None:
        rss_total, pss_total, n = 0, 0, 0
        for p in self._procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    # Keyed by (pid, start time) so a reused pid is not merged with a dead one.
                    self.cpu_by_process[(p.pid, p.create_time())] = t.user + t.system
                    rss = p.memory_info().rss
            except psutil.Error:  # exited (or a zombie) since it was listed
                continue
            n += 1
            rss_total += rss
            self.peak_single_rss = max(self.peak_single_rss, rss)
            if with_pss:
                pss_total += _pss_bytes(p.pid)
        self._last_rss, self._last_n = rss_total, n
        self.peak_rss = max(self.peak_rss, rss_total)
        self.max_processes = max(self.max_processes, n)
        if with_pss and pss_total:
            self.peak_pss = max(self.peak_pss or 0, pss_total)


def _pss_bytes(pid: int) -> int:
    """Proportional set size from /proc/PID/smaps_rollup (Linux >= 4.14); 0 if unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _rusage_cpu_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(cmd: Sequence[str], label: str, log_path: str) -> Usage:
    """Runs `cmd` (output to `log_path`) and measures its process tree from outside."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    log(f"{label}: {' '.join(_short(c) for c in cmd)}")
    log(f"  {label}: log in {log_path}")
    cpu_before = _rusage_cpu_s(resource.RUSAGE_CHILDREN)
    self_before = _rusage_cpu_s(resource.RUSAGE_SELF)
    machine_before = psutil.cpu_times()
    start = time.perf_counter()
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(list(cmd), cwd=REPO_ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, label)
        sampler.start()
        returncode = proc.wait()
    wall = time.perf_counter() - start
    sampler.stop()
    sampler.join()
    machine_after = psutil.cpu_times()
    cpu_rusage = _rusage_cpu_s(resource.RUSAGE_CHILDREN) - cpu_before
    monitor_cpu = _rusage_cpu_s(resource.RUSAGE_SELF) - self_before
    if returncode != 0:
        with open(log_path, "rb") as f:
            tail = f.read()[-4000:].decode("utf-8", "replace")
        raise RuntimeError(f"{label} exited with status {returncode} after {wall:.0f} s; "
                           f"last lines of {log_path} (kept only with --work_dir):\n{tail}")
    cpu_polled = sum(sampler.cpu_by_process.values())
    cpu = max(cpu_rusage, cpu_polled)
    # Other people's jobs on the same machine slow the wall clock (not the CPU seconds much):
    # measured so that a polluted run can be seen as such.
    other = busy_s(machine_after) - busy_s(machine_before) - cpu - monitor_cpu
    steal = getattr(machine_after, "steal", 0.0) - getattr(machine_before, "steal", 0.0)
    usage = Usage(
        wall_s=wall,
        cpu_s=cpu,
        cpu_s_rusage=cpu_rusage,
        cpu_s_polled=cpu_polled,
        peak_rss_bytes=sampler.peak_rss,
        peak_pss_bytes=sampler.peak_pss,
        peak_single_rss_bytes=sampler.peak_single_rss,
        max_processes=sampler.max_processes,
        monitor_cpu_s=monitor_cpu,
        other_load_cores=max(0.0, other) / wall,
        steal_cores=max(0.0, steal) / wall,
    )
    log(f"  {label}: done in {wall:.1f} s, CPU {usage.cpu_s:.1f} s "
        f"(rusage {cpu_rusage:.1f}, polled {cpu_polled:.1f}), "
        f"peak RSS {usage.peak_rss_bytes / MIB:.0f} MiB over {usage.max_processes} processes; "
        f"sampler {monitor_cpu:.1f} s, other load {usage.other_load_cores:.2f} cores")
    if usage.other_load_cores > 0.1:
        log(f"  warning: other processes kept {usage.other_load_cores:.2f} cores busy during this "
            f"run: its wall time (not its CPU seconds) is inflated")
    return usage


def _short(arg: str, limit: int = 160) -> str:
    return arg if len(arg) <= limit else arg[:limit] + "...(%d chars)" % len(arg)


def run_step(cmd: Sequence[str], what: str) -> None:
    """An unmeasured preparation step (corpus, vocabulary)."""
    log(f"{what}: {' '.join(cmd)}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(list(cmd), cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")


# ---------------------------------------------------------------------------------------------
# The shared input


@dataclasses.dataclass
class Corpus:
    pattern: str        # the glob our job reads; it matches exactly `files`
    files: List[str]    # what Model Garden reads, comma-joined, in this order
    bytes: int
    lines: int
    documents: int      # non-empty blank-line-separated blocks, counted per file
    sha256: str
    source_pattern: str  # the corpus before --repeat_corpus (the vocabulary is learnt on it)


def prepare_corpus(args, work_dir: str) -> Corpus:
    if args.corpus_dir:
        source_dir = os.path.abspath(args.corpus_dir)
    else:
        source_dir = os.path.join(work_dir, "corpus")
        run_step([sys.executable, "-m", "data_pipelines.sample_corpus", f"--output={source_dir}"],
                 "sample corpus")
    files = sorted(glob.glob(os.path.join(source_dir, args.corpus_pattern)))
    if not files:
        raise SystemExit(f"no corpus files match {os.path.join(source_dir, args.corpus_pattern)}; "
                         f"pass --corpus_dir (and --corpus_pattern) or let the benchmark make one")
    source_pattern = os.path.join(source_dir, args.corpus_pattern)
    if args.repeat_corpus > 1:
        # The same file names, each k times longer: both tools see the same number of files,
        # only the amount of text grows (Model Garden holds all of it in memory).
        repeated_dir = os.path.join(work_dir, f"corpus_x{args.repeat_corpus}")
        os.makedirs(repeated_dir, exist_ok=True)
        repeated = []
        for path in files:
            with open(path, "rb") as f:
                text = f.read()
            # A blank line after each copy keeps its last document apart from the next copy's
            # first one.
            block = text.rstrip(b"\n") + b"\n\n"
            target = os.path.join(repeated_dir, os.path.basename(path))
            with open(target, "wb") as f:
                for _ in range(args.repeat_corpus):
                    f.write(block)
            repeated.append(target)
        source_dir, files = repeated_dir, repeated
    pattern = os.path.join(source_dir, args.corpus_pattern)
    if sorted(glob.glob(pattern)) != files:
        raise SystemExit(f"corpus changed while preparing it: {pattern}")
    if any("," in f for f in files):
        raise SystemExit("Model Garden takes a comma-separated file list; rename the corpus files "
                         "so that their paths have no commas")
    digest = hashlib.sha256()
    total_bytes = total_lines = documents = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        digest.update(data)
        total_bytes += len(data)
        lines = data.split(b"\n")
        total_lines += sum(1 for line in lines if line.strip())
        in_doc = False
        for line in lines:
            if line.strip():
                documents += not in_doc
                in_doc = True
            else:
                in_doc = False
    return Corpus(pattern, files, total_bytes, total_lines, documents, "sha256:" + digest.hexdigest(),
                  source_pattern)


def prepare_vocab(args, corpus: Corpus, work_dir: str) -> str:
    if args.vocab:
        return os.path.abspath(args.vocab)
    path = os.path.join(work_dir, "vocab.txt")
    run_step([sys.executable, "-m", "data_pipelines.make_vocab", f"--input={corpus.source_pattern}",
              f"--output={path}", f"--vocab_size={args.vocab_size}", "--lower_case"], "vocabulary")
    return path


# ---------------------------------------------------------------------------------------------
# The two tools


@dataclasses.dataclass
class Run:
    tool: str               # "model_garden" | "ours"
    workers: int
    running_mode: str
    cores: int              # the divisor of throughput per core
    output_files: List[str]
    reported_instances: Optional[int]
    usage: Usage
    written: Optional[dict] = None  # filled in after all timed runs (see tfrecord_summary)


def run_model_garden(corpus: Corpus, vocab: str, work_dir: str, dupe_factor: int,
                     name: str = "model_garden") -> Run:
    out_dir = os.path.join(work_dir, name)
    os.makedirs(out_dir, exist_ok=True)
    output = os.path.join(out_dir, "train.tfrecord")
    cmd = [
        sys.executable, "-m", MODEL_GARDEN_MODULE,
        f"--input_file={','.join(corpus.files)}",
        f"--output_file={output}",
        f"--vocab_file={vocab}",
        f"--do_lower_case={PARAMS['lower_case']}",
        f"--max_seq_length={PARAMS['max_seq_length']}",
        f"--max_predictions_per_seq={PARAMS['max_predictions_per_seq']}",
        f"--masked_lm_prob={PARAMS['masked_lm_prob']}",
        f"--short_seq_prob={PARAMS['short_seq_prob']}",
        f"--random_seed={PARAMS['seed']}",
        f"--dupe_factor={dupe_factor}",
    ]
    usage = measure(cmd, name, os.path.join(work_dir, f"{name}.log"))
    return Run("model_garden", 1, "single process", 1, [output], None, usage)


def _running_mode(args, workers: int) -> str:
    if args.running_mode != "auto":
        return args.running_mode
    # Beam's own default for one worker is in_memory (no worker process); more workers need
    # processes, as threads would share the GIL.
    return "in_memory" if workers == 1 else "multi_processing"


def run_ours(args, corpus: Corpus, vocab: str, work_dir: str, dupe_factor: int, workers: int,
             name: str = "ours") -> Run:
    name = f"{name}_w{workers}"
    out_dir = os.path.join(work_dir, name)
    mode = _running_mode(args, workers)
    cmd = [
        sys.executable, "-m", args.ours_module,
        "--objective=bert",
        f"--input={corpus.pattern}",
        f"--output_dir={out_dir}",
        f"--vocab={vocab}",
        "--lower_case" if PARAMS["lower_case"] else "--no-lower_case",
        f"--max_seq_length={PARAMS['max_seq_length']}",
        f"--max_predictions_per_seq={PARAMS['max_predictions_per_seq']}",
        f"--masked_lm_prob={PARAMS['masked_lm_prob']}",
        f"--short_seq_prob={PARAMS['short_seq_prob']}",
        f"--dupe_factor={dupe_factor}",
        f"--seed={PARAMS['seed']}",
        f"--num_shards={args.num_shards}",
        "--overwrite",
        f"--direct_num_workers={workers}",
        f"--direct_running_mode={mode}",
    ]
    usage = measure(cmd, name, os.path.join(work_dir, f"{name}.log"))
    if not os.path.exists(os.path.join(out_dir, "COMPLETED")):
        raise RuntimeError(f"{name} exited 0 but {out_dir} has no COMPLETED marker")
    files = sorted(glob.glob(os.path.join(out_dir, "train-*.tfrecord*")))
    if not files:
        raise RuntimeError(f"{name}: no train-*.tfrecord shards in {out_dir}")
    return Run("ours", workers, mode, workers, files, reported_instances(out_dir), usage)


def scaling_runs(args, corpus: Corpus, vocab: str, work_dir: str, runs: List[Run]) -> Optional[dict]:
    """--scaling_repeats more runs of ours with 1 and with the most workers, alternating; the
    speed-up is median wall (1 worker) / median wall (N workers), the main runs included."""
    most = max(args.worker_counts)
    first = {r.workers: r.usage.wall_s for r in runs if r.tool == "ours"}
    if most == 1 or 1 not in first:
        log("--scaling_repeats needs --workers with 1 and more than 1: skipped")
        return None
    pairs = [(first[1], first[most])]
    for i in range(args.scaling_repeats):
        w1 = run_ours(args, corpus, vocab, work_dir, args.dupe_factor, 1, name=f"repeat{i + 1}_ours")
        wn = run_ours(args, corpus, vocab, work_dir, args.dupe_factor, most, name=f"repeat{i + 1}_ours")
        pairs.append((w1.usage.wall_s, wn.usage.wall_s))
    med1, medn = statistics.median(a for a, _ in pairs), statistics.median(b for _, b in pairs)
    return {"workers": most, "pairs": pairs, "median_w1_s": med1, "median_wn_s": medn, "median_speedup": med1 / medn}


def reported_instances(out_dir: str) -> Optional[int]:
    """The count our job recorded: info.json ``instances.total`` (else stats.json ``instances``)."""
    for name, get in (("info.json", lambda d: d["instances"]["total"]),
                      ("stats.json", lambda d: d["instances"])):
        try:
            with open(os.path.join(out_dir, name)) as f:
                return int(get(json.load(f)))
        except (OSError, KeyError, TypeError, ValueError):
            continue
    return None


def startup_corpus(corpus: Corpus, work_dir: str) -> Corpus:
    """The first document of each of the corpus' first two files, under the same file names: a
    near-empty job that measures each tool's fixed cost (interpreter, TensorFlow and Beam
    imports, vocabulary, pipeline start-up and worker processes). Two files, so that two
    workers start up side by side as in a real run (with one file, one worker would import
    TensorFlow and tokenize while the other waits, and then the other would import it to
    write: a start-up longer than the real run's)."""
    out_dir = os.path.join(work_dir, "startup_corpus")
    os.makedirs(out_dir, exist_ok=True)
    paths, total, lines, digest = [], 0, 0, hashlib.sha256()
    for source in corpus.files[:2]:
        kept = []
        with open(source, "rb") as f:
            for line in f:
                if line.strip():
                    kept.append(line.rstrip(b"\n") + b"\n")
                elif kept:
                    break  # the end of the first document
        data = b"".join(kept)
        path = os.path.join(out_dir, os.path.basename(source))
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
        total += len(data)
        lines += len(kept)
        digest.update(data)
    pattern = os.path.join(out_dir, os.path.basename(corpus.pattern))
    return Corpus(pattern, paths, total, lines, len(paths), "sha256:" + digest.hexdigest(), pattern)


# ---------------------------------------------------------------------------------------------
# What was written


def tfrecord_summary(files: Sequence[str]) -> dict:
    """Counts the records with tf.data and summarises them with our feature spec.

    Parsing Model Garden's output with text.features also checks that the two
    tools write the same schema (names, dtypes, lengths).
    """
    import tensorflow as tf
    from text import features

    spec = features.tf_parsing_spec(features.bert_pretrain_spec(
        PARAMS["max_seq_length"], PARAMS["max_predictions_per_seq"]))
    compression = "GZIP" if files[0].endswith(".gz") else None
    ds = tf.data.TFRecordDataset(list(files), compression_type=compression)
    ds = ds.batch(4096).map(lambda x: tf.io.parse_example(x, spec))
    count, tokens, masked, random_next = 0, 0, 0.0, 0
    for batch in ds.as_numpy_iterator():
        count += len(batch["input_mask"])
        tokens += int(batch["input_mask"].sum())
        masked += float(batch["masked_lm_weights"].sum())
        random_next += int(batch["next_sentence_labels"].sum())
    return {
        "instances": count,
        "tokens": tokens,
        "tokens_per_instance": tokens / count if count else 0.0,
        "masked_per_instance": masked / count if count else 0.0,
        "random_next_fraction": random_next / count if count else 0.0,
        "bytes": sum(os.path.getsize(f) for f in files),
        "files": len(files),
    }


def files_digest(files: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return "sha256:" + digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# Report


def run_record(run: Run, startup: Optional[Run]) -> dict:
    u, w = run.usage, run.written
    instances = w["instances"]
    record = {
        "tool": run.tool,
        "workers": run.workers,
        "running_mode": run.running_mode,
        "cores": run.cores,
        "wall_s": round(u.wall_s, 2),
        "cpu_s": round(u.cpu_s, 2),
        "cpu_s_rusage": round(u.cpu_s_rusage, 2),
        "cpu_s_polled": round(u.cpu_s_polled, 2),
        "instances": instances,
        "reported_instances": run.reported_instances,
        "instances_per_s": round(instances / u.wall_s, 2),
        "instances_per_s_per_core": round(instances / u.wall_s / run.cores, 2),
        "instances_per_cpu_s": round(instances / u.cpu_s, 2),
        "tokens_per_cpu_s": round(w["tokens"] / u.cpu_s, 1),
        "peak_rss_mib": round(u.peak_rss_bytes / MIB, 1),
        "peak_pss_mib": None if u.peak_pss_bytes is None else round(u.peak_pss_bytes / MIB, 1),
        "peak_single_process_rss_mib": round(u.peak_single_rss_bytes / MIB, 1),
        "max_processes": u.max_processes,
        "monitor_cpu_s": round(u.monitor_cpu_s, 2),
        "other_load_cores": round(u.other_load_cores, 3),
        "steal_cores": round(u.steal_cores, 3),
        "written": w,
        "startup": None,
        "net_instances_per_s_per_core": None,
        "net_instances_per_cpu_s": None,
    }
    if startup is not None:
        s = startup.usage
        record["startup"] = {"wall_s": round(s.wall_s, 2), "cpu_s": round(s.cpu_s, 2),
                             "peak_rss_mib": round(s.peak_rss_bytes / MIB, 1),
                             "instances": startup.written["instances"]}
        # Net of the fixed cost: the rate at which the tool works once started, i.e. what a
        # corpus large enough to make start-up negligible would show.
        if u.wall_s > s.wall_s:
            record["net_instances_per_s_per_core"] = round(
                instances / (u.wall_s - s.wall_s) / run.cores, 2)
        if u.cpu_s > s.cpu_s:
            record["net_instances_per_cpu_s"] = round(instances / (u.cpu_s - s.cpu_s), 2)
    return record


RATIO_KEYS = {  # ratio name -> record field
    "instances_per_s_per_core": "instances_per_s_per_core",
    "instances_per_cpu_s": "instances_per_cpu_s",
    "net_instances_per_s_per_core": "net_instances_per_s_per_core",
    "net_instances_per_cpu_s": "net_instances_per_cpu_s",
    "tokens_per_cpu_s": "tokens_per_cpu_s",
    "peak_rss": "peak_rss_mib",
    "peak_pss": "peak_pss_mib",
    "instances": "instances",
}


def ratios(records: List[dict]) -> List[dict]:
    """ours / Model Garden for each run of ours."""
    theirs = next((r for r in records if r["tool"] == "model_garden"), None)
    if theirs is None:
        return []
    return [{"ours_workers": ours["workers"],
             **{name: _ratio(ours.get(key), theirs.get(key)) for name, key in RATIO_KEYS.items()}}
            for ours in records if ours["tool"] == "ours"]


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 3) if a and b else None


def _fmt(x: Optional[float], spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _name(record: dict) -> str:
    return "Model Garden" if record["tool"] == "model_garden" else f"ours w={record['workers']}"


def _columns(header: Sequence[str], rows: List[Sequence[str]], left: int = 1) -> List[str]:
    """Aligned text columns: the first `left` columns flush left, the rest right."""
    table = [list(header)] + [list(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths))).rstrip() for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths if w))
    return lines


def format_report(records: List[dict], ratio_rows: List[dict]) -> str:
    lines = _columns(
        ("tool", "mode", "wall s", "CPU s", "instances", "inst/s/core", "inst/CPU-s",
         "peak RSS MiB", "peak PSS MiB", "procs", "other load"),
        [(_name(r), r["running_mode"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
          str(r["instances"]), f"{r['instances_per_s_per_core']:.1f}",
          f"{r['instances_per_cpu_s']:.1f}", f"{r['peak_rss_mib']:.0f}",
          _fmt(r["peak_pss_mib"], ".0f"), str(r["max_processes"]), f"{r['other_load_cores']:.2f}")
         for r in records], left=2)
    if any(r["startup"] for r in records):
        lines += ["", "start-up (the same command on 2 documents, dupe_factor 1) and the rates net of it:"]
        lines += _columns(
            ("tool", "wall s", "CPU s", "peak RSS MiB", "net inst/s/core", "net inst/CPU-s"),
            [(_name(r), _fmt(r["startup"]["wall_s"], ".1f"), _fmt(r["startup"]["cpu_s"], ".1f"),
              _fmt(r["startup"]["peak_rss_mib"], ".0f"),
              _fmt(r["net_instances_per_s_per_core"], ".1f"), _fmt(r["net_instances_per_cpu_s"], ".1f"))
             for r in records if r["startup"]])
    if ratio_rows:
        lines += ["", "ours / Model Garden (throughput above 1: ours is faster; memory above 1: ours uses more):"]
        lines += _columns(
            ("ours", "per core", "per CPU-s", "net per core", "net per CPU-s", "tokens/CPU-s",
             "peak RSS", "peak PSS", "instances"),
            [(f"w={q['ours_workers']}", _fmt(q["instances_per_s_per_core"]), _fmt(q["instances_per_cpu_s"]),
              _fmt(q["net_instances_per_s_per_core"]), _fmt(q["net_instances_per_cpu_s"]),
              _fmt(q["tokens_per_cpu_s"]), _fmt(q["peak_rss"]), _fmt(q["peak_pss"]), _fmt(q["instances"], ".3f"))
             for q in ratio_rows])
    ours = {r["workers"]: r for r in records if r["tool"] == "ours"}
    if 1 in ours and len(ours) > 1:
        lines += ["", "ours with N workers against 1 worker (wall-clock speed-up; net: start-up runs subtracted):"]
        one = ours[1]
        rows = []
        for w, r in sorted(ours.items()):
            if w == 1:
                continue
            net = None
            if r["startup"] and one["startup"]:
                net_one = one["wall_s"] - one["startup"]["wall_s"]
                net_r = r["wall_s"] - r["startup"]["wall_s"]
                # A run hardly longer than its start-up has no net time to compare.
                net = _ratio(net_one, net_r) if min(net_one, net_r) > 1.0 else None
            rows.append((f"w={w}", _fmt(_ratio(one["wall_s"], r["wall_s"])), _fmt(net),
                         _fmt(_ratio(one["cpu_s"], r["cpu_s"]))))
        lines += _columns(("ours", "speed-up", "net speed-up", "CPU s w=1 / w=N"), rows)
    lines += ["", "what was written (read back with tf.data and text.features):"]
    rows = []
    for r in records:
        w = r["written"]
        note = ""
        if r["reported_instances"] is not None and r["reported_instances"] != w["instances"]:
            note = f"info.json says {r['reported_instances']}!"
        rows.append((_name(r), str(w["instances"]), f"{w['tokens_per_instance']:.1f}",
                     f"{w['masked_per_instance']:.2f}", f"{w['random_next_fraction']:.3f}",
                     f"{w['bytes'] / MIB:.1f}", note))
    lines += _columns(("tool", "instances", "tokens/inst", "masked/inst", "random-next",
                       "MiB", ""), rows)
    return "\n".join(lines)


def machine_info() -> dict:
    info = common.machine_info(("tensorflow", "tensorflow-text", "apache-beam",
                                "tf-models-official", "psutil"))
    info["memory_gib"] = round(psutil.virtual_memory().total / (1 << 30), 1)
    return info


# ---------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.pretrain_data",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--corpus_dir", help="directory of corpus files (one sentence per line, blank "
                   "line between documents); default: made by data_pipelines.sample_corpus")
    p.add_argument("--corpus_pattern", default="corpus-*.txt",
                   help="which files of --corpus_dir make the corpus")
    p.add_argument("--vocab", help="WordPiece vocabulary; default: made by data_pipelines."
                   "make_vocab on the corpus (lower-cased, --vocab_size)")
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--dupe_factor", type=int, default=5,
                   help="passes over the corpus with different masks (the BERT recipe uses 10)")
    p.add_argument("--workers", default="1",
                   help="comma-separated direct_num_workers values, one run of ours each")
    p.add_argument("--running_mode", default="auto",
                   choices=["auto", "in_memory", "multi_threading", "multi_processing"],
                   help="DirectRunner mode for ours; auto: in_memory for 1 worker, else "
                   "multi_processing")
    p.add_argument("--num_shards", type=int, default=4,
                   help="output shards of ours (its own default; each is sorted in one worker's "
                   "memory). Model Garden writes one file")
    p.add_argument("--repeat_corpus", type=int, default=1,
                   help="k: each corpus file repeated k times, to study memory growth")
    p.add_argument("--ours_module", default="data_pipelines.make_pretrain",
                   help="module run with `python -m` as our side")
    p.add_argument("--work_dir", help="where inputs, outputs and logs go; default: a temporary "
                   "directory, removed at the end")
    p.add_argument("--measure_startup", action=argparse.BooleanOptionalAction, default=True,
                   help="also run each command on 2 documents to measure its fixed cost and "
                   "report rates net of it")
    p.add_argument("--model_garden", action=argparse.BooleanOptionalAction, default=True,
                   help="also run Model Garden's create_pretraining_data (--no-model_garden: ours only, e.g. "
                   "to measure worker scaling on a corpus too large to wait for the reference)")
    p.add_argument("--scaling_repeats", type=int, default=0,
                   help="N: after the main runs, run ours with 1 worker and with the most --workers N more "
                   "times each, alternating, and report the median wall-clock speed-up (one pair of runs "
                   "varies by several percent on a shared 2-core machine)")
    p.add_argument("--output_json", help="also write the figures here")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args.worker_counts = [int(w) for w in args.workers.split(",") if w.strip()]
    except ValueError:
        p.error(f"--workers takes comma-separated integers, got {args.workers!r}")
    if not args.worker_counts or min(args.worker_counts) < 1:
        p.error("--workers needs at least one value >= 1")
    if args.repeat_corpus < 1 or args.dupe_factor < 1:
        p.error("--repeat_corpus and --dupe_factor must be >= 1")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    with common.work_dir(args.work_dir, "bench_pretrain_data_") as work_dir:
        return _benchmark(args, work_dir)


def _benchmark(args, work_dir: str) -> dict:
    machine = machine_info()
    log(f"work dir {work_dir}; {machine['cores']} cores, {machine['cpu_model']}")
    corpus = prepare_corpus(args, work_dir)
    log(f"corpus: {len(corpus.files)} files, {corpus.bytes / MIB:.1f} MiB, {corpus.lines} sentences, "
        f"{corpus.documents} documents (x{args.repeat_corpus}) <- {corpus.pattern}")
    vocab = prepare_vocab(args, corpus, work_dir)
    with open(vocab, "rb") as f:
        vocab_bytes = f.read()
    vocab_size = len(vocab_bytes.decode("utf-8").splitlines())
    log(f"vocabulary: {vocab_size} tokens <- {vocab}")
    if machine["cores"] < max(args.worker_counts) + 1:
        log(f"note: {machine['cores']} cores for {max(args.worker_counts)} workers plus the "
            f"runner process: the runs with most workers share cores")

    # Timed runs one after another; TensorFlow is imported into this process only afterwards,
    # so it cannot compete with the tools being measured.
    runs = [run_model_garden(corpus, vocab, work_dir, args.dupe_factor)] if args.model_garden else []
    for workers in args.worker_counts:
        runs.append(run_ours(args, corpus, vocab, work_dir, args.dupe_factor, workers))
    scaling = scaling_runs(args, corpus, vocab, work_dir, runs) if args.scaling_repeats > 0 else None
    startups: List[Optional[Run]] = [None] * len(runs)
    if args.measure_startup:
        tiny = startup_corpus(corpus, work_dir)
        startups = [run_model_garden(tiny, vocab, work_dir, 1, name="startup_model_garden")] if args.model_garden else []
        for workers in args.worker_counts:
            startups.append(run_ours(args, tiny, vocab, work_dir, 1, workers, name="startup_ours"))

    log("reading the outputs back with tf.data")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for run in runs + [s for s in startups if s is not None]:
        run.written = tfrecord_summary(run.output_files)
        if run.reported_instances is not None and run.reported_instances != run.written["instances"]:
            log(f"warning: {run.tool} w={run.workers} reports {run.reported_instances} instances "
                f"but its shards hold {run.written['instances']}")
    ours_digests = {r.workers: files_digest(r.output_files) for r in runs if r.tool == "ours"}
    identical = len(set(ours_digests.values())) == 1 if len(ours_digests) > 1 else None

    records = [run_record(r, s) for r, s in zip(runs, startups)]
    ratio_rows = ratios(records)
    print()
    print(f"BERT pretraining data: dupe_factor={args.dupe_factor}, corpus x{args.repeat_corpus} "
          f"({len(corpus.files)} files, {corpus.bytes / MIB:.1f} MiB, {corpus.documents} documents, "
          f"{corpus.lines} sentences), vocabulary {vocab_size}, {machine['cores']} cores")
    print(format_report(records, ratio_rows))
    if identical is not None:
        print(f"ours: shards byte-identical across worker counts {sorted(ours_digests)}: "
              f"{'yes' if identical else 'NO (breaks the determinism contract)'}")
    if scaling is not None:
        print(f"ours w={scaling['workers']} against w=1, {len(scaling['pairs'])} pairs of runs (wall s, "
              f"the main runs first): " + ", ".join(f"{a:.1f}/{b:.1f}={a / b:.2f}" for a, b in scaling["pairs"])
              + f"; median w=1 {scaling['median_w1_s']:.1f} s / median w={scaling['workers']} "
              f"{scaling['median_wn_s']:.1f} s = speed-up {scaling['median_speedup']:.2f}")
    busy = [r for r in records if r["other_load_cores"] > 0.1]
    if busy:
        print("note: other processes were busy during " + ", ".join(
            f"{_name(r)} ({r['other_load_cores']:.2f} cores)" for r in busy)
            + ": compare CPU-second figures, not wall-clock ones")
    print(flush=True)

    result = {
        "benchmark": "pretrain_data",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": ["python", "-m", "benchmarks.pretrain_data", *(args.argv or [])],
        "machine": machine,
        "params": dict(PARAMS, dupe_factor=args.dupe_factor, repeat_corpus=args.repeat_corpus,
                       num_shards_ours=args.num_shards),
        "corpus": {**dataclasses.asdict(corpus), "repeat": args.repeat_corpus},
        "vocab": {"path": vocab, "size": vocab_size,
                  "sha256": "sha256:" + hashlib.sha256(vocab_bytes).hexdigest()},
        "runs": records,
        "ratios_ours_over_model_garden": ratio_rows,
        "ours_identical_across_workers": identical,
        "scaling": scaling,
        "ours_digests": {str(k): v for k, v in ours_digests.items()},
    }
    return write_report(result, args.output_json)


if __name__ == "__main__":
    main()
