"""Contextual features from raw text as a TF Serving export: any backbone's representations
(ELMo's scalar-mixed layers, BERT's last layer, ...), for models that put them under their own
task head.

    python -m garden.serving.features --model_dir=RUN --export_base=DIR [--model_name=features]
        [--max_seq_length=128]

RUN is a garden.train run directory (e.g. ELMo's biLM pretraining, configs/elmo_tiny.gin): its
backbone is restored and packed with its task's vocabulary. A backbone that reads characters
(ELMo) is rebuilt to take the vocabulary's pieces (ElmoBackbone(vocab=...)), with the run's
weights. Signatures:
    serving_default  predict  text [B] -> features [B, T, D] (the backbone's sequence_output),
                              pooled [B, D] (pooled_output, where it has one), padding_mask
                              [B, T] (1 on real pieces), tokens [B, T] (the pieces, "" beyond)
    serving_ids      predict  the packer's int32 [B, T] inputs -> features, pooled
garden.serve serves it like any export.
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, Iterable, Optional

import tensorflow as tf

from garden.serving.base import PREDICT, ServingModule, strings
from garden.serving.text import TextPacker, checked_text, model_inputs


class FeatureServing(ServingModule):
    """Raw text -> the backbone's per-piece features (module docstring)."""

    task = "features"

    def __init__(self, backbone, packer: TextPacker, vocab_path: str,
                 warmup_texts: Iterable[str] = ("a sentence .",)):
        super().__init__(name="feature_serving")
        self.backbone, self.packer = backbone, packer
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

    def signatures(self):
        text = tf.function(self.predict_text,
                           input_signature=[tf.TensorSpec(None, tf.string, name="text")])
        ids = tf.function(self.predict_ids, input_signature=[{
            k: tf.TensorSpec([None, None], tf.int32, name=k) for k in self.packer.input_names}])
        return {"serving_default": (text.get_concrete_function(), PREDICT),
                "serving_ids": (ids.get_concrete_function(), PREDICT)}

    def warmup_requests(self):
        return [("serving_default", {"text": strings(self._warmup)})]

    def metadata(self) -> dict:
        return {"task": self.task, "input_names": list(self.packer.input_names),
                "max_seq_length": self.packer.max_seq_length}


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


def export_run(model_dir: str, export_base: str, model_name: str = "features",
               max_seq_length: int = 128) -> str:
    """The feature export of a garden.train run's backbone; returns the version directory."""
    from garden import runs
    from garden.serving.export import export

    run = runs.open(model_dir, [runs.MODEL_DIR], who="garden.serving.features")
    if not run.vocab:
        raise ValueError(f"{model_dir}: its task records no vocabulary to read text with")
    packer = run.packer(max_seq_length)
    backbone = text_backbone(run.backbone(max_seq_length=max_seq_length), run.vocab)
    return export(FeatureServing(backbone, packer, run.vocab), export_base, model_name)


def main(argv: Optional[Iterable[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m garden.serving.features",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", required=True, help="a garden.train run directory")
    p.add_argument("--export_base", required=True, help="exports go to BASE/NAME/VERSION")
    p.add_argument("--model_name", default="features")
    p.add_argument("--max_seq_length", type=int, default=128)
    args = p.parse_args(list(argv) if argv is not None else None)
    try:
        path = export_run(args.model_dir, args.export_base, args.model_name,
                          args.max_seq_length)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[features] exported {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

