"""int8 against float32: a BERT classifier at 128 tokens, batch 1 and 32, in one run, and the
accuracy of each on a sample task.

Contenders (each family in its own process, one after the other, as benchmarks/serving_latency
runs them; timings are medians of `--reps` calls after `--warmup`):
- tf_float / tf_int8: the garden exports (garden.serving.export of a ClassificationServing, and
  garden.bertology.quantization.export_int8 of the same model: weight-only int8), loaded with
  tf.saved_model.load and called through `serving_ids` (the three int32 [B, 128] tensors).
- tflite_float / tflite_int8: garden.bertology.quantization.tflite_model of the same Keras model,
  float32 and dynamic-range (Optimize.DEFAULT), in tf.lite.Interpreter with one thread per core.
- torch_float / torch_int8: Hugging Face's BertForSequenceClassification in eval mode under
  torch.inference_mode, and torch.ao.quantization.quantize_dynamic of it ({nn.Linear}, qint8:
  int8 weights, activations quantized per call, fbgemm/onednn integer kernels).
The weights are the same for everyone: the Hugging Face model is made first (seeded) and
garden's model is converted from its state dict by garden.models.bert.conversion
(from_huggingface, the path `python -m garden.convert --source=huggingface` takes), the
classifier head copied ([2, H] -> kernel [H, 2]); the float logits of both are compared
(`parity_max_abs_diff`).

Latency model: BERT-base's shape (12 x 768, 30522 words) with random weights (`--tiny`: 2 x 32,
for a run in seconds). Accuracy model: a small BERT (2 x 128; `--tiny`: 2 x 32) fine-tuned in
torch for `--train_steps` on a synthetic sample task (8 words; label 1 when the sentence holds
more positive than negative words; 10% of the training labels flipped), then converted the same
way; accuracy of every contender on `--eval_size` held-out sentences, and its difference from
its own float32 (`accuracy_minus_float`: the 1-point criterion).

    python -m benchmarks.int8_latency --output_json=/tmp/int8_latency.json
    python -m benchmarks.int8_latency --tiny
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from typing import Dict, List

import numpy as np

from benchmarks import common
from benchmarks.common import log, timed, usable_cores, write_report

SEQ, LABELS = 128, 2
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
POSITIVE = ["good", "great", "fun", "fine", "nice", "superb"]
NEGATIVE = ["bad", "awful", "dull", "boring", "poor", "weak"]
# (hidden, layers, heads, ffn, vocab): the latency model and the accuracy model.
SHAPES = {"full": {"latency": (768, 12, 12, 3072, 30522), "accuracy": (128, 2, 2, 512, 0)},
          "tiny": {"latency": (32, 2, 4, 64, 1000), "accuracy": (32, 2, 4, 64, 0)}}


def _vocab(size: int) -> List[str]:
    fillers = [f"w{i}" for i in range(max(size - len(SPECIALS) - 12, 40))]
    return SPECIALS + POSITIVE + NEGATIVE + fillers


def sample_task(rng, n: int, vocab: List[str], noise: float = 0.0):
    """n sentences of 8 words (3-5 of them sentiment words) and their labels."""
    fillers = vocab[len(SPECIALS) + 12:len(SPECIALS) + 52]
    texts, labels = [], []
    for _ in range(n):
        k = int(rng.integers(3, 6))
        pos = int(rng.integers(0, k + 1))
        if 2 * pos == k:  # no ties
            pos += 1
        words = list(rng.choice(POSITIVE, pos)) + list(rng.choice(NEGATIVE, k - pos)) + \
            list(rng.choice(fillers, 8 - k))
        rng.shuffle(words)
        label = int(2 * pos > k)
        texts.append(" ".join(words))
        labels.append(1 - label if rng.random() < noise else label)
    return texts, np.asarray(labels)


def hf_model(shape, vocab_size: int, seed: int = 0):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    hidden, layers, heads, ffn, _ = shape
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=ffn, num_labels=LABELS)
    return BertForSequenceClassification(config).eval()


def garden_classifier(model):
    """garden's SequenceClassifier with the Hugging Face model's weights (see the docstring)."""
    from garden.models.bert.conversion import from_huggingface
    from garden.models.classification import SequenceClassifier

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    head = {k: state.pop(k) for k in [k for k in state if k.startswith("classifier.")]}
    backbone = from_huggingface(model.config.to_dict(), state)["backbone"]
    classifier = SequenceClassifier(backbone, num_classes=LABELS)
    classifier.classifier_dense.set_weights([head["classifier.weight"].T,
                                             head["classifier.bias"]])
    return classifier


def finetune_torch(model, ids: Dict[str, np.ndarray], labels, steps: int, batch: int = 32):
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    model.train()
    for _ in range(steps):
        rows = rng.integers(0, len(labels), batch)
        out = model(**_torch_inputs(ids, rows), labels=torch.tensor(labels[rows]))
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    return model.eval()


def _torch_inputs(ids, rows=None):
    import torch

    pick = (lambda v: v) if rows is None else (lambda v: v[rows])
    return {"input_ids": torch.tensor(pick(ids["token_ids"]), dtype=torch.long),
            "token_type_ids": torch.tensor(pick(ids["segment_ids"]), dtype=torch.long),
            "attention_mask": torch.tensor(pick(ids["padding_mask"]), dtype=torch.long)}


# ---------------------------------------------------------------------------------------------
# Workers


def _write_models(work: str, name: str, torch_model, vocab_path: str, packer) -> dict:
    """The float and int8 exports, the two .tflite files and the HF state dict of one model."""
    import torch

    from garden.bertology import quantization as int8
    from garden.serving import export
    from garden.serving.classification import ClassificationServing

    model = garden_classifier(torch_model)
    state_dict = os.path.join(work, f"{name}.pt")
    torch.save(torch_model.state_dict(), state_dict)
    base = os.path.join(work, "exports")
    make = lambda: ClassificationServing(model, packer, vocab_path, ["neg", "pos"],  # noqa: E731
                                         text_b=False)
    out = {"float": export.export(make(), base, f"{name}_float"),
           "int8": int8.export_int8(make(), base, f"{name}_int8")}
    for kind, quantize in (("tflite_float", False), ("tflite_int8", True)):
        out[kind] = os.path.join(work, f"{name}_{kind}.tflite")
        with open(out[kind], "wb") as f:
            f.write(int8.tflite_model(model, packer.input_names, SEQ, quantize=quantize))
    sizes = {"tf_float": _dir_bytes(os.path.join(out["float"], "variables")),
             "tf_int8": _dir_bytes(os.path.join(out["int8"], "variables")),
             "tflite_float": os.path.getsize(out["tflite_float"]),
             "tflite_int8": os.path.getsize(out["tflite_int8"])}
    return {"paths": out, "bytes": sizes, "config": torch_model.config.to_dict(),
            "state_dict": state_dict}


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))


def worker_build(work: str, args) -> dict:
    from text import tokenizers
    from garden.serving.text import TextPacker

    shapes = SHAPES["tiny" if args.tiny else "full"]
    out = {}
    for name in ("latency", "accuracy"):
        shape = shapes[name]
        vocab = _vocab(shape[4])
        vocab_path = os.path.join(work, f"{name}_vocab.txt")
        with open(vocab_path, "w", encoding="utf-8") as f:
            f.write("\n".join(vocab) + "\n")
        packer = TextPacker(tokenizers.load_tokenizer("wordpiece", vocab_path, lower_case=True),
                            SEQ)
        torch_model = hf_model(shape, len(vocab))
        if name == "accuracy":
            rng = np.random.default_rng(1)
            texts, labels = sample_task(rng, 4096, vocab, noise=0.1)
            started = time.perf_counter()
            finetune_torch(torch_model, packer.encode_numpy(texts), labels, args.train_steps)
            log(f"fine-tuned the accuracy model in {time.perf_counter() - started:.0f} s")
            eval_texts, eval_labels = sample_task(rng, args.eval_size, vocab)
            ids = packer.encode_numpy(eval_texts)
        else:  # 128 real tokens: random words, no padding
            rng = np.random.default_rng(0)
            text = " ".join(vocab[i] for i in rng.integers(len(SPECIALS), len(vocab), 200))
            ids, eval_labels = packer.encode_numpy([text]), None
            assert ids["padding_mask"].sum() == SEQ, "the text must fill 128 tokens"
        out[name] = _write_models(work, name, torch_model, vocab_path, packer)
        out[name]["ids"] = {k: v.tolist() for k, v in ids.items()}
        out[name]["labels"] = None if eval_labels is None else eval_labels.tolist()
    with open(os.path.join(work, "models.json"), "w") as f:
        json.dump(out, f)
    return {k: {"bytes": v["bytes"]} for k, v in out.items()}


def _models(work: str) -> dict:
    with open(os.path.join(work, "models.json")) as f:
        models = json.load(f)
    for m in models.values():
        m["ids"] = {k: np.asarray(v, np.int32) for k, v in m["ids"].items()}
    return models


def _batched(ids, b: int):
    return {k: np.repeat(v[:1], b, axis=0) for k, v in ids.items()}


def _measure(calls: Dict[str, object], models: dict, args) -> dict:
    """{contender: {"latency": {batch: timing}, "logits": accuracy-model logits}}; calls:
    contender -> (model record -> (ids -> logits))."""
    out = {}
    for name, load in calls.items():
        run = load(models["latency"])
        latency = {}
        for b in args.batches:
            ids = _batched(models["latency"]["ids"], b)
            latency[b] = timed(lambda: run(ids), args.warmup, common.latency_reps(args, b))
        log(f"{name}: " + ", ".join(f"b{b} {r['median_s'] * 1e3:.1f} ms"
                                    for b, r in latency.items()))
        logits = load(models["accuracy"])(models["accuracy"]["ids"])
        out[name] = {"latency": latency, "logits": np.asarray(logits).tolist()}
    return out


def worker_tf(work: str, args) -> dict:
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from garden.bertology import quantization as int8

    def export(kind):
        def load(m):
            fn = tf.saved_model.load(m["paths"][kind]).signatures["serving_ids"]
            return lambda ids: fn(**{k: tf.constant(v) for k, v in ids.items()})[
                "logits"].numpy()
        return load

    def lite(kind):
        def load(m):
            with open(m["paths"][kind], "rb") as f:
                run = int8.tflite_runner(f.read(), num_threads=usable_cores())
            return lambda ids: run(ids)["logits"]
        return load

    return _measure({"tf_float": export("float"), "tf_int8": export("int8"),
                     "tflite_float": lite("tflite_float"), "tflite_int8": lite("tflite_int8")},
                    _models(work), args)


def worker_torch(work: str, args) -> dict:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.set_num_threads(usable_cores())

    def load_model(m):
        model = BertForSequenceClassification(BertConfig(**m["config"])).eval()
        model.load_state_dict(torch.load(m["state_dict"]))
        return model

    def call(model):
        def run(ids):
            with torch.inference_mode():
                return model(**_torch_inputs(ids)).logits.numpy()
        return run

    models = _models(work)
    quantized = lambda m: torch.ao.quantization.quantize_dynamic(  # noqa: E731
        load_model(m), {torch.nn.Linear}, dtype=torch.qint8)
    out = _measure({"torch_float": lambda m: call(load_model(m)),
                    "torch_int8": lambda m: call(quantized(m))}, models, args)
    out["torch_quantized_engine"] = torch.backends.quantized.engine
    return out


WORKERS = {"build": worker_build, "tf": worker_tf, "torch": worker_torch}


spawn = functools.partial(common.spawn_worker, "benchmarks.int8_latency")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_latency_flags(p, tiny="2 x 32 models: a run in seconds")
    p.add_argument("--train_steps", type=int, default=300,
                   help="fine-tuning steps of the accuracy model (batch 32)")
    p.add_argument("--eval_size", type=int, default=1000)
    common.add_worker_flags(p)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.tiny and "--train_steps" not in " ".join(argv):
        args.train_steps = 100
    if args._worker:
        return common.worker_done(args, WORKERS[args._worker](args._work, args))
    with common.work_dir(args.work_dir, "int8_latency-") as work:
        return _compare(work, common.passed_on(argv), args)


def _compare(work: str, passed: List[str], args) -> dict:
    machine = common.machine_info(["tensorflow", "keras", "torch", "transformers",
                                   "ai-edge-litert"])
    header = common.hardware_line(machine, "float32 and int8 (weight-only / dynamic-range)")
    log(header)
    report = {"machine": machine, "header": header,
              "load_average_before": os.getloadavg(), "tiny": args.tiny,
              "shape": {"seq_length": SEQ, "batches": args.batches,
                        **{k: dict(zip(("hidden", "layers", "heads", "ffn", "vocab"), v))
                           for k, v in SHAPES["tiny" if args.tiny else "full"].items()}},
              "settings": common.latency_settings(args, train_steps=args.train_steps,
                                                  eval_size=args.eval_size)}
    report["bytes"] = spawn("build", work, passed)
    results = {**spawn("tf", work, passed), **spawn("torch", work, passed)}
    report["torch_quantized_engine"] = results.pop("torch_quantized_engine")
    labels = np.asarray(_models(work)["accuracy"]["labels"])
    accuracy = {k: float(np.mean(np.argmax(r["logits"], -1) == labels))
                for k, r in results.items()}
    ratios = {}
    for name, r in results.items():
        family = name.rsplit("_", 1)[0]
        for b, t in r["latency"].items():
            ratios[f"{name}_b{b}"] = {
                "ms": t["median_s"] * 1e3,
                "x_own_float": t["median_s"] / results[f"{family}_float"]["latency"][b][
                    "median_s"],
                "x_tf_float": t["median_s"] / results["tf_float"]["latency"][b]["median_s"]}
    report.update({
        "results": {k: r["latency"] for k, r in results.items()}, "ratios": ratios,
        "accuracy": accuracy,
        "accuracy_minus_float": {k: v - accuracy[k.rsplit("_", 1)[0] + "_float"]
                                 for k, v in accuracy.items()},
        "parity_max_abs_diff": float(np.max(np.abs(
            np.asarray(results["tf_float"]["logits"]) -
            np.asarray(results["torch_float"]["logits"])))),
        "load_average_after": os.getloadavg()})
    print(f"{'contender':18s} {'ms':>9s} {'x own fp32':>11s} {'x tf fp32':>10s}")
    for key, r in ratios.items():
        print(f"{key:18s} {r['ms']:9.1f} {r['x_own_float']:11.2f} {r['x_tf_float']:10.2f}")
    print("accuracy: " + ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items()) +
          f"; float parity tf vs torch {report['parity_max_abs_diff']:.2e}")
    print("bytes: " + json.dumps(report["bytes"]))
    return write_report(report, args.output_json)


if __name__ == "__main__":
    main()
