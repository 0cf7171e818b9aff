"""GPT-style fine-tuning (Radford et al., 2018, section 3.2) as a task of the shared trainer:
sentence or sentence-pair classification (or regression) from the LAST token's final state,
trained with the auxiliary language-modelling loss

    loss = classification loss + lm_loss_weight * LM loss        (lambda = 0.5 in the paper)

where the LM loss is the mean next-token cross-entropy over the real tokens of the same inputs
(logits through the backbone's tied token table).

Everything else is garden.tasks.classification's (subclassed, not copied): the same
files (.tsv/.csv/.jsonl with text_a, (text_b), label, or a GLUE task's official TSVs via
glue_task), the same in-graph TextPacker, labels, evaluation (accuracy next to the majority
baseline; GLUE's official metrics) and export (ClassificationServing: raw text in, labels out).
Text is packed in the "roberta" layout by default, <s> A </s></s> B </s>: the paper's start,
delimiter and extract tokens, the extract token being the last real one whose state is
classified. OpenAI's GPT-2 vocabulary has none of <s>, </s>, <pad> (only <|endoftext|>): its
"gpt2" layout (garden.serving.text; a converted GPT-2 directory records it) is A
(<|endoftext|> B), no start token, right-padded with <|endoftext|> and a padding_mask, and the
classifier reads the last real position: Hugging Face's GPT2ForSequenceClassification with
pad_token_id = eos_token_id, which classifies the last non-pad token.

The paper's recipe (configs/finetune/last_token_classification_gpt.gin): learning rate
6.25e-5, batch 32, 3 epochs, linear decay with 0.2% warmup, dropout 0.1, lambda 0.5.

gin: garden.LastTokenClassification (configs/runs/finetune_last_token.gin lists the macros).
"""

from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from garden.models.gpt.classifier import LastTokenClassifier
from garden.tasks.classification import Classification


def next_token_loss(logits: tf.Tensor, token_ids: tf.Tensor, padding_mask: tf.Tensor):
    """Mean cross-entropy of logits [B, T, V] (position t scores token t+1) over the pairs
    (t, t+1) that are both real tokens; 0 when a batch has none."""
    targets = tf.cast(token_ids[:, 1:], tf.int64)
    mask = tf.cast(padding_mask, tf.float32)
    weights = mask[:, 1:] * mask[:, :-1]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets,
                                                            logits=logits[:, :-1])
    return tf.math.divide_no_nan(tf.reduce_sum(losses * weights), tf.reduce_sum(weights))


class LastTokenClassification(Classification):
    """Classification with GPT's head and auxiliary LM loss.

    Args (beyond Classification's, whose defaults change as noted):
        backbone: a gin factory of a decoder backbone with `output_table()` (GPT, GPT-3):
            e.g. @backbone with backbone.preset = 'gpt_tiny'.
        lm_loss_weight: float, lambda of the auxiliary LM loss (0.5; 0 turns it off).
        tokenizer: default "bpe" (GPT's byte-pair encoding).
        layout: default a converted INIT_CHECKPOINT's (GPT-2: "gpt2", see the module
            docstring), else "roberta" (start / delimiter / extract tokens, no segment input).
        model_name: default "gpt_classifier".

    Metrics of a batch: loss (the sum above), classification_loss, lm_loss and accuracy (or
    the regression errors).
    """

    name = "last_token_classification"

    def __init__(self, backbone: Callable, vocab: str, train_file: str, eval_file: str,
                 lm_loss_weight: float = 0.5, tokenizer: str = "bpe",
                 layout: Optional[str] = None, model_name: str = "gpt_classifier", **kwargs):
        super().__init__(backbone, vocab, train_file, eval_file, tokenizer=tokenizer,
                         layout=layout, model_name=model_name, **kwargs)
        self.layout = self.layout or "roberta"
        if lm_loss_weight < 0:
            raise ValueError(f"garden.LastTokenClassification.lm_loss_weight must be >= 0, "
                             f"got {lm_loss_weight}")
        self.lm_loss_weight = float(lm_loss_weight)

    def task_model(self, backbone):
        if not hasattr(backbone, "output_table"):
            raise ValueError(f"garden.LastTokenClassification needs a decoder backbone with a "
                             f"tied token table (GPT, GPT-3); {type(backbone).__name__} has none "
                             "(bind backbone.preset = 'gpt_tiny', for example)")
        return LastTokenClassifier(backbone, num_classes=self.num_outputs, dropout=self.dropout)

    @staticmethod
    def summary_model(backbone):
        return LastTokenClassifier(backbone, num_classes=2)

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        inputs = {k: batch[k] for k in ("token_ids", "padding_mask")}  # the model's inputs
        outputs = model(inputs, training=training)
        metrics = self.head_metrics(tf.cast(outputs["logits"], tf.float32), batch["label_ids"])
        metrics["classification_loss"] = metrics["loss"]
        if self.lm_loss_weight:
            hidden = outputs["sequence_output"]
            table = tf.cast(model.backbone.output_table(), hidden.dtype)
            lm_logits = tf.cast(tf.matmul(hidden, table, transpose_b=True), tf.float32)
            metrics["lm_loss"] = next_token_loss(lm_logits, inputs["token_ids"],
                                                 inputs["padding_mask"])
            metrics["loss"] = metrics["loss"] + self.lm_loss_weight * metrics["lm_loss"]
        return metrics
