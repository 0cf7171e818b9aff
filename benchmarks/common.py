"""What the benchmarks share: the log line, machine-wide CPU accounting and the machine record.

Kept in one place so that two benchmark reports describe the machine and count other load the
same way, and a fix to one (a new psutil field, a container without sched_getaffinity) reaches both.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from typing import Callable, Iterable, Iterator, List, Optional

import psutil

from text import onednn

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg: str) -> None:
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


@contextlib.contextmanager
def work_dir(given: Optional[str], prefix: str) -> Iterator[str]:
    """The benchmark's working directory: `given` (created if missing, kept), or a new temporary
    directory that is removed when the benchmark ends, however it ends (exports and corpora of
    several hundred MB each were left behind in /tmp run after run)."""
    if given:
        os.makedirs(given, exist_ok=True)
        yield os.path.abspath(given)
        return
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def spawn_worker(module: str, name: str, work: str, argv: List[str]) -> dict:
    """`python -m module ARGV --_worker=name --_work=work` in a fresh process (a benchmark's
    contenders each in their own: TensorFlow's and torch's thread pools in one process slow
    each other down); returns the JSON the worker wrote to work/<name>.json."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", module, *argv, f"--_worker={name}",
                           f"--_work={work}"],
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {name} failed:\n{proc.stderr[-4000:]}")
    with open(os.path.join(work, f"{name}.json")) as f:
        out = json.load(f)
    log(f"{name}: done in {time.perf_counter() - started:.0f} s")
    return out


def timed(fn: Callable[[], object], warmup: int, reps: int) -> dict:
    """``fn`` called ``warmup`` times untimed (the first call's time kept as first_call_s: it
    traces and compiles; None without warmup), then ``reps`` timed calls: their median, minimum
    and times."""
    first = None
    for i in range(warmup):
        started = time.perf_counter()
        fn()
        if i == 0:
            first = time.perf_counter() - started
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return {"first_call_s": first, "median_s": float(statistics.median(times)), "min_s": min(times),
            "reps": reps, "times_s": times}


def spawn_logged(module: str, name: str, config: str, argv: List[str], work: str) -> dict:
    """`python -m module --_worker NAME --_result FILE ARGV` run from the repository root with its
    output in work/<config>-<name>.log; returns the JSON it wrote to work/<config>-<name>.json. A
    worker that fails raises RuntimeError with the last lines of its log."""
    result_path = os.path.join(work, f"{config}-{name}.json")
    log_path = os.path.join(work, f"{config}-{name}.log")
    cmd = [sys.executable, "-m", module, "--_worker", name, "--_result", result_path, *argv]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    log(f"{config}/{name}: starting (log {log_path})")
    started = time.perf_counter()
    with open(log_path, "wb") as out:
        rc = subprocess.call(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(log_path, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
        raise RuntimeError(f"{config}/{name} exited with {rc}; last lines of {log_path}:\n{tail}")
    with open(result_path) as f:
        result = json.load(f)
    log(f"{config}/{name}: done in {time.perf_counter() - started:.0f} s")
    return result


def batch_sizes(text: str) -> List[int]:
    """--batches' value, "1,32" -> [1, 32]."""
    return [int(b) for b in text.split(",")]


def add_latency_flags(p: argparse.ArgumentParser, tiny: str = "") -> None:
    """--batches (parsed to a list of ints), --warmup, --reps and --reps_batch32: what a latency
    benchmark times; and --tiny, with the help `tiny`, for a benchmark with a tiny twin."""
    if tiny:
        p.add_argument("--tiny", action="store_true", help=tiny)
    p.add_argument("--batches", default="1,32", type=batch_sizes,
                   help="batch sizes to time, comma-separated")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--reps", type=int, default=10, help="timed calls at batch < 8")
    p.add_argument("--reps_batch32", type=int, default=3, help="timed calls at batch >= 8")


def latency_reps(args, batch: int) -> int:
    """The timed calls at `batch` (add_latency_flags): --reps below batch 8, --reps_batch32
    from it."""
    return args.reps if batch < 8 else args.reps_batch32


def latency_settings(args, **more) -> dict:
    """The report's "settings" of a latency benchmark: add_latency_flags' values and `more`."""
    return {"warmup": args.warmup, "reps": args.reps, "reps_batch32": args.reps_batch32, **more}


def add_worker_flags(p: argparse.ArgumentParser, work_dir: bool = True) -> None:
    """The flags of a benchmark whose contenders run in spawn_worker's processes: --work_dir
    (unless ``work_dir`` is False), --output_json, and the hidden --_worker / --_work."""
    if work_dir:
        p.add_argument("--work_dir", default="", help="exports and worker results, kept when "
                                                      "given (default: a temporary directory, "
                                                      "removed at the end)")
    p.add_argument("--output_json", default="")
    p.add_argument("--_worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--_work", default="", help=argparse.SUPPRESS)


def worker_done(args, result: dict) -> dict:
    """In a worker process (--_worker=NAME --_work=DIR): writes ``result`` where spawn_worker
    reads it, DIR/NAME.json; returns it."""
    with open(os.path.join(args._work, f"{args._worker}.json"), "w") as f:
        json.dump(result, f)
    return result


def passed_on(argv: Iterable[str], *also: str) -> List[str]:
    """The command line the driver hands its workers: ``argv`` without its own flags
    (--output_json, --work_dir and ``also``)."""
    return [a for a in argv if not a.startswith(("--output_json", "--work_dir", *also))]


def busy_s(t) -> float:
    """Machine-wide busy CPU seconds from psutil.cpu_times() (steal counted separately)."""
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def usable_cores() -> int:
    # The cores this process may run on (a container or taskset can give fewer than the machine).
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _cpu_model() -> str:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


# The ISA extensions that decide TensorFlow's and torch's CPU kernels, as /proc/cpuinfo names
# them: AVX2, AVX-512, the int8 dot products (VNNI, 512- and 256-bit), AVX-512 BF16's bfloat16
# dot products and AMX's tiles with their bfloat16 and int8 multiplies. On the 2-core AMX Xeon,
# 2026-12-07: a 2048^3 matmul at 78 GFLOP/s in float32 and 497 in bfloat16 (torch.mm).
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
             "amx_int8")


def _cpu_features() -> str:
    """The ISA_FLAGS this CPU has, as /proc/cpuinfo lists them."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return " ".join(w for w in ISA_FLAGS if w in flags) or "no AVX2"
    except OSError:
        pass
    return "unknown"


def machine_info(distributions: Iterable[str]) -> dict:
    """CPU, cores, platform and the installed versions of `distributions` (None when absent)."""
    versions = {}
    for dist in distributions:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_features": _cpu_features(),
        # oneDNN changes every TensorFlow figure by up to 2x on AVX2-only hosts: name it
        "onednn": onednn.state(),
        "cores": usable_cores(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }


# The precisions a benchmark runs at (garden.train's train.precision names; mixed_float16 is
# for GPUs) and the dtype their matmuls compute in, which sets the peak MFU divides by.
PRECISIONS = ("float32", "mixed_bfloat16")
COMPUTE_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}


def precisions(text: str) -> List[str]:
    """--precision's value: one of PRECISIONS or several, comma-separated ("float32,mixed_bfloat16"
    runs every contender in both, side by side)."""
    names = [p for p in text.split(",") if p]
    unknown = [p for p in names if p not in PRECISIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"takes {' or '.join(PRECISIONS)}, comma-separated; "
                                         f"got {text!r}")
    return names


def hardware_line(machine: dict, precision: str) -> str:
    """The header every model benchmark prints first: the CPU, its ISA flags, the oneDNN state
    and the precision, e.g. 'CPU Intel(R) Xeon(R) Processor, 2 cores | avx2 avx512f ...
    amx_int8 | oneDNN on (...) | precision float32'."""
    return (f"CPU {machine['cpu_model']}, {machine['cores']} cores | {machine['cpu_features']} | "
            f"{machine['onednn']} | precision {precision}")


def best_time(call: Callable[[], object], seconds: float) -> tuple:
    """(best time, calls) of `call` repeated for `seconds` and at least 3 times."""
    best, total, reps = float("inf"), 0.0, 0
    while total < seconds or reps < 3:
        started = time.perf_counter()
        call()
        d = time.perf_counter() - started
        best, total, reps = min(best, d), total + d, reps + 1
    return best, reps


def matmul_peak(precision: str, shapes: Optional[dict] = None, seconds: float = 1.0,
                device: str = "cpu") -> dict:
    """This machine's matmul peak in `precision`'s compute dtype (COMPUTE_DTYPES), the MFU
    denominator of every benchmark: the best GFLOP/s, over `shapes` ({name: (m, k, n)};
    default a 2048 square on a CPU, 8192 on a GPU), of

    - tf_eager: tf.linalg.matmul called eagerly (oneDNN's kernel when oneDNN is on);
    - tf_graph: a tf.function of 8 products (a one-product tf.function is left alone by
      Grappler and runs Eigen's kernel: 38 against 78 GFLOP/s in float32 here);
    - torch: torch.mm (oneDNN for bfloat16 on a CPU; CUDA on a GPU when torch sees one), when
      torch is installed (the bench extra).

    On the 2-core AMX Xeon, 2026-12-07, 2048^3: float32 78 / 76 / 78, bfloat16 287 / 257 / 497.
    Each rate is the best of `seconds` of calls after one warm-up; each call ends by reading
    one element back, so that the product is finished and nothing large is copied.
    Returns {"precision", "dtype", "device", "rates": {"<library>_<shape>": {m, k, n,
    best_gflops, reps}}, "best_gflops", "best", "missing": [why a library was left out]}.
    """
    import importlib.util

    import tensorflow as tf

    dtype = COMPUTE_DTYPES[precision]
    gpu = device == "gpu"
    shapes = shapes or ({"square_8192": (8192, 8192, 8192)} if gpu else
                        {"square_2048": (2048, 2048, 2048)})
    rates, missing = {}, []
    torch = None
    if importlib.util.find_spec("torch") is None:
        missing.append("torch: not installed")
    else:
        import torch

        if gpu and not torch.cuda.is_available():
            missing.append(f"torch: {torch.__version__} sees no CUDA device")
            torch = None
        elif not gpu:
            torch.set_num_threads(usable_cores())

    @tf.function
    def chain(a, w):
        acc = tf.linalg.matmul(a, w)
        for i in range(7):
            acc += tf.linalg.matmul(a + tf.cast(i + 1, a.dtype), w)
        return acc[0, 0]

    def rate(call, flops: int) -> dict:
        call()
        best, reps = best_time(call, seconds)
        return {"best_gflops": flops / best / 1e9, "reps": reps}

    for name, (m, k, n) in shapes.items():
        with tf.device("/GPU:0" if gpu else "/CPU:0"):
            a = tf.cast(tf.random.stateless_normal([m, k], seed=[1, 2]), dtype)
            w = tf.cast(tf.random.stateless_normal([k, n], seed=[3, 4]), dtype)
            rates[f"tf_eager_{name}"] = dict(m=m, k=k, n=n, **rate(
                lambda: tf.linalg.matmul(a, w)[0, 0].numpy(), 2 * m * k * n))
            rates[f"tf_graph_{name}"] = dict(m=m, k=k, n=n, **rate(
                lambda: chain(a, w).numpy(), 8 * 2 * m * k * n))
        if torch is not None:
            where = "cuda" if gpu else "cpu"
            ta = torch.randn(m, k, device=where).to(getattr(torch, dtype))
            tw = torch.randn(k, n, device=where).to(getattr(torch, dtype))
            rates[f"torch_{name}"] = dict(m=m, k=k, n=n, **rate(
                lambda: torch.mm(ta, tw)[0, 0].item(), 2 * m * k * n))
    best = max(rates, key=lambda r: rates[r]["best_gflops"])
    return {"precision": precision, "dtype": dtype, "device": device, "rates": rates,
            "best_gflops": rates[best]["best_gflops"], "best": best, "missing": missing}


def best_peak(peaks: Iterable[dict]) -> dict:
    """The highest of several matmul_peak records of one precision (measured before and after
    the contenders: the machine's other load changes in between)."""
    return max(peaks, key=lambda p: p["best_gflops"])


def peak_line(peak: dict) -> str:
    """'peak bfloat16 matmul 497 GFLOP/s (torch_square_2048; tf_eager_square_2048 287, ...)'."""
    others = ", ".join(f"{k} {v['best_gflops']:.0f}" for k, v in peak["rates"].items()
                       if k != peak["best"])
    missing = f"; {'; '.join(peak['missing'])}" if peak["missing"] else ""
    return (f"peak {peak['dtype']} matmul {peak['best_gflops']:.0f} GFLOP/s ({peak['best']}; "
            f"{others}{missing})")


def timing_summary(warmup_s: float, wall_s: float, step_s: List[float], own_cpu_s: float,
                   busy_cpu_s: float, cpu_wall_s: float, first_loss, last_loss) -> dict:
    """One timed run's record: per-step times, own CPU and the other load on the machine.

    `cpu_wall_s` is the wall time the CPU figures were taken over (it can be a little wider than
    the timed steps, as around a whole `model.fit` call).
    """
    return {
        "warmup_s": warmup_s, "wall_s": wall_s, "step_s": step_s,
        "median_step_s": sorted(step_s)[len(step_s) // 2],
        "cpu_s": own_cpu_s, "cores_used": own_cpu_s / cpu_wall_s,
        "other_load_cores": max(0.0, busy_cpu_s - own_cpu_s) / cpu_wall_s,
        "first_loss": first_loss, "last_loss": last_loss,
    }


def print_report(report: dict, path) -> dict:
    """Prints `report` one "key: value" line each, then write_report(report, path)."""
    for key, value in report.items():
        print(f"{key}: {value}")
    return write_report(report, path)


def write_report(report: dict, path) -> dict:
    """Writes `report` as indented JSON to `path` when one is given; returns the report."""
    if path:
        with open(path, "w") as f:
            json.dump(report, f, indent=2)
        log(f"wrote {path}")
    return report


def pkg_resources_shim() -> None:
    """official.nlp.tasks imports tensorflow_hub, which wants pkg_resources.parse_version only;
    setuptools (pkg_resources) is not in the venv, so give it packaging's parse."""
    import importlib.util

    if importlib.util.find_spec("pkg_resources") is None:
        from packaging.version import parse

        sys.modules["pkg_resources"] = types.SimpleNamespace(parse_version=parse)


# BERT-base's sizes and tables, as the BERT benchmarks build it on every side.
BERT_BASE = dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072)
BERT_TABLES = dict(vocab_size=30522, max_sequence_length=512, type_vocab_size=2, dropout=0.1)


def adamw_settings(learning_rate: float) -> dict:
    """The training benchmarks' optimizer (their OPTIMIZER; the `settings` of garden_adamw,
    model_garden_adamw and keras_adamw): BERT's AdamW at `learning_rate`, weight decay 0.01,
    epsilon 1e-6, global-norm clip 1.0, a schedule of 10,000 steps with 100 of warmup."""
    return dict(learning_rate=learning_rate, weight_decay=0.01, epsilon=1e-6, clip_norm=1.0,
                train_steps=10_000, warmup_steps=100)


def model_garden_adamw(settings: dict):
    """Model Garden's optimizer as official/nlp/configs/experiments set it up for BERT:
    legacy AdamWeightDecay with its own global-norm clip, polynomial decay to 0 with linear
    warmup. `settings`: learning_rate, weight_decay, epsilon, clip_norm, train_steps,
    warmup_steps (the benchmark's OPTIMIZER, which our side gets too)."""
    from official.modeling import optimization

    config = optimization.OptimizationConfig({
        "optimizer": {"type": "adamw", "adamw": {
            "weight_decay_rate": settings["weight_decay"], "epsilon": settings["epsilon"],
            "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
            "gradient_clip_norm": settings["clip_norm"]}},
        "learning_rate": {"type": "polynomial", "polynomial": {
            "initial_learning_rate": settings["learning_rate"],
            "decay_steps": settings["train_steps"], "end_learning_rate": 0.0}},
        "warmup": {"type": "linear", "linear": {"warmup_steps": settings["warmup_steps"]}},
    })
    factory = optimization.OptimizerFactory(config)
    return factory.build_optimizer(factory.build_learning_rate())


class StepTimer:
    """Times `warmup` untimed then `steps` timed calls of `step()` (which must block)."""

    def __init__(self, warmup: int, steps: int):
        self.warmup, self.steps = warmup, steps

    def run(self, step) -> dict:
        t0 = time.perf_counter()
        first_loss = None
        for i in range(self.warmup):
            loss = step()
            first_loss = first_loss if first_loss is not None else loss
        warmup_s = time.perf_counter() - t0
        proc = psutil.Process()
        cpu0, machine0 = proc.cpu_times(), psutil.cpu_times()
        times, losses = [], []
        start = time.perf_counter()
        last = start
        for _ in range(self.steps):
            losses.append(step())
            now = time.perf_counter()
            times.append(now - last)
            last = now
        wall = last - start
        cpu1, machine1 = proc.cpu_times(), psutil.cpu_times()
        own = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        return timing_summary(warmup_s, wall, times, own, busy_s(machine1) - busy_s(machine0),
                              wall, first_loss, losses[-1])


def timed_steps(step, args, model) -> dict:
    """StepTimer's summary of `step` (args.warmup untimed, args.steps timed) with what each
    side's result also reports: the model's parameter count and dtype policy."""
    result = StepTimer(args.warmup, args.steps).run(step)
    result["parameters"] = int(model.count_params())
    result["policy"] = model.dtype_policy.name
    return result


def garden_adamw(model, settings: dict):
    """garden.optimization's AdamW as garden.train builds it, over the model's variables (call
    it in the strategy's scope). `settings`: learning_rate, train_steps, warmup_steps,
    weight_decay, epsilon (the benchmark's OPTIMIZER)."""
    from garden.optimization import create_optimizer

    opt = create_optimizer("adamw", settings["learning_rate"], settings["train_steps"],
                           settings["warmup_steps"], weight_decay=settings["weight_decay"],
                           epsilon=settings["epsilon"])
    opt.build(model.trainable_variables)
    return opt


def keras_adamw(settings: dict):
    """keras-hub's side: Keras AdamW on garden's warmup + polynomial decay schedule, with the
    global-norm clip and LayerNorm / bias excluded from weight decay (same `settings`, plus
    clip_norm)."""
    import keras

    from garden.optimization import WarmupPolynomialDecay

    opt = keras.optimizers.AdamW(
        learning_rate=WarmupPolynomialDecay(settings["learning_rate"], settings["train_steps"],
                                            settings["warmup_steps"]),
        weight_decay=settings["weight_decay"], epsilon=settings["epsilon"],
        global_clipnorm=settings["clip_norm"])
    opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return opt


def garden_step(strategy, task, model, opt, batch: dict, clip_norm: float, jit_compile: bool):
    """garden.train's step (garden.training.step.make_train_step: one replica, no accumulation)
    over one synthetic batch, repeated. Returns (step, train_step, compiled_gradients, iterator):
    step() runs one training step and, as garden.train's loop does, brings every metric back to
    Python; it returns the loss."""
    import tensorflow as tf

    from garden.training.step import make_train_step

    train_step, compiled_gradients = make_train_step(strategy, task, model, opt, 1, clip_norm,
                                                     jit_compile)
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: dataset))

    def step():
        return {k: float(v) for k, v in train_step(iterator).items()}["loss"]

    return step, train_step, compiled_gradients, iterator


def model_garden_step(task, model, opt, metrics, batch, jit_compile: bool = False):
    """tf-models-official's side: its Task.train_step over one synthetic batch, repeated, in
    Orbit's loop (the batch comes from the iterator inside the traced step). Returns step(),
    which runs one training step, brings its logs back to Python and returns the loss."""
    import tensorflow as tf

    iterator = iter(tf.data.Dataset.from_tensors(batch).repeat())

    @tf.function(jit_compile=jit_compile)
    def train_step(inputs):
        return task.train_step(inputs, model, opt, metrics)

    @tf.function
    def run(iterator):
        return train_step(next(iterator))

    def step():
        return {k: float(v) for k, v in run(iterator).items()}["loss"]

    return step


def fit_timed(model, dataset, args) -> dict:
    """model.fit for `args.warmup` steps, then a second fit of `args.steps` timed by a callback."""
    import keras

    class Times(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends, self.losses = [], []

        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                self.begin = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())
            self.losses.append(float(logs["loss"]))

    t0 = time.perf_counter()
    first = Times()
    model.fit(dataset, steps_per_epoch=args.warmup, epochs=1, verbose=0, callbacks=[first])
    warmup_s = time.perf_counter() - t0
    timer = Times()
    proc = psutil.Process()
    cpu0, machine0 = proc.cpu_times(), psutil.cpu_times()
    model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0, callbacks=[timer])
    cpu1, machine1 = proc.cpu_times(), psutil.cpu_times()
    starts = [timer.begin] + timer.ends[:-1]
    times = [e - s for s, e in zip(starts, timer.ends)]
    wall = timer.ends[-1] - timer.begin
    # CPU and load are over the whole second fit call (a little wider than the timed steps).
    fit_wall = sum(times) + 1e-9
    own = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return timing_summary(warmup_s, wall, times, own, busy_s(machine1) - busy_s(machine0),
                          fit_wall, first.losses[0], timer.losses[-1])
