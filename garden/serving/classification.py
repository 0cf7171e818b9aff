"""ServingModule of the classification kind: sentence (pair) classification or one-output
regression from raw text, text packing inside the graph (garden.serving.text.TextPacker), with
TF Serving's classify / regress signatures beside predict."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from text import vocab_files
from garden.models.classification import SequenceClassifier
from garden.serving.base import CLASSIFY, PREDICT, REGRESS, ServingModule, strings
from garden.serving.text import TextPacker, checked_pair, checked_text, model_inputs


class ClassificationServing(ServingModule):
    """Sentence (pair) classification or one-output regression, from raw text.

    Signatures (text inputs: string [batch]; any other rank answers InvalidArgumentError):
        serving_default  predict   text_a (, text_b) ->
                         classification: probabilities [B, C], label [B], label_id [B],
                         logits [B, C]; regression: score [B]
        serving_ids      predict   the backbone's int32 [B, T] inputs -> the same outputs
        classify         classify  inputs: serialized tf.Example [B] with bytes features
                                   text_a (, text_b) -> classes [B, C], scores [B, C]
        regress          regress   (regression instead of classify) -> outputs [B]

    Args:
        model: Keras model, backbone inputs -> {"logits": [B, C]} (SequenceClassifier).
        packer: the TextPacker used in fine-tuning.
        vocab_path: the vocabulary file it was loaded from (copied into assets/; a BPE
            vocabulary's merges.txt too).
        label_names: class names in logit order; None for regression (one logit).
        text_b: whether the task takes sentence pairs.
        warmup_texts: a few texts or (text_a, text_b) pairs for the warmup requests.
    """

    def __init__(self, model, packer: TextPacker, vocab_path: str,
                 label_names: Optional[Sequence[str]], text_b: bool,
                 warmup_texts: Optional[Sequence] = None):
        super().__init__(name="classification_serving")
        self._hold("model", model)
        self.packer, self.text_b = packer, bool(text_b)
        self.regression = label_names is None
        self.task = "regression" if self.regression else "classification"
        self._label_names = None if self.regression else [str(n) for n in label_names]
        self._check_outputs(model)
        files = (vocab_files.bpe_files(vocab_path) if packer.kind == "bpe" else (vocab_path,))
        self._vocab_path = files[0]
        # Tracked Assets: saving copies the files into assets/, the loaded object's
        # vocab_file.asset_path points at the copy.
        self.vocab_file = tf.saved_model.Asset(files[0])
        if len(files) > 1:
            self.merges_file = tf.saved_model.Asset(files[1])
        self._warmup = _warmup_pairs(warmup_texts, self.text_b)

    def _check_outputs(self, model) -> None:
        names = self._label_names
        if names is not None and (len(names) < 2 or len(set(names)) != len(names)):
            raise ValueError(f"label_names must name two or more distinct classes, got {names}")
        width = model.output["logits"].shape[-1]
        expected = 1 if names is None else len(names)
        if width is not None and width != expected:
            what = "a regression needs 1" if names is None else f"{expected} label_names were given"
            raise ValueError(f"the model has {width} logits but {what}: {names}")

    # -- the computation ----------------------------------------------------------------
    def _logits(self, inputs: Dict[str, tf.Tensor]) -> tf.Tensor:
        """The model's logits. A SequenceClassifier over a backbone with `outputs_at`
        (BertBackbone) reads only the pooled [CLS] row, so its last block computes just that
        row (queries, attention output and feed-forward of 1 of T rows; keys and values still
        of all T): the same logits up to float rounding, and BERT-base at 128 tokens skips
        about 83% of a layer's matmul work, 1/12 of the encoder's (benchmarks/README.md
        `serving_latency`). Other models run whole."""
        model = self.model
        backbone = getattr(model, "backbone", None)
        if (isinstance(model, SequenceClassifier) and hasattr(backbone, "outputs_at")
                and set(inputs) == set(backbone.input)):
            cls_row = tf.zeros_like(inputs["padding_mask"][:, :1])
            _, pooled = backbone.outputs_at(inputs, cls_row)
            return model.classifier_dense(model.classifier_dropout(pooled, training=False))
        return model(model_inputs(model, inputs), training=False)["logits"]

    def predict_ids(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        inputs = {k: tf.cast(inputs[k], tf.int32) for k in self.packer.input_names}
        logits = tf.cast(self._logits(inputs), tf.float32)
        if self.regression:
            return {"score": logits[:, 0]}
        label_id = tf.argmax(logits, axis=-1, output_type=tf.int64)
        return {"probabilities": tf.nn.softmax(logits, axis=-1),
                "label": tf.gather(tf.constant(self._label_names, tf.string), label_id),
                "label_id": label_id, "logits": logits}

    def predict_text(self, text_a, text_b=None) -> Dict[str, tf.Tensor]:
        text_a, text_b = checked_pair(text_a, text_b)
        return self.predict_ids(self.packer(text_a, text_b))

    def _from_examples(self, serialized):
        spec = {"text_a": tf.io.FixedLenFeature([], tf.string)}
        if self.text_b:
            spec["text_b"] = tf.io.FixedLenFeature([], tf.string)
        features = tf.io.parse_example(checked_text(serialized, "inputs"), spec)
        return self.predict_text(features["text_a"], features.get("text_b"))

    # -- the contract ---------------------------------------------------------------------
    def signatures(self):
        # Shape None: the rank is checked in the graph (checked_text), see garden.serving.text.
        text = lambda name: tf.TensorSpec(None, tf.string, name=name)  # noqa: E731
        names = ["text_a", "text_b"] if self.text_b else ["text_a"]
        serve_text = tf.function(self.predict_text,
                                 input_signature=[text(n) for n in names])
        ids_names = self.packer.input_names
        serve_ids = tf.function(lambda *ids: self.predict_ids(dict(zip(ids_names, ids))),
                                input_signature=[tf.TensorSpec([None, None], tf.int32, name=n)
                                                 for n in ids_names])

        def classify(inputs):
            probabilities = self._from_examples(inputs)["probabilities"]
            classes = tf.tile(tf.constant([self._label_names], tf.string),
                              [tf.shape(probabilities)[0], 1])
            return {"classes": classes, "scores": probabilities}

        def regress(inputs):
            return {"outputs": self._from_examples(inputs)["score"]}

        example_fn = tf.function(regress if self.regression else classify,
                                 input_signature=[text("inputs")])
        return {"serving_default": (serve_text.get_concrete_function(), PREDICT),
                "serving_ids": (serve_ids.get_concrete_function(), PREDICT),
                ("regress" if self.regression else "classify"):
                    (example_fn.get_concrete_function(), REGRESS if self.regression else CLASSIFY)}

    def warmup_requests(self):
        """One serving_default request per text, all texts as one batch, that batch as ids."""
        pairs = self._warmup
        requests = []
        for a, b in pairs:
            inputs = {"text_a": strings([a])}
            if b is not None:
                inputs["text_b"] = strings([b])
            requests.append(("serving_default", inputs))
        batch = {"text_a": strings([a for a, _ in pairs])}
        texts_b = [b for _, b in pairs] if self.text_b else None
        if texts_b is not None:
            batch["text_b"] = strings(texts_b)
        requests.append(("serving_default", batch))
        requests.append(("serving_ids", self.packer.encode_numpy([a for a, _ in pairs], texts_b)))
        return requests

    def metadata(self) -> dict:
        p = self.packer
        meta = {"task": self.task, "max_seq_length": p.max_seq_length, "text_b": self.text_b,
                "tokenizer": p.kind, "layout": p.layout,
                "lower_case": p.lower_case,
                "vocab_file": "assets/" + self._vocab_path.rstrip("/").split("/")[-1],
                "vocab_size": p.vocab_size,
                "vocab_fingerprint": p.fingerprint}
        if not self.regression:
            meta["label_names"] = list(self._label_names)
        return meta


def _warmup_pairs(warmup_texts, text_b: bool) -> List[Tuple[str, Optional[str]]]:
    if not warmup_texts:
        warmup_texts = ["This is a warmup request.", "A second, slightly longer warmup text."]
    pairs = []
    for item in warmup_texts:
        a, b = (item, "") if isinstance(item, str) else (item[0], item[1])
        pairs.append((a, b if text_b else None))
    return pairs
