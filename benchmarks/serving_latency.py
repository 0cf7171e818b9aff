"""Serving latency of a BERT-base sentence classifier, 128 tokens, batch 1 and 32, in one run.

Contenders, on this machine's CPU cores, random weights (nothing downloaded), at each
`--precision` (float32, mixed_bfloat16 or both; see "Precision" below):
- ours, in-process: the garden export (garden.serving.export of a ClassificationServing over
  SequenceClassifier(bert_base), 2 labels, max_seq_length 128) loaded with
  tf.saved_model.load, called through its signatures: `serving_default` (raw text: tokenizer
  and packing in the graph) and `serving_ids` (int32 token_ids / segment_ids / padding_mask).
- ours over gRPC (grpc_text / grpc_ids): the same server process and model, after the HTTP
  timings, through TF Serving's PredictionService with tensorflow-serving-api's stub
  (Predict with a string tensor / the three int32 tensors).
- ours over HTTP: the same export served by `python -m garden.serve` (a separate process,
  warmup on) and called on one keep-alive connection: POST :predict with {"instances": texts}
  and {"signature_name": "serving_ids", "inputs": {...}}; the request bodies are encoded before
  the clock starts, the response is read whole inside it (JSON parsing of the answer is not).
- ours_inter1 / http_inter1: the same two with TensorFlow's inter-op pool at one thread
  (tf.config.threading in process; garden.serve's and TF Serving's
  --tensorflow_inter_op_parallelism=1): the ops of a call run one after the other, each on
  the intra-op pool, instead of independent ops (Q, K, V projections) side by side.
- Hugging Face torch eager: transformers' BertForSequenceClassification(BertConfig(), 2 labels)
  in eval mode under torch.inference_mode, with `torch.set_num_threads(cores)`.
- keras-hub: keras_hub.models.BertTextClassifier(BertBackbone of bert_base's shape,
  preprocessor=None), `predict_on_batch` (its compiled predict function).

Precision: at float32 every contender computes in float32. At mixed_bfloat16 the garden's
contenders read a bfloat16 export (garden.serving.export's precision='bfloat16': the same
model and weights built under Keras' mixed_bfloat16 policy, bfloat16 matmuls behind the float32
signatures; its garden_export.json's compute_dtype and matmul_dtypes are in the report), torch
runs under `torch.autocast('cpu', dtype=torch.bfloat16)` and keras-hub under Keras'
mixed_bfloat16 policy. With both precisions each contender runs in both before the next one
starts.
Inputs: the same ids for everyone (random word pieces, no padding: 128 real tokens); the raw
text is 200 synthetic words of a synthetic 30522-word vocabulary, so that it packs to the same
128 tokens.

The matmul limit: the forward's matmul FLOPs (encoder dense layers 2*B*T*L*(4H^2+2HF),
attention 2*B*L*2*T^2*H, pooler 2*B*H^2, classifier 2*B*H*C; embeddings, LayerNorm, softmax
and GELU not counted) divided by the best matmul rate of the precision's compute dtype
measured in this run, before and after the contenders (benchmarks.common.matmul_peak:
TensorFlow and torch.mm; a 2048 square and the forward's own [B*T, H] x [H, F] and
[B*T, H] x [H, H] shapes). No implementation can beat it on this machine; the ratio to it says
how much of the time goes elsewhere, and its inverse is the row's MFU.

The forward's matmuls alone (`forward_matmul_calls`, float32 only): the same runs also time
only the forward's matmuls, with its shapes and its 85M weights, back to back with nothing else
(TensorFlow and torch, best of the two runs). That is the fastest a batch can go: at batch 1
small products (12 heads of [128, 64] x [64, 128]) and weights streamed from memory keep it
above the limit. Each row reports its ratio to TensorFlow's (x tf matmuls).

Each contender runs in its own process, one after the other (TensorFlow's and torch's thread
pools in one process slow each other down).

Each timing is the median of `--reps` calls after `--warmup` calls (batch 32 uses
`--reps_batch32`). Other load on the machine (load average before and after) is recorded:
on a shared machine the figures are upper bounds.

    python -m benchmarks.serving_latency --output_json=/tmp/serving_latency.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import json
import os
import subprocess
import sys
import time
from typing import Callable, Dict, List

import numpy as np

from benchmarks import common
from benchmarks.common import latency_reps, log, timed, usable_cores, write_report

SEQ, LAYERS, HIDDEN, HEADS, FFN, VOCAB, LABELS = 128, 12, 768, 12, 3072, 30522, 2
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def forward_flops(batch: int, layers: int = LAYERS, hidden: int = HIDDEN, ffn: int = FFN) -> int:
    """Matmul FLOPs of one classifier forward (see the module docstring), BERT-base's unless
    other sizes are given."""
    dense = 2 * batch * SEQ * layers * (4 * hidden * hidden + 2 * hidden * ffn)
    attention = 2 * batch * layers * 2 * SEQ * SEQ * hidden
    return dense + attention + 2 * batch * hidden * hidden + 2 * batch * hidden * LABELS


def peak_shapes(batches: List[int]) -> Dict[str, tuple]:
    """A 2048 square and the forward's own feed-forward and projection products per batch."""
    shapes = {"square_2048": (2048, 2048, 2048)}
    for b in batches:
        shapes[f"ffn_b{b}"] = (b * SEQ, HIDDEN, FFN)
        shapes[f"qkv_b{b}"] = (b * SEQ, HIDDEN, HIDDEN)
    return shapes


@contextlib.contextmanager
def _flush_denormal(torch):
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def forward_matmul_calls(batch: int) -> Dict[str, Callable[[], object]]:
    """The forward's own matmuls alone, back to back, as one call per library.

    Per layer, in the forward's order and shapes: Q, K, V and output projections
    [B*T, H] x [H, H], scores [B, A, T, d] x [B, A, d, T], context [B, A, T, T] x [B, A, T, d],
    [B*T, H] x [H, F] and [B*T, F] x [F, H]; then the pooler and classifier. Each layer has its
    own weights (85M floats in all, as in the model: they do not stay in cache). No bias, no
    transpose, no softmax, no LayerNorm: the head split is a reshape (scrambled values, same
    FLOPs). One scalar rescale per layer (three small elementwise ops on [B*T, H]) keeps the
    values near 1: attention makes each layer cubic in its input, so without it they overflow
    or go denormal. TensorFlow: one tf.function over variables (oneDNN, as the model's
    matmuls); torch: F.linear (nn.Linear's weight layout) and torch.matmul under
    inference_mode, with flush-to-zero as TensorFlow's executor sets it (without it torch took
    2-4x longer here). Returns {"tf": call, "torch": call}; each call returns NumPy logits.
    """
    import tensorflow as tf
    import torch

    torch.set_num_threads(usable_cores())
    heads, width = HEADS, HIDDEN // HEADS
    rng = np.random.default_rng(0)

    def weight(k, n, scale=1.0):  # unit-variance outputs
        return (rng.standard_normal((k, n), np.float32) * scale / np.sqrt(k)).astype(np.float32)

    # Queries scaled by 1/sqrt(d T): scores near 1/sqrt(T), contexts near 1, every layer.
    layers = [[weight(HIDDEN, HIDDEN, 1 / np.sqrt(width * SEQ)), weight(HIDDEN, HIDDEN),
               weight(HIDDEN, HIDDEN), weight(HIDDEN, HIDDEN), weight(HIDDEN, FFN),
               weight(FFN, HIDDEN)] for _ in range(LAYERS)]
    heads_w = [weight(HIDDEN, HIDDEN), weight(HIDDEN, LABELS)]
    tf_layers = [[tf.Variable(w) for w in layer] for layer in layers]
    tf_heads = [tf.Variable(w) for w in heads_w]
    # torch: nn.Linear's [out, in] weights through F.linear, as BertForSequenceClassification
    # runs them (torch.mm on [in, out] weights measured 100 against 132 GFLOP/s for [768, 3072]).
    torch_layers = [[torch.from_numpy(w.T.copy()) for w in layer] for layer in layers]
    torch_heads = [torch.from_numpy(w.T.copy()) for w in heads_w]

    def forward(x, layer_weights, head_weights, mm, bmm, reshape, rescale):
        for wq, wk, wv, wo, w1, w2 in layer_weights:
            q, k, v = (reshape(mm(x, w), (batch, heads, SEQ, width)) for w in (wq, wk, wv))
            context = reshape(bmm(bmm(q, k, True), v, False), (batch * SEQ, HIDDEN))
            x = rescale(mm(mm(mm(context, wo), w1), w2))
        pooled = mm(reshape(x, (batch, SEQ, HIDDEN))[:, 0], head_weights[0])
        return mm(pooled, head_weights[1])

    tf_forward = tf.function(lambda x: forward(
        x, tf_layers, tf_heads, tf.linalg.matmul,
        lambda a, b, t: tf.linalg.matmul(a, b, transpose_b=t), tf.reshape,
        lambda a: a * tf.math.rsqrt(tf.reduce_mean(a * a))))

    def torch_forward(x):
        with torch.inference_mode(), _flush_denormal(torch):
            return forward(x, torch_layers, torch_heads, torch.nn.functional.linear,
                           lambda a, b, t: torch.matmul(a, b.transpose(-1, -2) if t else b),
                           lambda a, shape: a.reshape(shape),
                           lambda a: a * torch.rsqrt((a * a).mean()))

    x = rng.standard_normal((batch * SEQ, HIDDEN), np.float32)
    tx, px = tf.constant(x), torch.from_numpy(x)
    return {"tf": lambda: tf_forward(tx).numpy(), "torch": lambda: torch_forward(px).numpy()}


def forward_matmuls(batches: List[int], seconds: float) -> dict:
    """Best time of forward_matmul_calls per library and batch over `seconds` of calls."""

    def best_time(call) -> dict:
        out = call()
        best, reps = common.best_time(call, seconds)
        return {"best_s": best, "reps": reps, "finite": bool(np.isfinite(out).all())}

    out = {}
    for b in batches:
        for lib, call in forward_matmul_calls(b).items():
            out[f"{lib}_b{b}"] = best_time(call)
    return out


def classifier(preset: str = "bert_base"):
    """The benchmark's garden classifier: random weights from seed 0, so that every export of
    it gets the same ones, whatever the dtype policy it is built under."""
    import keras

    from garden.models.bert.presets import untrained_bert_backbone
    from garden.models.classification import SequenceClassifier

    keras.utils.set_random_seed(0)
    return SequenceClassifier(untrained_bert_backbone(preset, vocab_size=VOCAB),
                              num_classes=LABELS)


def make_export(work: str, precision: str) -> tuple:
    """A BERT-base classifier export at `precision` (the model built under that Keras policy,
    exported as garden.serving.export's float32 or bfloat16), its vocabulary and a text that
    packs to 128 tokens."""
    import keras

    from text import tokenizers
    from garden.serving import export
    from garden.serving.classification import ClassificationServing
    from garden.serving.text import TextPacker

    words = [f"w{i}" for i in range(VOCAB - len(SPECIALS))]
    vocab = os.path.join(work, "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(SPECIALS + words) + "\n")
    keras.mixed_precision.set_global_policy(precision)
    model = classifier()
    keras.mixed_precision.set_global_policy("float32")
    packer = TextPacker(tokenizers.load_tokenizer("wordpiece", vocab, lower_case=True), SEQ)
    rng = np.random.default_rng(0)
    text = " ".join(words[i] for i in rng.integers(0, len(words), 200))
    started = time.perf_counter()
    module = ClassificationServing(model, packer, vocab, ["a", "b"], text_b=False)
    # One model directory per precision: garden.serve serves a directory's newest version.
    path = export.export(module, os.path.join(work, "exports"),
                         f"bert_base_classifier_{precision}",
                         precision=common.COMPUTE_DTYPES[precision])
    log(f"exported {path} in {time.perf_counter() - started:.0f} s")
    return path, packer, text


def start_server(model_dir: str, log_path: str, inter_op: int = 0):
    """garden.serve on free REST and gRPC ports: (process, REST port, gRPC port)."""
    from garden.server.grpc_server import PORT_LINE as GRPC_PORT_LINE
    from garden.server.server import PORT_LINE

    out = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "garden.serve", "--rest_api_port=0", "--port=0",
                             "--model_name=bert", f"--model_base_path={model_dir}",
                             "--file_system_poll_wait_seconds=0",
                             f"--tensorflow_inter_op_parallelism={inter_op}"],
                            stdout=out, stderr=subprocess.STDOUT,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and proc.poll() is None:
        with open(log_path) as f:
            text = f.read()
        match, grpc_match = PORT_LINE.search(text), GRPC_PORT_LINE.search(text)
        if match and grpc_match:
            return proc, int(match.group(2)), int(grpc_match.group(2))
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"garden.serve did not start; see {log_path}")


# ---------------------------------------------------------------------------------------------
# Workers: each contender runs in its own process (TensorFlow's and torch's thread pools in one
# process slow each other down; a fresh process also starts every contender equally cold).


def _inputs(work: str, batches: List[int]):
    with open(os.path.join(work, "inputs.json")) as f:
        data = json.load(f)
    ids = {b: {k: np.asarray(v, np.int32) for k, v in data["ids"][str(b)].items()}
           for b in batches}
    return data["text"], ids, data["export_dirs"]


def export_dir(export_dirs: Dict[str, str], args) -> str:
    """The export a worker at args.precision reads."""
    return export_dirs[args.precision]


def worker_export(work: str, batches: List[int], args) -> dict:
    """One export per --precision; what each garden_export.json says it computes in."""
    import tensorflow as tf  # noqa: F401
    import tensorflow_text  # noqa: F401

    dirs, metadata = {}, {}
    for precision in args.precision:
        dirs[precision], packer, text = make_export(work, precision)
        with open(os.path.join(dirs[precision], "assets.extra", "garden_export.json")) as f:
            written = json.load(f)
        metadata[precision] = {k: written.get(k) for k in ("compute_dtype", "matmul_dtypes")}
    ids = {str(b): {k: v.tolist() for k, v in packer.encode_numpy([text] * b).items()}
           for b in batches}
    assert sum(ids[str(batches[0])]["padding_mask"][0]) == SEQ, "the text must fill 128 tokens"
    with open(os.path.join(work, "inputs.json"), "w") as f:
        json.dump({"text": text, "ids": ids, "export_dirs": dirs}, f)
    return {"export_dirs": dirs, "export_metadata": metadata}


def worker_peak(work: str, batches: List[int], args) -> dict:
    """The matmul peak of every --precision; the forward's matmuls alone in float32."""
    out = {"peaks": {p: common.matmul_peak(p, peak_shapes(batches), args.peak_seconds)
                     for p in args.precision}}
    if "float32" in args.precision:
        out["forward_matmuls"] = forward_matmuls(batches, args.peak_seconds)
    return out


def worker_ours(work: str, batches: List[int], args, inter_op: int = 0) -> dict:
    """inter_op: TensorFlow's inter-op pool (0: its default), as garden.serve's and TF
    Serving's --tensorflow_inter_op_parallelism set it; keys get the suffix _inter<N>."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    suffix = f"_inter{inter_op}" if inter_op else ""
    text, ids, export_dirs = _inputs(work, batches)
    loaded = tf.saved_model.load(export_dir(export_dirs, args))
    text_fn, ids_fn = loaded.signatures["serving_default"], loaded.signatures["serving_ids"]
    out = {"ours_text": {}, "ours_ids": {}}
    for b in batches:
        texts = tf.constant([text] * b)
        tensors = {k: tf.constant(v) for k, v in ids[b].items()}
        out["ours_text"][b] = timed(lambda: text_fn(text_a=texts)["logits"].numpy(),
                                    args.warmup, latency_reps(args, b))
        out["ours_ids"][b] = timed(lambda: ids_fn(**tensors)["logits"].numpy(),
                                   args.warmup, latency_reps(args, b))
    return {k + suffix: v for k, v in out.items()}


def worker_http(work: str, batches: List[int], args, inter_op: int = 0) -> dict:
    """The client side imports no TensorFlow: only the server process runs the model (with
    --tensorflow_inter_op_parallelism=inter_op; keys get the suffix _inter<N> when set)."""
    text, ids, export_dirs = _inputs(work, batches)
    proc, port, grpc_port = start_server(os.path.dirname(export_dir(export_dirs, args)),
                                         os.path.join(work, "serve.log"), inter_op)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def post(body: bytes):
        conn.request("POST", "/v1/models/bert:predict", body=body,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(data[:500])

    out = {"http_text": {}, "http_ids": {}}
    try:
        for b in batches:
            text_body = json.dumps({"instances": [text] * b}).encode()
            ids_body = json.dumps({"signature_name": "serving_ids", "inputs": {
                k: v.tolist() for k, v in ids[b].items()}}).encode()
            out["http_text"][b] = timed(lambda: post(text_body), args.warmup, latency_reps(args, b))
            out["http_ids"][b] = timed(lambda: post(ids_body), args.warmup, latency_reps(args, b))
        # The same server process and loaded model over TF Serving's gRPC API, with the stock
        # client stub; the request protos are built before the clock starts (as the JSON bodies
        # are), the response tensors decoded inside it (the HTTP bodies are only read).
        out.update(grpc_timings(grpc_port, text, ids, batches, args))
    finally:
        conn.close()
        proc.terminate()
        proc.wait(timeout=60)
    return {k + (f"_inter{inter_op}" if inter_op else ""): v for k, v in out.items()}


def grpc_timings(port: int, text: str, ids, batches: List[int], args) -> dict:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

    def request(signature: str, inputs: dict):
        message = predict_pb2.PredictRequest()
        message.model_spec.name, message.model_spec.signature_name = "bert", signature
        for name, value in inputs.items():
            message.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        return message

    def call(message):
        response = stub.Predict(message, timeout=600)
        return tf.make_ndarray(response.outputs["logits"])

    out = {"grpc_text": {}, "grpc_ids": {}}
    try:
        for b in batches:
            text_request = request("serving_default", {"text_a": [text] * b})
            ids_request = request("serving_ids", ids[b])
            reps = latency_reps(args, b)
            out["grpc_text"][b] = timed(lambda: call(text_request), args.warmup, reps)
            out["grpc_ids"][b] = timed(lambda: call(ids_request), args.warmup, reps)
    finally:
        channel.close()
    return out


def worker_torch(work: str, batches: List[int], args) -> dict:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    _, ids, _ = _inputs(work, batches)
    torch.manual_seed(0)
    torch.set_num_threads(usable_cores())
    model = BertForSequenceClassification(BertConfig(num_labels=LABELS)).eval()
    out = {"torch_eager": {}, "attention": getattr(model.config, "_attn_implementation", None),
           "threads": torch.get_num_threads()}
    bf16 = args.precision == "mixed_bfloat16"
    for b in batches:
        inputs = {"input_ids": torch.tensor(ids[b]["token_ids"], dtype=torch.long),
                  "token_type_ids": torch.tensor(ids[b]["segment_ids"], dtype=torch.long),
                  "attention_mask": torch.tensor(ids[b]["padding_mask"], dtype=torch.long)}

        def call():
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                        enabled=bf16):
                return model(**inputs).logits.float().numpy()

        out["torch_eager"][b] = timed(call, args.warmup, latency_reps(args, b))
    return out


def worker_keras_hub(work: str, batches: List[int], args) -> dict:
    import keras
    import keras_hub

    keras.mixed_precision.set_global_policy(args.precision)
    _, ids, _ = _inputs(work, batches)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=LAYERS, num_heads=HEADS, hidden_dim=HIDDEN,
        intermediate_dim=FFN, max_sequence_length=512)
    classifier = keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=LABELS,
                                                     preprocessor=None)
    out = {"keras_hub": {}}
    for b in batches:
        inputs = dict(ids[b])
        out["keras_hub"][b] = timed(lambda: classifier.predict_on_batch(inputs), args.warmup,
                                    latency_reps(args, b))
    return out


WORKERS = {"export": worker_export, "peak": worker_peak, "ours": worker_ours,
           "ours_inter1": functools.partial(worker_ours, inter_op=1),
           "http": worker_http, "http_inter1": functools.partial(worker_http, inter_op=1),
           "torch": worker_torch, "keras_hub": worker_keras_hub}


spawn = functools.partial(common.spawn_worker, "benchmarks.serving_latency")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_latency_flags(p)
    p.add_argument("--peak_seconds", type=float, default=2.0,
                   help="seconds of matmuls per shape (before and after the contenders)")
    p.add_argument("--contenders",
                   default="ours,ours_inter1,http,http_inter1,torch,keras_hub",
                   help="ours_inter1 / http_inter1: ours with TensorFlow's inter-op pool at 1 "
                        "thread (garden.serve --tensorflow_inter_op_parallelism=1)")
    p.add_argument("--precision", type=common.precisions, default=["float32"],
                   help="float32 or mixed_bfloat16, or both comma-separated (side by side)")
    common.add_worker_flags(p)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args._worker:
        if args._worker not in ("export", "peak"):
            (args.precision,) = args.precision  # a contender runs at one precision
        return common.worker_done(args, WORKERS[args._worker](args._work, args.batches, args))
    known = sorted(set(WORKERS) - {"export", "peak"})
    unknown = sorted(set(args.contenders.split(",")) - set(known))
    if unknown:  # before the export: a wrong name would fail only after minutes of work
        p.error(f"--contenders: unknown {unknown}; known: {known}")
    with common.work_dir(args.work_dir, "serving_latency-") as work:
        # A worker's --precision, appended to these, is the one it parses (argparse: the last).
        return _compare(work, common.passed_on(argv), args.batches, args)


def _compare(work: str, passed: List[str], batches: List[int], args) -> dict:
    """Every worker in turn on the shared export in `work`, the matmul peak before and after."""
    machine = common.machine_info(["tensorflow", "keras", "keras-hub", "torch", "transformers",
                                   "werkzeug"])
    header = common.hardware_line(machine, ",".join(args.precision))
    log(header)
    report = {"machine": machine, "header": header, "precisions": args.precision,
              "load_average_before": os.getloadavg(),
              "shape": {"seq_length": SEQ, "batches": batches},
              "settings": common.latency_settings(args)}
    every = ["--precision", ",".join(args.precision)]
    report.update(spawn("export", work, passed + every))
    peaks = [spawn("peak", work, passed + every)]
    results: Dict[str, Dict[str, Dict[str, dict]]] = {p: {} for p in args.precision}
    for name in args.contenders.split(","):
        for precision in args.precision:
            out = spawn(name, work, passed + ["--precision", precision])
            report.update({f"{name}_{precision}_{k}": v for k, v in out.items()
                           if not isinstance(v, dict)})
            results[precision].update({k: v for k, v in out.items() if isinstance(v, dict)})
            for key, per_batch in out.items():
                if isinstance(per_batch, dict):
                    log(f"{key} {precision}: " + ", ".join(
                        f"b{b} {r['median_s'] * 1e3:.1f} ms" for b, r in per_batch.items()))
    peaks.append(spawn("peak", work, passed + every))
    report.update({"matmul_peak": [p["peaks"] for p in peaks],
                   "forward_gflop": {b: forward_flops(b) / 1e9 for b in batches},
                   "load_average_after": os.getloadavg(), "precision": {}})
    floors = {}
    if "float32" in args.precision:
        # The forward's matmuls alone, best of the two runs per library: what batch b can reach.
        floors = {f"{lib}_b{b}": min(peak["forward_matmuls"][f"{lib}_b{b}"]["best_s"]
                                     for peak in peaks)
                  for lib in ("tf", "torch") for b in batches}
        report.update({"forward_matmuls": [p["forward_matmuls"] for p in peaks],
                       "forward_matmuls_best_s": floors})
    lines = [header]
    for precision in args.precision:
        peak = common.best_peak(p["peaks"][precision] for p in peaks)
        limits = {b: forward_flops(b) / (peak["best_gflops"] * 1e9) for b in batches}
        ratios = {}
        for name, per_batch in results[precision].items():
            for b_text, r in per_batch.items():
                b = int(b_text)
                row = {"ms": r["median_s"] * 1e3, "mfu": limits[b] / r["median_s"],
                       "x_matmul_limit": r["median_s"] / limits[b]}
                if floors:
                    row["x_tf_fp32_matmuls"] = r["median_s"] / floors[f"tf_b{b}"]
                for torch_precision in dict.fromkeys((precision, "float32")):
                    torch_rows = results.get(torch_precision, {}).get("torch_eager")
                    if torch_rows:
                        row[f"x_torch_{torch_precision}"] = (
                            r["median_s"] / torch_rows[b_text]["median_s"])
                own = results.get("float32", {}).get(name, {}).get(b_text)
                if precision != "float32" and own:
                    row["x_own_float32"] = r["median_s"] / own["median_s"]
                ratios[f"{name}_b{b}"] = row
        report["precision"][precision] = {
            "results": results[precision], "ratios": ratios, "peak": peak,
            "best_gflops": peak["best_gflops"], "matmul_limit_s": limits}
        lines.append(f"== {precision}: {common.peak_line(peak)}; matmul limit " +
                     ", ".join(f"b{b} {limits[b] * 1e3:.1f} ms" for b in batches))
        lines.append(f"export at {precision}: {report['export_metadata'][precision]}")
        columns = [c for c in ("x_torch_float32", "x_torch_mixed_bfloat16", "x_own_float32",
                               "x_tf_fp32_matmuls") if any(c in r for r in ratios.values())]
        lines.append(f"{'contender':24s} {'ms':>9s} {'MFU':>6s} {'x limit':>8s} " +
                     " ".join(f"{c:>{max(len(c), 8)}s}" for c in columns))
        for key, r in ratios.items():
            lines.append(f"{key:24s} {r['ms']:9.1f} {100 * r['mfu']:5.1f}% "
                         f"{r['x_matmul_limit']:8.2f} " + " ".join(
                             f"{r.get(c, float('nan')):>{max(len(c), 8)}.2f}" for c in columns))
    if floors:
        lines.append("the forward's float32 matmuls alone (best): " + ", ".join(
            f"{k} {v * 1e3:.1f} ms" for k, v in floors.items()))
    lines.append(f"load average before {report['load_average_before'][0]:.1f}, after "
                 f"{report['load_average_after'][0]:.1f}")
    print("\n".join(lines), flush=True)
    return write_report(report, args.output_json)


if __name__ == "__main__":
    main()
