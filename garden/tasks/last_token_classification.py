"""GPT-style fine-tuning (Radford et al., 2018, section 3.2) as a task of the shared trainer:
sentence or sentence-pair classification (or regression) from the LAST token's final state,
trained with the auxiliary language-modelling loss

    loss = classification loss + lm_loss_weight * LM loss        (lambda = 0.5 in the paper)

where the LM loss is the mean next-token cross-entropy over the real tokens of the same inputs
(logits through the backbone's tied token table).

Everything else is garden.tasks.sentence_classification's (subclassed, not copied): the same
files (.tsv/.csv/.jsonl with text_a, (text_b), label, or a GLUE task's official TSVs via
glue_task), the same in-graph TextPacker, labels, evaluation (accuracy next to the majority
baseline; GLUE's official metrics) and export (TextClassifierServing: raw text in, labels out).
Text is packed in the "roberta" layout by default, <s> A </s></s> B </s>: the paper's start,
delimiter and extract tokens, the extract token being the last real one whose state is
classified. OpenAI's GPT-2 vocabulary has none of <s>, </s>, <pad> (only <|endoftext|>): its
"gpt2" layout (GPT2TextPacker below; a converted GPT-2 directory records it) is A
(<|endoftext|> B), no start token, right-padded with <|endoftext|> and a padding_mask, and the
classifier reads the last real position: Hugging Face's GPT2ForSequenceClassification with
pad_token_id = eos_token_id, which classifies the last non-pad token.

The paper's recipe (configs/finetune/last_token_classification_gpt.gin): learning rate
6.25e-5, batch 32, 3 epochs, linear decay with 0.2% warmup, dropout 0.1, lambda 0.5.

gin: garden.LastTokenClassification (configs/runs/finetune_last_token.gin lists the macros).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import tensorflow as tf
import tensorflow_text as tf_text

from data_pipelines import tokenizers
from garden.models.gpt.classifier import LastTokenClassifier
from garden.serving.text import TextPacker
from garden.tasks.sentence_classification import (SentenceClassification, build_backbone,
                                                  softmax_metrics)


def next_token_loss(logits: tf.Tensor, token_ids: tf.Tensor, padding_mask: tf.Tensor):
    """Mean cross-entropy of logits [B, T, V] (position t scores token t+1) over the pairs
    (t, t+1) that are both real tokens; 0 when a batch has none."""
    targets = tf.cast(token_ids[:, 1:], tf.int64)
    mask = tf.cast(padding_mask, tf.float32)
    weights = mask[:, 1:] * mask[:, :-1]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets,
                                                            logits=logits[:, :-1])
    return tf.math.divide_no_nan(tf.reduce_sum(losses * weights), tf.reduce_sum(weights))


GPT2_LAYOUT = "gpt2"


class GPT2TextPacker(TextPacker):
    """TextPacker of the "gpt2" layout: A (<|endoftext|> B), right-padded with <|endoftext|>
    (the vocabulary's <pad> if it has one); token_ids and padding_mask, no segment_ids. A pair
    is trimmed to max_seq_length - 1 pieces as TextPacker trims (BERT's _truncate_seq_pair)."""

    def __init__(self, tokenizer, max_seq_length: int, name: Optional[str] = None):
        tf.Module.__init__(self, name=name)  # TextPacker's looks up <s> / </s>: none here
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length={max_seq_length} leaves no room for a pair in "
                             f"the {GPT2_LAYOUT!r} layout")
        vocab = tokenizer.vocab
        self.kind, self.layout = tokenizer.kind, GPT2_LAYOUT
        self.max_seq_length = int(max_seq_length)
        self.vocab_size = vocab.size
        self.lower_case, self.fingerprint = bool(tokenizer.lower_case), tokenizer.fingerprint
        eod = vocab.special("eod", f"the {GPT2_LAYOUT!r} text layout")
        self.cls_id, self.sep_id, self.pad_id = None, eod, vocab.specials.get("pad", eod)
        self.tokenizer = tokenizer.in_graph()

    @property
    def input_names(self) -> tuple:
        return ("token_ids", "padding_mask")

    def _segments(self, text_a, text_b):
        a = self.tokenize(text_a)
        if text_b is None:
            return [a[:, :self.max_seq_length]]
        budget = self.max_seq_length - 1
        b = self.tokenize(text_b)
        b, a = tf_text.ShrinkLongestTrimmer(budget).trim([b[:, :budget], a[:, :budget]])
        return [a, b]

    def __call__(self, text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None
                 ) -> Dict[str, tf.Tensor]:
        segments = self._segments(text_a, text_b)
        ids = segments[0]
        if len(segments) == 2:
            eod = tf.fill([ids.nrows(), 1], tf.constant(self.sep_id, ids.dtype))
            ids = tf.concat([ids, eod, segments[1]], axis=1)
        token_ids, padding_mask = tf_text.pad_model_inputs(ids, self.max_seq_length,
                                                           pad_value=self.pad_id)
        return {"token_ids": tf.cast(token_ids, tf.int32),
                "padding_mask": tf.cast(padding_mask, tf.int32)}


class LastTokenClassification(SentenceClassification):
    """SentenceClassification with GPT's head and auxiliary LM loss.

    Args (beyond SentenceClassification's, whose defaults change as noted):
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

    @property
    def packer(self):
        """SentenceClassification's TextPacker; GPT2TextPacker for the "gpt2" layout."""
        if self.layout != GPT2_LAYOUT:
            return super().packer
        if getattr(self, "_packer", None) is None:
            kind = self.tokenizer or tokenizers.detect_kind(self.vocab)
            self._packer = GPT2TextPacker(
                tokenizers.load_tokenizer(kind, self.vocab, lower_case=self.lower_case),
                self.max_seq_length)
        return self._packer

    def build_model(self):
        backbone = build_backbone(self)
        if not hasattr(backbone, "output_table"):
            raise ValueError(f"garden.LastTokenClassification needs a decoder backbone with a "
                             f"tied token table (GPT, GPT-3); {type(backbone).__name__} has none "
                             "(bind backbone.preset = 'gpt_tiny', for example)")
        model = LastTokenClassifier(backbone, num_classes=self.num_outputs, dropout=self.dropout)
        return model, {"model": model, "backbone": backbone}

    @staticmethod
    def summary_model(backbone):
        return LastTokenClassifier(backbone, num_classes=2)

    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        inputs = {k: batch[k] for k in ("token_ids", "padding_mask")}  # the model's inputs
        outputs = model(inputs, training=training)
        logits = tf.cast(outputs["logits"], tf.float32)
        if self.regression:
            error = logits[:, 0] - tf.cast(batch["label_ids"], tf.float32)
            metrics = {"loss": tf.reduce_mean(tf.square(error)),
                       "mean_absolute_error": tf.reduce_mean(tf.abs(error))}
        else:
            metrics = softmax_metrics(logits, batch["label_ids"])
        metrics["classification_loss"] = metrics["loss"]
        if self.lm_loss_weight:
            hidden = outputs["sequence_output"]
            table = tf.cast(model.backbone.output_table(), hidden.dtype)
            lm_logits = tf.cast(tf.matmul(hidden, table, transpose_b=True), tf.float32)
            metrics["lm_loss"] = next_token_loss(lm_logits, inputs["token_ids"],
                                                 inputs["padding_mask"])
            metrics["loss"] = metrics["loss"] + self.lm_loss_weight * metrics["lm_loss"]
        return metrics
