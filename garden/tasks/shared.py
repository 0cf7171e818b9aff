"""What the tasks share: phases of data, the batch index that keys per-batch randomness, the
TFRecord -> model input mapping and the mean of a task's metrics (pretraining-style tasks), and
the backbone of a fine-tuning task sized by its vocabulary and restored from a checkpoint
(make_backbone / restore_backbone: every fine-tuning task and garden.extract_features), and the
batches of a fine-tuning dataset held in memory (batches: the encoder and generative tasks).

Its own module because no task owns these: the pretraining records (garden/tasks/pretraining/),
the distillation task and the fine-tuning tasks all read it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Callable, Dict, List, Sequence

import tensorflow as tf

from garden import data
from garden.tasks.base import Stage


@dataclasses.dataclass(frozen=True)
class Phase:
    """One stretch of pretraining data: from `start_step` on, read `data_dir` (of that length)."""

    start_step: int
    data_dir: str
    max_seq_length: int


def phase(entry) -> Phase:
    """A Phase from a gin dict {"start_step", "data_dir", "max_seq_length"} (or a Phase)."""
    if isinstance(entry, Phase):
        return entry
    try:
        return Phase(int(entry["start_step"]), str(entry["data_dir"]), int(entry["max_seq_length"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"a pretraining phase needs start_step, data_dir and max_seq_length; "
                         f"got {entry!r}") from e


def phases(entries: Sequence, owner: str) -> List[Phase]:
    """Phases sorted by start step; the first must start at step 0 (`owner` names the binding)."""
    out = sorted((phase(p) for p in entries or ()), key=lambda p: p.start_step)
    if not out or out[0].start_step != 0:
        raise ValueError(f"{owner}.phases must start with a phase at start_step 0; got {entries!r}")
    return out


def phase_schedule(phase_list: Sequence[Phase], dirs: Sequence, train_steps: int,
                   dataset_fn: Callable) -> List[Stage]:
    """One Stage per phase that has steps; its dataset_fn reads that phase's data directory
    through ``dataset_fn(ddir, input_context, batch_size, seed, skip_batches)``."""
    out = []
    for i, (p, ddir) in enumerate(zip(phase_list, dirs)):
        end = min(phase_list[i + 1].start_step if i + 1 < len(phase_list) else train_steps,
                  train_steps)
        if p.start_step >= end:
            continue

        def fn(input_context, batch_size, seed, skip_batches, _d=ddir):
            return dataset_fn(_d, input_context, batch_size, seed, skip_batches)

        out.append(Stage(p.start_step, end, fn, f"{ddir.path} (max_seq_length {p.max_seq_length})",
                         tuple(ddir.files)))
    return out


def rows_schedule(make_dataset: Callable, rows: Sequence, train_steps: int,
                  train_file: str) -> List[Stage]:
    """One Stage over a task's training rows held in memory, for all train_steps; its
    dataset_fn reads them through the task's ``make_dataset(rows, batch_size, shuffle_seed=,
    repeat=True, skip=, input_context=)``."""
    def dataset_fn(input_context, batch_size, seed, skip_batches):
        return make_dataset(rows, batch_size, shuffle_seed=seed, repeat=True, skip=skip_batches,
                            input_context=input_context)

    return [Stage(0, train_steps, dataset_fn, train_file)]


def batch_index(ds: tf.data.Dataset, input_context, skip_batches: int) -> tf.data.Dataset:
    """(index, batch) pairs; index = the batch's position in the whole (unsharded) stream.

    garden.data.shard_batches skips `skip_batches` batches and deals the rest round-robin, so
    pipeline i of P reads batches skip + i, skip + i + P, ... The index keys per-batch
    randomness: it does not depend on the number of replicas or on where a run resumed.
    """
    pipelines = input_context.num_input_pipelines if input_context is not None else 1
    first = skip_batches + (input_context.input_pipeline_id if input_context is not None else 0)
    return ds.enumerate().map(lambda k, batch: (first + k * pipelines, batch))


def to_model_inputs(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Maps the TFRecord feature names (text.features) to the model's input names."""
    return {
        "token_ids": tf.cast(batch["input_ids"], tf.int32),
        "segment_ids": tf.cast(batch["segment_ids"], tf.int32),
        "padding_mask": tf.cast(batch["input_mask"], tf.int32),
        "masked_lm_positions": tf.cast(batch["masked_lm_positions"], tf.int32),
    }


def real_tokens(batch, key: str = "input_mask") -> tf.Tensor:
    """Real (unpadded) tokens of a batch, for throughput and MFU."""
    return tf.reduce_sum(tf.cast(batch[key], tf.float32))


def mean_metrics(task, model, dataset) -> Dict[str, float]:
    """Mean of task.compute_metrics over the batches of `dataset` (inference mode), without
    the "tokens" count; {} for an empty dataset."""
    sums, count = {}, 0
    for batch in dataset:
        for k, v in task.compute_metrics(model, batch, training=False).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        count += 1
    return {k: v / count for k, v in sums.items() if k != "tokens"} if count else {}


def batches(ds: tf.data.Dataset, size: int, batch_size: int, shuffle_seed=None,
            repeat: bool = False, skip: int = 0, input_context=None) -> tf.data.Dataset:
    """A fine-tuning dataset of `size` examples as batches: repeated and shuffled for training
    (full batches only), dealt to input pipelines after `skip` batches (garden.data)."""
    if repeat:
        ds = ds.repeat()
    if shuffle_seed is not None:
        ds = ds.shuffle(size, seed=shuffle_seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=repeat)
    return data.shard_batches(ds, input_context, skip)


def make_backbone(factory: Callable, packer, output_hidden_states: bool = False):
    """A backbone from a gin factory with the vocabulary's size (and <pad> id where the
    family's positions depend on it, RoBERTa); output_hidden_states for feature-based use."""
    defaults = {"default_vocab_size": packer.vocab_size}
    params = inspect.signature(factory).parameters
    if "default_padding_idx" in params:
        defaults["default_padding_idx"] = packer.pad_id
    if output_hidden_states:
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise ValueError(f"backbone factory {getattr(factory, '__name__', factory)} takes "
                             f"no output_hidden_states (use e.g. backbone)")
        defaults["output_hidden_states"] = True
    return factory(**defaults)


def restore_backbone(backbone, checkpoint: str, object_name: str, who: str) -> None:
    """Restores `backbone` from the checkpoint's `object_name` (backbone; ELECTRA:
    discriminator); every backbone weight must be found there."""
    status = tf.train.Checkpoint(**{object_name: backbone}).read(checkpoint)
    status.expect_partial()
    status.assert_existing_objects_matched()
    print(f"[{who}] backbone initialised from {checkpoint} (its {object_name!r})", flush=True)
