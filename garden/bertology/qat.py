"""Quantization-aware fine-tuning (Q8BERT, Zafrir et al. 2019) of a fine-tuned classifier,
exported so that LiteRT runs its fully connected layers in int8, and scored against float and
post-training int8 on the run's eval file.

    python -m garden.bertology.qat --model_dir=RUN --output_dir=QAT_RUN [--train_steps=300]
        [--batch_size=16] [--learning_rate=2e-5] [--warmup_steps=0]
        [--calibration_examples=128] [--decay=0.99] [--seed=42]

RUN is a garden.train run of garden.Classification (a regression or another task is refused,
and so is a backbone without fully connected layers, e.g. the LSTM families). The command:
  1. restores the run's model and scores it (float);
  2. makes the post-training int8 LiteRT models of it: the dynamic-range one of
     `python -m garden.bertology.int8` (int8 weights, activations quantized at run time), and the
     static one (every fully connected layer an int8 kernel on int8 activations, ranges
     calibrated on --calibration_examples train rows; the rest float32);
  3. trains the run on for --train_steps steps with Q8BERT's fake quantization
     (garden/bertology/quantization_aware.py: int8-rounded weights and fully-connected inputs,
     straight-through gradients, activation ranges by moving average) through garden.train's
     trainer, into QAT_RUN (checkpoints, summary.json: a run of its own, resumable);
  4. converts the QAT model to LiteRT with its rounding in the graph (the same int8 layout as
     the static model of step 2) and scores the fake-quantized Keras model and the LiteRT model.
It prints the table and writes QAT_RUN/qat.json and the three .tflite files. The LiteRT models
take int32 ids [B, max_seq_length] (token_ids, segment_ids, padding_mask) and give the logits,
as garden.bertology.int8's does (the text is packed outside: TextPacker.encode_numpy).

Measured on the real all-MiniLM-L6-v2 fine-tuned on the sample task (docs/bertology.md,
"Quantization-aware fine-tuning (Q8BERT)"): float 428 of 451 dev texts right, post-training
dynamic range 427, post-training int8 fully connected 425, QAT int8 427, 427 and 425 in three
runs of 300 steps; the int8 LiteRT models about 3x faster than float32 LiteRT at batch 32.

The optimizer, clipping, weight decay and schedule are the run's (its operative config); the
step count, batch, peak learning rate and warmup are these flags (Q8BERT fine-tunes its
quantized model with the float recipe; a run that is already fine-tuned needs fewer steps and
a lower rate).

Python:
    from garden.bertology.qat_settings import QatSettings
    from garden.bertology.quantization_aware import run_qat, table
    print(table(run_qat("runs/sst2", "runs/sst2_qat", QatSettings(train_steps=200))))
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable, Optional

from garden.bertology.qat_settings import QatSettings
from text.flags import add_option_flags, options_from_args


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m garden.bertology.qat",
        description="Quantization-aware fine-tuning (Q8BERT) of a garden.train classification "
                    "run: LiteRT int8 models and float / post-training int8 / QAT int8 dev "
                    "accuracy.")
    parser.add_argument("--model_dir", required=True,
                        help="a garden.train run directory of garden.Classification")
    parser.add_argument("--output_dir", required=True,
                        help="the QAT run's directory (checkpoints, qat.json, .tflite files)")
    add_option_flags(parser, QatSettings)
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        settings = options_from_args(QatSettings, args)
    except ValueError as e:
        parser.error(str(e))
    # After parsing: --help and usage errors answer before TensorFlow and Keras load.
    from garden.bertology import quantization_aware

    try:
        report = quantization_aware.run_qat(args.model_dir, args.output_dir, settings)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(quantization_aware.table(report))
    print(f"[qat] wrote {report['report']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
