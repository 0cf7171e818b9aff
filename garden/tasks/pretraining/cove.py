"""CoVe's pretraining (McCann et al. 2017): the attentional translation model
(garden.models.cove.translation.CoveTranslator) trained on sentence pairs, as a task of the
shared trainer (`garden.CovePretraining`, configs/cove_tiny.gin).

Data: .tsv (header "source\ttarget"), .csv or .jsonl pairs (garden.tasks.text_files: errors
name the file and line). Both sides go through the vocabulary's in-graph packer (the one the
fine-tuning tasks and the exports use): the source as [CLS] x [SEP] into the encoder, the
target as [CLS] y [SEP], of which [CLS] y is the decoder's input and y [SEP] its labels; both
cut to max_seq_length. garden.models.cove.sample_pairs writes a synthetic pair task (reversed
word order) from the sample corpus for tests.

Objective: the targets' cross-entropy averaged over their real tokens (teacher forcing);
metrics "loss", "token_accuracy", "tokens". evaluate(): the same over eval_file (eval_loss,
eval_token_accuracy). Checkpoint objects: "model" and "backbone" (the CoVe encoder and its
word table), which the downstream tasks restore (INIT_CHECKPOINT = this run's model_dir).
Nothing is exported (the features are served by the downstream tasks' exports).
"""

from __future__ import annotations

from typing import Callable, List, Optional

import tensorflow as tf

from garden.tasks.base import Stage
from garden.tasks.finetuning import EncoderFinetuning
from garden.tasks.shared import batches, mean_metrics, rows_schedule
from garden.tasks.text_files import read_records


class CovePretraining(EncoderFinetuning):
    """Args: backbone (a gin factory of CoveBackbone: @backbone with a cove preset), vocab,
    train_file, eval_file (None: no evaluation), max_seq_length (per side, 32),
    decoder_layers, decoder_units, dropout (CoveTranslator's), lower_case, init_checkpoint
    (a model_dir or prefix whose "backbone" starts the encoder), max_eval_examples."""

    name = "cove_pretraining"

    def __init__(self, backbone: Callable, vocab: str, train_file: str,
                 eval_file: Optional[str] = None, max_seq_length: int = 32,
                 decoder_layers: int = 2, decoder_units: Optional[int] = None,
                 dropout: float = 0.2, lower_case: Optional[bool] = None,
                 init_checkpoint: Optional[str] = None,
                 max_eval_examples: Optional[int] = None):
        super().__init__(backbone, vocab, max_seq_length, lower_case=lower_case,
                         init_checkpoint=init_checkpoint, dropout=dropout)
        self.train_file, self.eval_file = train_file, eval_file
        self.decoder_layers, self.decoder_units = decoder_layers, decoder_units
        self.max_eval_examples = max_eval_examples

    def prepare(self) -> None:
        self.check_text()
        self.train_rows = read_records(self.train_file, ["source", "target"])
        self.eval_rows = (read_records(self.eval_file, ["source", "target"])
                          [:self.max_eval_examples or None] if self.eval_file else [])
        print(f"[{self.name}] {len(self.train_rows)} train pairs, {len(self.eval_rows)} eval "
              f"pairs", flush=True)

    # -- the model -------------------------------------------------------------------------
    def task_model(self, backbone):
        from garden.models.cove.translation import CoveTranslator

        return CoveTranslator(backbone, self.packer.vocab_size, self.decoder_layers,
                              self.decoder_units, self.dropout)

    @staticmethod
    def summary_model(backbone):
        from garden.models.cove.translation import CoveTranslator

        return CoveTranslator(backbone)

    # -- the data ---------------------------------------------------------------------------
    def _dataset(self, rows, batch_size, shuffle_seed=None, repeat=False, skip=0,
                 input_context=None):
        columns = {side: [r[side] for r in rows] for side in ("source", "target")}
        ds = batches(tf.data.Dataset.from_tensor_slices(columns), len(rows), batch_size,
                     shuffle_seed, repeat, skip, input_context)
        packer = self.packer  # built eagerly, not in the map's trace

        def encode(cols):
            source, target = packer(cols["source"]), packer(cols["target"])
            return {"token_ids": source["token_ids"], "padding_mask": source["padding_mask"],
                    "target_ids": target["token_ids"], "target_mask": target["padding_mask"]}

        return ds.map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    def schedule(self, train_steps: int) -> List[Stage]:
        return rows_schedule(self._dataset, self.train_rows, train_steps, self.train_file)

    # -- the objective ----------------------------------------------------------------------
    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        target, target_mask = batch["target_ids"], batch["target_mask"]
        logits = tf.cast(model({
            "token_ids": batch["token_ids"], "padding_mask": batch["padding_mask"],
            "decoder_token_ids": target[:, :-1], "decoder_padding_mask": target_mask[:, :-1]},
            training=training)["logits"], tf.float32)
        labels = tf.cast(target[:, 1:], tf.int64)
        weights = tf.cast(target_mask[:, 1:], tf.float32)
        total = tf.maximum(tf.reduce_sum(weights), 1.0)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.float32)
        return {"loss": tf.reduce_sum(losses * weights) / total,
                "token_accuracy": tf.reduce_sum(correct * weights) / total,
                "tokens": tf.reduce_sum(weights)}

    # -- after training ---------------------------------------------------------------------
    def evaluate(self, model, batch_size: int = 32) -> dict:
        if not self.eval_rows:
            return {}
        scores = mean_metrics(self, model, self._dataset(self.eval_rows, batch_size))
        return {f"eval_{k}": v for k, v in scores.items()}
