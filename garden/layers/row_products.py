"""Products by large kernels, split so that the cores share them when ops are single-threaded.

A decode step multiplies one row per sequence by every kernel of the model: matrix-vector
products whose time is reading the weights from memory (GPT-2 small: 497 MB a step at batch 1).
TensorFlow's MatMul spreads such a product over its intra-op threads poorly: 12 layers' block
products and the tied logits at one row, weights from memory, took 25.0 ms with TensorFlow's
default threads and 37.6 ms on one thread, where torch took 18.0 and 34.6 (2-core machine,
quiet, median of 40 calls; benchmarks/README.md `generation`). Split along the kernel's input
rows into `parts` slices (a slice along axis 0 shares the kernel's buffer: no copy), the partial
products are independent ops that TensorFlow's executor runs side by side on its inter-op
threads, and their sum is the product: the same chain took 20.7 ms with TensorFlow's intra-op
pool at one thread (each part then runs, on one core, on the thread that runs the op) and 23.4
ms with the default pools. So products are split only when the intra-op pool has one thread,
as `python -m garden.generate` sets it by default (`parts_for`): greedy generate calls of GPT-2
small at batch 1 ran at 31.7-38.8 tokens/s in four runs against 24.1-30.6 with the default
pools in the same runs (torch eager: 31.4-36.0).

The sum runs in another order than one MatMul's, so a split product equals the unsplit one up
to float rounding, not bit for bit. Only shapes known when the function is traced are split (a
decode loop's; a serving signature's unknown batch is not), and only kernels of at least
`MIN_WEIGHTS` values: small models decode as before, bit for bit.
"""

from __future__ import annotations

import os
from typing import Optional

import tensorflow as tf
from keras import ops

# A kernel smaller than this (2 MiB of float32) is not split: TensorFlow's oneDNN MatMul runs a
# product whose operands fit in about the L2 cache on one thread anyway, and splitting it adds
# ops that cost more than they share. GPT-2 small's q/k/v kernels (768 x 768) are above it.
MIN_WEIGHTS = 1 << 19


def _usable_cores() -> int:
    # What TensorFlow's inter-op pool has when set to 0 (its default): a thread per core.
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def parts_for(rows: Optional[int]) -> int:
    """How many parts a product of `rows` rows (None: unknown when traced) is split into, from
    TensorFlow's thread pools as configured in this process (1: not split).

    Only with the intra-op pool at one thread (garden.generate's default), where each op runs on
    the thread that runs it: every product of known rows is split in two per inter-op thread,
    which is how the cores share it at all (GPT-2 small, 2 cores, greedy: at batch 8 121.9
    tokens/s split in 4, 111.9 in 2, 87.1 not split; at batch 1 37.1 / 36.5-37.2 / 23.9; a
    512-token prompt's first pass is about 1.2x slower than with the default pools). With
    TensorFlow's default pools nothing is split: splitting products of up to 3 rows there gave
    GPT-2 small at batch 1 32.4 against 29.5 tokens/s, but T5-small 0.91x and batch 8 0.95x."""
    inter = tf.config.threading.get_inter_op_parallelism_threads() or _usable_cores()
    if rows is None or inter < 2 or tf.config.threading.get_intra_op_parallelism_threads() != 1:
        return 1
    return 2 * inter


def _split_points(size: int, parts: int):
    step = -(-size // parts)
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def weight_parts(rows: Optional[int], weights) -> int:
    """`parts_for(rows)` for a 2-D kernel or output table of at least MIN_WEIGHTS values, else 1
    (its product is not split)."""
    a, b = weights.shape
    if a is None or b is None or a * b < MIN_WEIGHTS:
        return 1
    return parts_for(rows)


def split_rows(weights, parts: int):
    """`weights`' slices along axis 0 in `parts` (about equal) parts; they share its buffer."""
    weights = tf.convert_to_tensor(weights)
    return [weights[a:b] for a, b in _split_points(weights.shape[0], parts)]


def _split_product(x, kernel, parts: int):
    kernel = tf.convert_to_tensor(ops.cast(kernel, x.dtype))
    return tf.add_n([tf.matmul(x[:, a:b], kernel[a:b])
                     for a, b in _split_points(kernel.shape[0], parts)])


def matmul(x, kernel):
    """x [R, K] times kernel [K, N]: ops.matmul, or, for a large kernel, rows known when traced
    and single-threaded ops (`parts_for`), the sum of the products of K-slices in x's dtype."""
    parts = weight_parts(x.shape[0], kernel)
    return ops.matmul(x, kernel) if parts == 1 else _split_product(x, kernel, parts)


def dense(layer, x):
    """A built keras.layers.Dense on rows x [R, K]: the layer's own call, or, where `matmul`
    would split its product, activation(split product + bias) as Dense computes it."""
    # A quantized or LoRA layer's call does more than x W + b: it keeps its own call.
    plain = getattr(layer, "quantization_mode", None) is None and \
        not getattr(layer, "lora_enabled", False)
    parts = weight_parts(x.shape[0], layer.kernel) if plain else 1
    if parts == 1:
        return layer(x)
    with tf.name_scope(layer.name):  # the ops named after the layer, as its own call names them
        y = _split_product(x, layer.kernel, parts)
        if layer.use_bias:
            y = y + ops.cast(layer.bias, y.dtype)
        return layer.activation(y) if layer.activation is not None else y
