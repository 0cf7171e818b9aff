"""ServingModule of the multiple-choice kind (SWAG): a context and N endings in, the chosen
ending out, text packing inside the graph (garden.serving.text.TextPacker).

Signatures:
    serving_default  predict  context string [B], endings string [B, N] ->
                              choice int64 [B] (index of the best ending), probabilities
                              float32 [B, N] (softmax over the endings), logits [B, N]
    serving_ids      predict  the backbone's int32 inputs [B, N, T] -> the same outputs
Choice i is packed as the pair (context, endings[:, i]) exactly as the task packed
(sent1, sent2 + " " + ending_i) in fine-tuning: a SWAG client sends sent1 as the context and
"sent2 ending_i" as the endings. A context of another rank, endings of another rank or width
than the model's N, or a different number of rows answer InvalidArgumentError.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from text import vocab_files
from garden.serving.base import PREDICT, ServingModule, strings
from garden.serving.text import TextPacker, checked_text, model_inputs


def checked_endings(context: tf.Tensor, endings: tf.Tensor, num_choices: int):
    """context as [B] and endings as [B, N], or InvalidArgumentError naming the input."""
    context = checked_text(context, "context")
    endings = tf.convert_to_tensor(endings, tf.string)
    checks = [
        tf.debugging.assert_rank(endings, 2, message=f"endings must be strings of shape [batch, "
                                 f"{num_choices}] (one row of {num_choices} endings per context)"),
    ]
    with tf.control_dependencies(checks):
        shape = tf.shape(endings)
    checks = [
        tf.debugging.assert_equal(shape[1], num_choices, message=f"endings must have "
                                  f"{num_choices} columns, the model's number of choices"),
        tf.debugging.assert_equal(shape[0], tf.size(context), message="context and endings "
                                  "must have the same number of rows"),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(context), tf.reshape(endings, [-1, num_choices])


def pack_choices(packer: TextPacker, context: tf.Tensor, endings: tf.Tensor
                 ) -> Dict[str, tf.Tensor]:
    """[B] contexts and [B, N] endings -> a backbone's inputs int32 [B, N, T]: choice i is the
    pair (context, endings[:, i]) in the packer's layout (what fine-tuning and serving share)."""
    n = tf.shape(endings)[1]
    packed = packer(tf.repeat(context, n), tf.reshape(endings, [-1]))
    return {k: tf.reshape(v, [-1, n, packer.max_seq_length]) for k, v in packed.items()}


class MultipleChoiceServing(ServingModule):
    """Exports a MultipleChoiceModel with its TextPacker (see the module docstring).

    Args:
        model: Keras model, inputs int32 [B, N, T] -> {"logits": [B, N]}.
        packer: the TextPacker used in fine-tuning.
        vocab_path: the vocabulary file (copied into assets/; a BPE vocabulary's merges.txt too).
        warmup: a few (context, [ending, ...]) for the warmup requests.
    """

    task = "multiple_choice"

    def __init__(self, model, packer: TextPacker, vocab_path: str,
                 warmup: Optional[Sequence[Tuple[str, Sequence[str]]]] = None):
        super().__init__(name="multiple_choice_serving")
        self._hold("model", model)
        self.packer = packer
        self.num_choices = int(model.output["logits"].shape[-1])
        files = (vocab_files.bpe_files(vocab_path) if packer.kind == "bpe" else (vocab_path,))
        self._vocab_path = files[0]
        self.vocab_file = tf.saved_model.Asset(files[0])
        if len(files) > 1:
            self.merges_file = tf.saved_model.Asset(files[1])
        n = self.num_choices
        self._warmup = [(c, list(e)) for c, e in warmup or ()] or [
            ("A warmup context.", [f"ending {i}" for i in range(n)])]

    # -- the computation ----------------------------------------------------------------
    def predict_ids(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        inputs = {k: tf.cast(inputs[k], tf.int32) for k in self.packer.input_names}
        logits = tf.cast(self.model(model_inputs(self.model, inputs), training=False)["logits"],
                         tf.float32)
        return {"choice": tf.argmax(logits, axis=-1, output_type=tf.int64),
                "probabilities": tf.nn.softmax(logits, axis=-1), "logits": logits}

    def pack(self, context, endings) -> Dict[str, tf.Tensor]:
        context, endings = checked_endings(context, endings, self.num_choices)
        return pack_choices(self.packer, context, endings)

    def predict_text(self, context, endings) -> Dict[str, tf.Tensor]:
        return self.predict_ids(self.pack(context, endings))

    # -- the contract ---------------------------------------------------------------------
    def signatures(self):
        serve_text = tf.function(self.predict_text, input_signature=[
            tf.TensorSpec(None, tf.string, name="context"),
            tf.TensorSpec(None, tf.string, name="endings")])
        names = self.packer.input_names
        serve_ids = tf.function(lambda *ids: self.predict_ids(dict(zip(names, ids))),
                                input_signature=[tf.TensorSpec([None, None, None], tf.int32,
                                                               name=n) for n in names])
        return {"serving_default": (serve_text.get_concrete_function(), PREDICT),
                "serving_ids": (serve_ids.get_concrete_function(), PREDICT)}

    def warmup_requests(self):
        contexts = [c for c, _ in self._warmup]
        endings = np.array([[e.encode("utf-8") for e in row] for _, row in self._warmup],
                           dtype=object)
        ids = {k: v.numpy() for k, v in self.pack(tf.constant(contexts), tf.constant(
            endings.tolist())).items()}
        return [("serving_default", {"context": strings(contexts), "endings": endings}),
                ("serving_ids", ids)]

    def metadata(self) -> dict:
        p = self.packer
        return {"task": self.task, "num_choices": self.num_choices,
                "max_seq_length": p.max_seq_length, "tokenizer": p.kind, "layout": p.layout,
                "lower_case": p.lower_case,
                "vocab_file": "assets/" + self._vocab_path.rstrip("/").split("/")[-1],
                "vocab_size": p.vocab_size, "vocab_fingerprint": p.fingerprint,
                "pairing": "(context, ending_i); SWAG: (sent1, sent2 + ' ' + ending_i)"}
