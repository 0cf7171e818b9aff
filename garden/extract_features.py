"""Per-token hidden states of chosen layers, for feature-based use (BERT's extract_features).

    python -m garden.extract_features --model_dir=RUN_DIR --input=FILE --output=OUT.jsonl \\
        [--layers=-1,-2,-3,-4] [--numpy=OUT.npz] [--max_seq_length=128] [--batch_size=32]

The backbone and its vocabulary come from either
  * --model_dir: a garden.train run, pretraining or fine-tuning (its operative_config.gin names
    the task's backbone factory, vocabulary and casing; the newest checkpoint's `backbone` is
    restored; a task that checkpoints only its GenerativeLM, as T5 pretraining, gives the LM's
    backbone; a backbone without hidden states, as T5's, is refused by name), or
  * --init_checkpoint=PATH (a checkpoint prefix or a run's model_dir) with --config=GIN (a
    model size file such as configs/models/bert_tiny.gin, plus --gin_param bindings),
    --backbone=FACTORY (backbone), --vocab=FILE and --checkpoint_object (backbone;
    ELECTRA: discriminator), or
  * --init_checkpoint=OUT, a garden.convert output directory (garden/pretrained.py): the
    backbone of its recorded architecture, its `backbone` weights, its tokenizer, casing and
    text layout; no --config or --vocab needed (a binding that contradicts it is refused).
A --model_dir run fine-tuned from such a directory is read the same way (its architecture).

Input: one example per line, UTF-8; "text_a ||| text_b" for a pair (BERT's convention);
blank lines are skipped and counted. Text is packed exactly as fine-tuning packs it
(garden.serving.text.TextPacker: [CLS] A [SEP] (B [SEP]), truncated to max_seq_length).

Output (BERT's JSON Lines format), one line per example:
    {"linex_index": i, "features": [{"token": "[CLS]", "layers": [{"index": -1,
      "values": [0.1, ...]}, ...]}, ...]}
with the real (unpadded) tokens only, values rounded to 6 decimals as BERT writes them.
Layer indices: negative count from the last layer (-1 = the last encoder layer, as in BERT);
0 is the embedding output and i >= 1 the output of encoder layer i.
--numpy=FILE.npz also writes float32 arrays `layer_<index>` [N, T, H] (padded, unrounded),
`token_ids` and `padding_mask` int32 [N, T] and `line_numbers` [N].
Progress (examples done, rate) goes to stderr every --progress_seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import List, Optional, Sequence, Tuple

import numpy as np


def parse_layers(text: str) -> List[int]:
    try:
        layers = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated integers, got {text!r}") from None
    if not layers:
        raise ValueError("--layers names no layer")
    return layers


def read_lines(path: str) -> Tuple[List[int], List[str], Optional[List[str]]]:
    """(line numbers, texts a, texts b or None) of the input file; a file that mixes single
    texts and ' ||| ' pairs is an error naming the first line of the other kind."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"input file not found: {path}")
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: invalid UTF-8") from None
    numbers, a, b = [], [], []
    for n, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        parts = line.split(" ||| ")
        if len(parts) > 2:
            raise ValueError(f"{path}:{n}: more than one ' ||| ' separator")
        numbers.append(n)
        a.append(parts[0])
        b.append(parts[1] if len(parts) == 2 else None)
    if not numbers:
        raise ValueError(f"{path} has no non-blank lines")
    pairs = [x is not None for x in b]
    if any(pairs) and not all(pairs):
        odd = numbers[pairs.index(not pairs[0])]
        raise ValueError(f"{path}:{odd}: mixes single texts and 'text_a ||| text_b' pairs; "
                         f"use one kind per file")
    return numbers, a, (b if pairs[0] else None)


def build_parser() -> argparse.ArgumentParser:
    from text.flags import add_bool

    p = argparse.ArgumentParser(prog="python -m garden.extract_features",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", help="a garden.train run directory")
    p.add_argument("--init_checkpoint", help="checkpoint prefix or model_dir (with --config)")
    p.add_argument("--config", action="append", default=[], help="model size gin file(s)")
    p.add_argument("--gin_param", action="append", default=[], help="extra gin binding(s)")
    p.add_argument("--backbone", default="backbone", help="gin backbone factory name")
    p.add_argument("--checkpoint_object", default="backbone",
                   help="object restored from --init_checkpoint (ELECTRA: discriminator)")
    p.add_argument("--vocab", help="vocabulary (default: the run's)")
    add_bool(p, "lower_case", None, "lower-case the text first (default: the run's, else "
             "--lower_case)", retired=["do_lower_case"])
    p.add_argument("--tokenizer", default=None, help="wordpiece | sentencepiece | bpe")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True, help="JSON Lines file")
    p.add_argument("--numpy", default=None, help="also write these arrays as .npz")
    p.add_argument("--layers", default="-1,-2,-3,-4")
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--progress_seconds", type=float, default=10.0)
    return p


def open_backbone(args) -> Tuple[object, "runs.TextSettings", str]:
    """(backbone with hidden states, weights restored; its text settings with the flags'
    overrides; the checkpoint) of --model_dir or --init_checkpoint (module docstring)."""
    from garden import pretrained, runs

    if args.init_checkpoint and not pretrained.is_converted(args.init_checkpoint):
        return backbone_from_gin(args)
    if args.model_dir:
        run = runs.open(args.model_dir, [runs.MODEL_DIR], who="extract_features",
                        gin_params=args.gin_param)
        text = run.text
    else:  # a garden.convert directory: flags and bindings that contradict it are refused
        run = runs.open(args.init_checkpoint, [runs.CONVERTED], who="extract_features")
        pretrained.check_bindings(run.converted, gin_factory(args))
        _, vocab, lower_case, kind, layout = pretrained.text_settings(
            "garden.extract_features", args.init_checkpoint, args.vocab, args.lower_case,
            args.tokenizer)
        text = runs.TextSettings(vocab, kind, lower_case, layout)
    backbone = run.backbone(output_hidden_states=True, max_seq_length=args.max_seq_length)
    overrides = {"vocab": args.vocab, "lower_case": args.lower_case,
                 "tokenizer_kind": args.tokenizer}
    text = dataclasses.replace(text, **{k: v for k, v in overrides.items() if v is not None})
    return backbone, text, run.checkpoint


def gin_factory(args):
    """The --backbone factory, with --config and --gin_param parsed."""
    import gin

    from garden.models import factory as factories  # registers the gin factories

    gin.clear_config()
    with gin.unlock_config():  # checked by gin's finalize hooks, left unlocked for the caller
        gin.parse_config_files_and_bindings(args.config, args.gin_param)
    return getattr(factories, args.backbone)


def backbone_from_gin(args):
    """open_backbone of a checkpoint prefix or run directory with --config and --vocab."""
    from garden import pretrained, runs
    from garden.tasks.shared import make_backbone, restore_backbone

    factory = gin_factory(args)
    text = runs.TextSettings(args.vocab, args.tokenizer,
                             True if args.lower_case is None else args.lower_case)
    backbone = make_backbone(factory, text.packer(args.max_seq_length), output_hidden_states=True)
    ckpt = pretrained.resolve_checkpoint(args.init_checkpoint, args.checkpoint_object)
    restore_backbone(backbone, ckpt, args.checkpoint_object, "extract_features")
    return backbone, text, ckpt


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(list(argv) if argv is not None else None)
    if bool(args.model_dir) == bool(args.init_checkpoint):
        p.error("give exactly one of --model_dir and --init_checkpoint")
    from garden import pretrained

    if args.init_checkpoint and not pretrained.is_converted(args.init_checkpoint) and (
            not args.config or not args.vocab):
        p.error("--init_checkpoint needs --config (a model size gin file) and --vocab (or is "
                "a garden.convert output directory)")
    try:
        layers = parse_layers(args.layers)
        numbers, texts_a, texts_b = read_lines(args.input)
        backbone, text, ckpt = open_backbone(args)
        packer = text.packer(args.max_seq_length)
    except (ValueError, FileNotFoundError, AttributeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "hidden_states" not in backbone.output:  # an encoder-decoder: one stack a key
        print(f"error: {type(backbone).__name__} gives no single stack of hidden_states (it "
              f"gives {sorted(backbone.output)}): extract features of an encoder or a "
              f"decoder-only family", file=sys.stderr)
        return 2
    depth = int(backbone.output["hidden_states"].shape[0]) - 1
    bad = [i for i in layers if not -depth <= i <= depth]
    if bad:
        print(f"error: --layers {bad} outside the backbone's layers (-{depth}..{depth}; 0 is "
              f"the embeddings)", file=sys.stderr)
        return 2
    print(f"[extract_features] {len(numbers)} examples from {args.input}, layers {layers} of "
          f"{depth}, checkpoint {ckpt}", file=sys.stderr, flush=True)
    write_features(args, backbone, packer, text.tokens(), layers, numbers, texts_a, texts_b)
    print(f"[extract_features] wrote {args.output}" + (f" and {args.numpy}" if args.numpy else ""),
          file=sys.stderr, flush=True)
    return 0


def write_features(args, backbone, packer, tokens: List[str], layers: List[int],
                   numbers: List[int], texts_a: List[str], texts_b: Optional[List[str]]) -> None:
    """The JSON Lines file (written beside, then renamed into place) and the --numpy arrays."""
    import tensorflow as tf

    backbone_inputs = set(backbone.input) if isinstance(backbone.input, dict) else \
        set(packer.input_names)
    arrays = {f"layer_{i}": [] for i in layers} if args.numpy else None
    ids_all, masks_all = [], []
    start = last = time.time()
    tmp = args.output + ".tmp"
    with tf.io.gfile.GFile(tmp, "w") as out:
        for s in range(0, len(numbers), args.batch_size):
            batch_b = texts_b[s:s + args.batch_size] if texts_b is not None else None
            inputs = packer.encode_numpy(texts_a[s:s + args.batch_size], batch_b)
            # Only the backbone's own inputs (DistilBERT takes no segment_ids).
            states = backbone({k: inputs[k] for k in packer.input_names if k in backbone_inputs},
                              training=False)["hidden_states"]
            chosen = {i: np.asarray(states[i], np.float32) for i in layers}
            for r in range(len(inputs["token_ids"])):
                n = int(inputs["padding_mask"][r].sum())
                features = [{"token": tokens[int(t)],
                             "layers": [{"index": i,
                                         "values": [round(float(x), 6) for x in chosen[i][r, j]]}
                                        for i in layers]}
                            for j, t in enumerate(inputs["token_ids"][r][:n])]
                out.write(json.dumps({"linex_index": s + r, "features": features}) + "\n")
            if arrays is not None:
                for i in layers:
                    arrays[f"layer_{i}"].append(chosen[i])
                ids_all.append(inputs["token_ids"])
                masks_all.append(inputs["padding_mask"])
            now = time.time()
            done = min(s + args.batch_size, len(numbers))
            if now - last >= args.progress_seconds or done == len(numbers):
                print(f"[extract_features] {done}/{len(numbers)} examples, "
                      f"{done / max(now - start, 1e-9):.1f} examples/s", file=sys.stderr,
                      flush=True)
                last = now
    tf.io.gfile.rename(tmp, args.output, overwrite=True)
    if arrays is not None:
        np.savez(args.numpy, token_ids=np.concatenate(ids_all), line_numbers=np.asarray(numbers),
                 padding_mask=np.concatenate(masks_all),
                 **{k: np.concatenate(v) for k, v in arrays.items()})


if __name__ == "__main__":
    raise SystemExit(main())
