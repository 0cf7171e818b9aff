"""int8 post-training quantization of a fine-tuned model: a TF Serving export with int8 weights,
and a LiteRT (TFLite) dynamic-range model for edge use.

What was measured first (benchmarks/int8_latency.py compares whole models). CPU: AMD EPYC,
family 26 (Zen 5), 2 cores, AVX-512 with VNNI and BF16; TensorFlow 2.20 with its oneDNN
custom operations on (the default here: "oneDNN custom operations are on"). One [R, 768] x
[768, 3072] product, per-channel symmetric int8 weights, median ms (shared machine, load
average about 4, so the figures are rough; where two runs differ both are shown):

                                               R = 128          R = 4096
    float32 MatMul (oneDNN)                    8.8 - 10.1       153 - 234
    weight-only: MatMul(x, Cast(Wq) * s)       5.9 - 10.2       147 - 233   (error 0.9% of max)
    weight-only: MatMul(x, Dequantize(Wq))     12.0             250
    dynamic int8: x quantized per row (abs-max), tf.linalg.matmul(int8, int8,
        output_type=int32) = BatchMatMulV3     21.7 - 37.5      688 - 1238  (1.1%)
    QuantizedMatMul quint8 x quint8 -> qint32 (gemmlowp), per-tensor ranges
                                               27.9             391         (1.8%)
    QuantizedMatMul quint8 x qint8             no CPU kernel registered
    QuantizedMatMulWithBias quint8 x qint8     12.2             107, but wrong results (error
        23,000x the output, with MIN_FIRST quint8 inputs of signed values; the cause was not
        found), and only under oneDNN: with TF_ENABLE_ONEDNN_OPTS=0 its stock kernel returns
        no output ("Missing 0-th output"), so a server built without oneDNN cannot run it.

So no formulation made of stock TensorFlow ops was faster than float32 on this CPU: the
int8 x int8 products tried were 2.5-5x slower than float32's oneDNN MatMul, and the one
oneDNN int8 kernel reachable from a SavedModel
gave wrong results for signed activations here and is absent without oneDNN. Keras 3's own
`model.quantize("int8")` (dynamic activations + the BatchMatMulV3 product) is the slow row
above, and on this garden's encoders it is also wrong: garden.layers.attention reads
`EinsumDense.kernel`, which returns the raw int8 kernel of a quantized layer, unscaled
(checked: a bert_tiny classifier's logits [-0.035, 0.006] became [0.053, -0.036]).

What this module builds, therefore:
- `export_int8`: the servable **weight-only** int8 export: every float weight of at least
  MIN_VALUES values (the dense and einsum kernels, the word and position tables) is stored
  as int8 with a float32 scale per last-axis (output) channel of a kernel, per row of an
  embedding table, and dequantized in the graph with Cast and Mul before the float32 MatMul.
  The variables on disk are about 4x smaller (BERT-base's 109.5M float32 values, 438 MB,
  become about 110 MB: computed, not measured); latency is
  float32's plus the dequantization, not lower (the BERT-base classifier's call at 128 tokens,
  measured here under the same load: batch 1 180 ms against 133 ms float32, batch 32 4.06 s
  against 3.96 s). The graph holds only stock ops (Cast, Mul, MatMul, ...; no `_`-prefixed
  oneDNN op, no custom op), checked by the exporter's check_serving_ops, and the signatures
  are the float export's, unchanged.
- `tflite_model`: a LiteRT dynamic-range model (TFLiteConverter, Optimize.DEFAULT): int8
  weights, and at run time activations quantized on the fly for integer kernels (whether
  that beats float32 on a CPU is what benchmarks/int8_latency.py measures). Its inputs are
  the token ids (token_ids, segment_ids, padding_mask int32 [B, T]), its output the logits:
  the tokenizer is tensorflow-text's ops, which the stock LiteRT interpreter does not have
  (tensorflow-text ships TFLite kernels for some of them, tensorflow_text.tflite_registrar
  AddFastWordpieceTokenize / AddFastBertNormalize, for an interpreter built with that op
  resolver; not tried here), so the text is packed outside it
  (garden.serving.text.TextPacker.encode_numpy, or the same vocabulary in the app).

How the int8 export is made: the task's ServingModule (the same class the float export uses,
so the signatures are the same functions) is traced inside a `keras.StatelessScope` whose
values for the model's float variables are the dequantized int8 variables (built in each
traced graph), so the traced graphs read the int8 variables and never the float ones; the
float Keras model is then untracked from the module, so the SavedModel holds only the int8
variables, their scales and the small float variables (biases, LayerNorm).

    python -m garden.bertology.int8 --model_dir=runs/sst2 [--export_base=exports]
        [--model_name=sst2_int8] [--tflite=sst2_int8.tflite]

Python:
    from garden.bertology.quantization import export_int8, tflite_model
    module = task.serving_module(model)            # e.g. ClassificationServing
    path = export_int8(module, "exports", "sst2_int8")
    open("m.tflite", "wb").write(tflite_model(model, packer.input_names, 128))
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable, Optional


def main(argv: Optional[Iterable[str]] = None) -> int:
    from text.flags import add_bool

    parser = argparse.ArgumentParser(
        prog="python -m garden.bertology.int8",
        description="int8 post-training quantization of a garden.train fine-tuning run: a TF "
                    "Serving export with int8 weights (same signatures as the float export) "
                    "and a LiteRT dynamic-range .tflite on token ids.")
    parser.add_argument("--model_dir", required=True, help="a garden.train run directory "
                        "(an export holds traced signatures, not the Keras layers to quantize)")
    parser.add_argument("--export_base", default=None, help="default: the run's export_base")
    parser.add_argument("--model_name", default=None, help="default: the run's model_name_int8")
    parser.add_argument("--tflite", default=None,
                        help="default: <export_base>/<model_name>-<version>.tflite")
    parser.add_argument("--min_values", type=int, default=None,
                        help="weights with fewer values stay float32 (default: "
                             "garden.bertology.quantization.MIN_VALUES)")
    add_bool(parser, "evaluate", True, "score the float model and the int8 export on the "
             "run's eval file (written beside the .tflite as .json)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    # After parsing: --help and usage errors answer before TensorFlow and Keras load.
    from garden.bertology import quantization

    min_values = quantization.MIN_VALUES if args.min_values is None else args.min_values
    try:
        out = quantization.quantize_run(args.model_dir, args.export_base, args.model_name,
                                        args.tflite, min_values, args.evaluate)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[int8] exported {out['export']}\n[int8] wrote {out['tflite']}")
    if "int8" in out:
        shown = [k for k, v in out["float"].items() if isinstance(v, float)]
        for name in ("float", "int8"):
            print(f"[int8] {name:5s} " + " ".join(f"{k} {out[name][k]:.4f}" for k in shown))
        print(f"[int8] wrote {out['report']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
