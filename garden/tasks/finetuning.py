"""EncoderFinetuning: what the encoder fine-tuning tasks share, once.

Classification, Tagging, QuestionAnswering, MultipleChoice and
LastTokenClassification each put a head on a pretrained backbone and read raw text. What they
share lives here instead of in one of them:

    text       vocab, lower_case, tokenizer_kind, layout: from the bindings, or from a
               garden.convert INIT_CHECKPOINT (garden/pretrained.py text_settings); the gin
               parameter is still `tokenizer`, the attribute is `tokenizer_kind`
    packer     the in-graph TextPacker of the export (garden.serving.text), one lazy property
    backbone   build_backbone(): the gin factory sized by the vocabulary, or the converted
               directory's architecture, restored from INIT_CHECKPOINT's
               `init_checkpoint_object` ("backbone"; ELECTRA's pretraining: "discriminator")
    recipe     BERT's GLUE defaults: max_seq_length 128, dropout 0.1 before the output layer

A task's life (garden/tasks/base.py) with the base's parts:
    __init__   the task's own checks, then super().__init__(backbone, vocab, ...)
    prepare    check_text() (vocabulary, special tokens, layout, INIT_CHECKPOINT: errors before
               any file is read), then the task's files
    build_model   task_model(build_backbone()) -> (model, {"model", "backbone"})
    finish     evaluate(), printed on one line (the tasks add files or fields)
"""

from __future__ import annotations

import json
from typing import Callable, Optional

import tensorflow as tf

from garden import pretrained
from garden.serving.text import load_packer, model_inputs
from garden.tasks.base import Task
from garden.tasks.shared import make_backbone, restore_backbone


def softmax_metrics(logits: tf.Tensor, label_ids: tf.Tensor) -> dict:
    """Softmax cross-entropy over the last axis (the loss) and accuracy of one batch."""
    labels = tf.cast(label_ids, tf.int64)
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, -1), labels), tf.float32))
    return {"loss": loss, "accuracy": accuracy}


class EncoderFinetuning(Task):
    """Base of the tasks that fine-tune a pretrained backbone with a head on raw text.

    Args (every subclass keeps them as gin parameters of its own constructor):
        backbone: callable(default_vocab_size[, default_padding_idx]) -> backbone (a gin
            factory: backbone (its preset picks the family), electra_discriminator).
        vocab: the pretraining vocabulary (vocab.txt, SentencePiece .model or BPE vocab.json;
            copied into the export); None: the tokenizer of a converted init_checkpoint.
        max_seq_length: tokens per packed row (128, BERT's GLUE recipe).
        lower_case: must match the vocabulary's pretraining (make_vocab --lower_case); None:
            a converted init_checkpoint's casing, else True.
        tokenizer: "wordpiece" | "sentencepiece" | "bpe"; default a converted
            init_checkpoint's, else from the vocabulary's name. Kept as `tokenizer_kind`.
        layout: text packing (garden.serving.text.LAYOUTS: "bert", "roberta", ...); default a
            converted init_checkpoint's, else by tokenizer.
        init_checkpoint: pretraining model_dir, garden.convert output directory (its
            architecture, tokenizer and casing are used: garden/pretrained.py) or checkpoint
            prefix to start from; None trains from scratch.
        init_checkpoint_object: the object of that checkpoint the backbone is restored from:
            "backbone" (the default), or "discriminator" for an ELECTRA pretraining model_dir.
        dropout: dropout before the output layer (0.1).
        export_base, model_name: where the SavedModel goes (<export_base>/<model_name>/<version>).

    Subclasses implement task_model(backbone) (and the rest of the Task contract).
    """

    # Whether build_backbone() asks for every layer's hidden states (feature-based tagging).
    output_hidden_states: bool = False

    def __init__(self, backbone: Callable, vocab: Optional[str], max_seq_length: int = 128,
                 lower_case: Optional[bool] = None, tokenizer: Optional[str] = None,
                 layout: Optional[str] = None, init_checkpoint: Optional[str] = None,
                 init_checkpoint_object: str = "backbone", dropout: float = 0.1,
                 export_base: Optional[str] = None, model_name: str = "model"):
        self.backbone_fn = backbone
        self.max_seq_length = int(max_seq_length)
        self.init_checkpoint, self.init_checkpoint_object = init_checkpoint, init_checkpoint_object
        self.dropout = dropout
        self.export_base, self.model_name = export_base, model_name
        # converted: the garden.convert directory of init_checkpoint, or None.
        (self.converted, self.vocab, self.lower_case, self.tokenizer_kind,
         self.layout) = pretrained.text_settings(f"garden.{type(self).__name__}",
                                                 init_checkpoint, vocab, lower_case,
                                                 tokenizer, layout)
        self._packer = None
        self._init_path: Optional[str] = None  # init_checkpoint's prefix, set by check_text()

    # -- before anything is built ---------------------------------------------------------
    def check_text(self):
        """prepare()'s shared part: builds the packer once (the vocabulary, its special tokens
        and the layout are checked now, before any data is read) and resolves init_checkpoint
        to a checkpoint prefix holding init_checkpoint_object. Returns that packer for the
        task's own checks and messages; `packer` builds a fresh one on first use."""
        self._packer = None
        packer = self.packer
        self._packer = None
        if self.init_checkpoint:
            self._init_path = pretrained.resolve_checkpoint(self.init_checkpoint,
                                                            self.init_checkpoint_object)
        return packer

    @property
    def packer(self):
        """The TextPacker, built on first use (build_model, the datasets, the export).

        Not kept from prepare(): the trainer seeds after prepare() (keras.utils.set_random_seed
        -> tf.random.set_seed), which clears TensorFlow's eager kernel cache, and with it the
        SentencepieceOp kernel that owns tensorflow-text's SentencePiece model resource
        ("Resource localhost/_0_SentencepieceOp/... does not exist" at the first batch).
        """
        if self._packer is None:
            self._packer = load_packer(self.vocab, self.max_seq_length, kind=self.tokenizer_kind,
                                       lower_case=self.lower_case, layout=self.layout)
        return self._packer

    def load_text_tokenizer(self):
        """The data_pipelines TextTokenizer of the vocabulary (word pieces with offsets, for
        the tasks that make their records in Python: tagging, SQuAD windows)."""
        from text import tokenizers, vocab_files

        kind = self.tokenizer_kind or vocab_files.detect_kind(self.vocab)
        return tokenizers.load_tokenizer(kind, self.vocab, lower_case=self.lower_case)

    # -- the model -------------------------------------------------------------------------
    def build_backbone(self):
        """The backbone: backbone_fn sized by the vocabulary, or the converted init_checkpoint's
        architecture (garden/pretrained.py); restored from init_checkpoint when it is set."""
        if self.converted is not None:
            backbone = pretrained.build_backbone(
                self.converted, self.backbone_fn, f"garden.{type(self).__name__}",
                self.output_hidden_states, self.packer.vocab_size, self.max_seq_length)
        else:
            backbone = make_backbone(self.backbone_fn, self.packer, self.output_hidden_states)
        if isinstance(backbone.input, dict) and "head_mask" in backbone.input:
            # Keras would fail at the first call ("Missing data for input head_mask").
            raise ValueError(f"garden.{type(self).__name__}: the backbone was built with "
                             f"use_head_mask=True, the head-mask input of garden.bertology's "
                             f"analyses (garden.analyze heads / prune); a fine-tuning task feeds "
                             f"no head mask: unbind backbone.use_head_mask")
        if self.init_checkpoint:
            restore_backbone(backbone, self._init_path, self.init_checkpoint_object, self.name)
        return backbone

    def task_model(self, backbone):
        """The task's Keras model on `backbone` (its head, with self.dropout where it has one)."""
        raise NotImplementedError

    def build_model(self):
        backbone = self.build_backbone()
        model = self.task_model(backbone)
        # "backbone" lets garden.train size layer-wise LR decay (train.layer_decay) from it, and
        # a later run fine-tune from this checkpoint.
        return model, {"model": model, "backbone": backbone}

    # -- the objective ----------------------------------------------------------------------
    def _logits(self, model, batch, training: bool):
        """float32 "logits" of the model on the packer's inputs of `batch`."""
        inputs = {k: tf.cast(batch[k], tf.int32) for k in self.packer.input_names}
        return tf.cast(model(model_inputs(model, inputs), training=training)["logits"],
                       tf.float32)

    # -- after training ---------------------------------------------------------------------
    def finish(self, model, model_dir: str) -> dict:
        """evaluate(), printed on one line (the trainer merges it into summary.json)."""
        result = self.evaluate(model)
        print(f"[{self.name}] eval {json.dumps(result, sort_keys=True)}", flush=True)
        return result
