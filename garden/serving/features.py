"""The ServingModule of the features kind: raw text -> any backbone's contextual features
(ELMo's scalar-mixed layers, BERT's last layer, ...), for models that put them under their own
task head. `python -m garden.export_features` exports a garden.train run's backbone with it.

A backbone that reads characters (ELMo) is served through `text_backbone`: the same
architecture built to take the vocabulary's pieces (ElmoBackbone(vocab=...)), with its
weights. Signatures:
    serving_default  predict  text [B] -> features [B, T, D] (the backbone's sequence_output),
                              pooled [B, D] (pooled_output, where it has one), padding_mask
                              [B, T] (1 on real pieces), tokens [B, T] (the pieces, "" beyond)
    serving_ids      predict  the packer's int32 [B, T] inputs -> features, pooled
    embed            predict  text [B] -> embedding [B, D]: one vector per text, pooled from
                              sequence_output by `pooling`: "mean" over the real pieces, the
                              special tokens included (sentence-transformers' mean pooling,
                              which all-MiniLM-L6-v2 was trained with), or "cls" (the first
                              piece's); not normalised: compare embeddings by cosine
garden.serve serves it like any export.
"""

from __future__ import annotations

from typing import Dict, Iterable

import tensorflow as tf

POOLINGS = ("mean", "cls")

from garden.serving.base import PREDICT, ServingModule, strings
from garden.serving.text import TextPacker, checked_text, model_inputs


class FeatureServing(ServingModule):
    """Raw text -> the backbone's per-piece features (module docstring)."""

    task = "features"

    def __init__(self, backbone, packer: TextPacker, vocab_path: str,
                 warmup_texts: Iterable[str] = ("a sentence .",), pooling: str = "mean"):
        super().__init__(name="feature_serving")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}: choose one of {POOLINGS}")
        self.pooling = pooling
        self._hold("backbone", backbone)
        self.packer = packer
        self.vocab_file = tf.saved_model.Asset(vocab_path)
        self._pooled = "pooled_output" in backbone.output
        self._warmup = list(warmup_texts)
        self._pieces = tf.constant(_tokens(vocab_path, packer))

    def predict_ids(self, inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        inputs = {k: tf.cast(inputs[k], tf.int32) for k in self.packer.input_names}
        out = self.backbone(model_inputs(self.backbone, inputs), training=False)
        result = {"features": tf.cast(out["sequence_output"], tf.float32)}
        if self._pooled:
            result["pooled"] = tf.cast(out["pooled_output"], tf.float32)
        return result

    def predict_text(self, text) -> Dict[str, tf.Tensor]:
        inputs = self.packer(checked_text(text, "text"))
        mask = tf.cast(inputs["padding_mask"], tf.int32)
        tokens = tf.where(mask > 0, tf.gather(self._pieces, inputs["token_ids"]), "")
        return {**self.predict_ids(inputs), "padding_mask": mask, "tokens": tokens}

    def embed(self, text) -> Dict[str, tf.Tensor]:
        inputs = self.packer(checked_text(text, "text"))
        features = self.predict_ids(inputs)["features"]
        return {"embedding": pool(features, inputs["padding_mask"], self.pooling)}

    def signatures(self):
        text = tf.function(self.predict_text,
                           input_signature=[tf.TensorSpec(None, tf.string, name="text")])
        embed = tf.function(self.embed,
                            input_signature=[tf.TensorSpec(None, tf.string, name="text")])
        ids = tf.function(self.predict_ids, input_signature=[{
            k: tf.TensorSpec([None, None], tf.int32, name=k) for k in self.packer.input_names}])
        return {"serving_default": (text.get_concrete_function(), PREDICT),
                "serving_ids": (ids.get_concrete_function(), PREDICT),
                "embed": (embed.get_concrete_function(), PREDICT)}

    def warmup_requests(self):
        return [("serving_default", {"text": strings(self._warmup)})]

    def metadata(self) -> dict:
        return {"task": self.task, "input_names": list(self.packer.input_names),
                "max_seq_length": self.packer.max_seq_length, "pooling": self.pooling}


def pool(features: tf.Tensor, padding_mask: tf.Tensor, pooling: str) -> tf.Tensor:
    """[B, T, D] features -> [B, D]: the mean over the pieces where padding_mask is 1 (a row
    without any gives zeros, as sentence-transformers' clamped denominator does), or the first
    piece's ("cls")."""
    if pooling == "cls":
        return features[:, 0]
    mask = tf.cast(padding_mask, features.dtype)[:, :, None]
    return tf.reduce_sum(features * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1e-9)


def _tokens(vocab_path: str, packer: TextPacker):
    from text import tokenizers

    return list(tokenizers.load_tokenizer(packer.kind, vocab_path,
                                          lower_case=packer.lower_case).vocab.tokens)


def text_backbone(backbone, vocab: str):
    """A backbone that takes the vocabulary's token_ids: `backbone` itself, or for one that
    reads characters (ELMo) the same architecture built with `vocab`, holding its weights."""
    if getattr(backbone, "input_name", "token_ids") == "token_ids":
        return backbone
    rebuilt = type(backbone)(**{**backbone.get_config(), "vocab": vocab, "dropout": 0.0})
    rebuilt.set_weights(backbone.get_weights())
    return rebuilt
