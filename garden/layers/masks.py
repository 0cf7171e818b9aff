"""Attention masks as boolean tensors, True = this query may attend to this key.

The attention layers take a mask of rank 3, [B or 1, Tq or 1, Tk], and broadcast it over
the heads; every helper here returns that shape so masks combine with `merge_masks`:

    mask = merge_masks(padding_mask_to_attention(padding_mask),   # [B, 1, Tk]
                       causal_mask(Tq, Tk, offset=index))         # [1, Tq, Tk]
"""

from __future__ import annotations

from keras import ops


def padding_mask_to_attention(padding_mask):
    """[B, T] int or bool (1 = real token) -> bool [B, 1, T]: no query attends to padding.

    Padded query rows still attend to the real keys, so their outputs stay finite (nothing
    reads them). None (no padding) gives None, which merge_masks skips."""
    if padding_mask is None:
        return None
    return ops.expand_dims(ops.cast(padding_mask, "bool"), 1)


def causal_mask(query_length, key_length, offset=0):
    """bool [1, Tq, Tk]: query i (at absolute position offset + i) sees keys 0..offset + i.

    `offset` is the number of positions already decoded (the KV cache's update index), so
    a one-token step at position 5 over a 16-slot cache is causal_mask(1, 16, offset=5):
    keys 0..5 visible, 6..15 (not yet written) hidden. Lengths and offset may be tensors.
    """
    rows = ops.expand_dims(ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32"), 1)
    columns = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    return ops.expand_dims(ops.greater_equal(rows, columns), 0)


def merge_masks(*masks):
    """Logical AND of the masks that are not None (broadcast), as bool; None if all are."""
    merged = None
    for mask in masks:
        if mask is None:
            continue
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)
    return merged
