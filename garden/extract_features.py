"""Per-token hidden states of chosen layers, for feature-based use (BERT's extract_features).

    python -m garden.extract_features --model_dir=RUN_DIR --input=FILE --output=OUT.jsonl \\
        [--layers=-1,-2,-3,-4] [--numpy=OUT.npz] [--max_seq_length=128] [--batch_size=32]

The backbone and its vocabulary come from either
  * --model_dir: a garden.train fine-tuning run (its operative_config.gin names the task's
    backbone factory, vocabulary and casing; the newest checkpoint's `backbone` is restored), or
  * --init_checkpoint=PATH (a checkpoint prefix or a run's model_dir) with --config=GIN (a
    model size file such as configs/models/bert_tiny.gin, plus --gin_param bindings),
    --backbone=FACTORY (bert_backbone), --vocab=FILE and --checkpoint_object (backbone;
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
import json
import posixpath
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


def backbone_from_run(model_dir: str, gin_params: Sequence[str]):
    """(backbone factory, vocab, lower_case, tokenizer kind, checkpoint prefix, checkpoint
    object, the garden.convert directory the run started from or None) of a fine-tuning
    run."""
    import gin
    import tensorflow as tf

    from garden import tasks, train  # noqa: F401 (registers train and the task table)

    tasks.register_with_gin()
    config = posixpath.join(model_dir, "operative_config.gin")
    if not tf.io.gfile.exists(config):
        raise FileNotFoundError(f"{model_dir} has no operative_config.gin: not a garden.train "
                                f"run directory (use --init_checkpoint with --config)")
    gin.clear_config()
    gin.parse_config_files_and_bindings([config], list(gin_params), skip_unknown=True)
    task = gin.query_parameter("train.task").scoped_configurable_fn()
    if not hasattr(task, "backbone_fn") or not hasattr(task, "vocab"):
        raise ValueError(f"{model_dir}: task {type(task).__name__} has no backbone factory and "
                         f"vocabulary (a fine-tuning run is needed; for a pretraining "
                         f"checkpoint use --init_checkpoint with --config and --vocab)")
    ckpt = tf.train.latest_checkpoint(posixpath.join(model_dir, "checkpoints"))
    if ckpt is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir}/checkpoints")
    kind = getattr(task, "tokenizer_kind", None) or getattr(task, "tokenizer", None)
    return (task.backbone_fn, task.vocab, task.lower_case, kind, ckpt, "backbone",
            getattr(task, "_converted", None))


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m garden.extract_features",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", help="a garden.train fine-tuning run directory")
    p.add_argument("--init_checkpoint", help="checkpoint prefix or model_dir (with --config)")
    p.add_argument("--config", action="append", default=[], help="model size gin file(s)")
    p.add_argument("--gin_param", action="append", default=[], help="extra gin binding(s)")
    p.add_argument("--backbone", default="bert_backbone", help="gin backbone factory name")
    p.add_argument("--checkpoint_object", default="backbone",
                   help="object restored from --init_checkpoint (ELECTRA: discriminator)")
    p.add_argument("--vocab", help="vocabulary (default: the run's)")
    p.add_argument("--lower_case", type=lambda s: s.lower() in ("1", "true", "yes"),
                   default=None, help="true/false (default: the run's, else true)")
    p.add_argument("--tokenizer", default=None, help="wordpiece | sentencepiece | bpe")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True, help="JSON Lines file")
    p.add_argument("--numpy", default=None, help="also write these arrays as .npz")
    p.add_argument("--layers", default="-1,-2,-3,-4")
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--progress_seconds", type=float, default=10.0)
    args = p.parse_args(list(argv) if argv is not None else None)
    if bool(args.model_dir) == bool(args.init_checkpoint):
        p.error("give exactly one of --model_dir and --init_checkpoint")
    from garden import pretrained

    try:
        converted = pretrained.open_converted(args.init_checkpoint) if args.init_checkpoint \
            else None
    except ValueError as e:  # converted by an older garden.convert
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.init_checkpoint and converted is None and (not args.config or not args.vocab):
        p.error("--init_checkpoint needs --config (a model size gin file) and --vocab (or is "
                "a garden.convert output directory)")
    try:
        layers = parse_layers(args.layers)
        numbers, texts_a, texts_b = read_lines(args.input)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import gin
    import tensorflow as tf

    from garden.serving.text import load_packer
    from garden.tasks.sentence_classification import resolve_init_checkpoint
    from garden.tasks.shared import make_backbone, restore_backbone

    layout = None
    try:
        if args.model_dir:
            factory, vocab, lower_case, kind, ckpt, obj, converted = backbone_from_run(
                args.model_dir, args.gin_param)
            if converted is not None:
                layout = converted.tokenizer.get("layout")
        elif converted is not None:
            from garden.models import factory as factories  # registers the gin factories

            gin.clear_config()
            gin.parse_config_files_and_bindings(args.config, args.gin_param)
            factory = getattr(factories, args.backbone)
            _, vocab, lower_case, kind, layout = pretrained.text_settings(
                "garden.extract_features", args.init_checkpoint, args.vocab, args.lower_case,
                args.tokenizer)
            ckpt, obj = converted.checkpoint, "backbone"
        else:
            from garden.models import factory as factories  # registers the gin factories

            gin.clear_config()
            gin.parse_config_files_and_bindings(args.config, args.gin_param)
            factory = getattr(factories, args.backbone)
            vocab, lower_case, kind, obj = args.vocab, True, args.tokenizer, args.checkpoint_object
            ckpt = resolve_init_checkpoint(args.init_checkpoint, obj)
    except (ValueError, FileNotFoundError, AttributeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    vocab = args.vocab or vocab
    lower_case = lower_case if args.lower_case is None else args.lower_case
    packer = load_packer(vocab, args.max_seq_length, kind=args.tokenizer or kind,
                         lower_case=lower_case, layout=layout)
    try:
        if converted is not None:  # the converted architecture, not the factory's preset
            backbone = pretrained.build_backbone(
                converted, factory, "extract_features", output_hidden_states=True,
                vocab_size=packer.vocab_size, max_seq_length=args.max_seq_length)
        else:
            backbone = make_backbone(factory, packer, output_hidden_states=True)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    restore_backbone(backbone, ckpt, obj, "extract_features")
    depth = int(backbone.output["hidden_states"].shape[0]) - 1
    bad = [i for i in layers if not -depth <= i <= depth]
    if bad:
        print(f"error: --layers {bad} outside the backbone's layers (-{depth}..{depth}; 0 is "
              f"the embeddings)", file=sys.stderr)
        return 2
    tokens = tokens_of(vocab, packer, args.tokenizer or kind, lower_case)
    backbone_inputs = set(backbone.input) if isinstance(backbone.input, dict) else \
        set(packer.input_names)
    print(f"[extract_features] {len(numbers)} examples from {args.input}, layers {layers} of "
          f"{depth}, checkpoint {ckpt}", file=sys.stderr, flush=True)

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
    print(f"[extract_features] wrote {args.output}" + (f" and {args.numpy}" if args.numpy else ""),
          file=sys.stderr, flush=True)
    return 0


def tokens_of(vocab: str, packer, kind, lower_case) -> List[str]:
    """Token strings by id (the vocabulary's own spelling)."""
    from data_pipelines import tokenizers

    tok = tokenizers.load_tokenizer(kind or tokenizers.detect_kind(vocab), vocab,
                                    lower_case=lower_case)
    return list(tok.vocab.tokens)


if __name__ == "__main__":
    raise SystemExit(main())
