"""What every kind of run directory shares (garden.runs, the package docstring): the kinds'
names and marker files, RunError, TextSettings and the Run base class."""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Optional

from garden.generate_dir import CONFIG_FILE as GENERATE_CONFIG
from garden.pretrained import INFO_FILE

MODEL_DIR, CONVERTED, EXPORT, GENERATE = "model_dir", "converted", "export", "generate"
CONVERTED_GENERATE_DIR = "generate"  # garden.convert's GENERATE_DIR (convert imports TensorFlow)
CONVERTED_PRETRAINER = "pretrainer.keras"  # garden.convert's: the source's pretraining heads
OPERATIVE_CONFIG = "operative_config.gin"  # garden.train writes it beside checkpoints/
# garden.serving.export's METADATA_FILENAME in assets.extra/ (that module loads TensorFlow).
EXPORT_METADATA = "assets.extra/garden_export.json"


# What each kind is, as the one-line errors name it.
KIND_NAMES = {MODEL_DIR: "a garden.train run directory",
              CONVERTED: "a garden.convert output directory",
              EXPORT: "an export version directory",
              GENERATE: "a garden.generate model directory"}
MARKERS = {MODEL_DIR: OPERATIVE_CONFIG, CONVERTED: INFO_FILE, EXPORT: EXPORT_METADATA,
           GENERATE: GENERATE_CONFIG}


class RunError(ValueError):
    """A path that is no model of the wanted kinds, or a model asked for what its kind lacks."""


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """How a model reads text: its vocabulary file, tokenizer kind, casing and text layout."""

    vocab: Optional[str]
    tokenizer_kind: Optional[str]  # wordpiece | sentencepiece | bpe; None: from the file name
    lower_case: bool
    layout: Optional[str] = None   # garden.serving.text.LAYOUTS; None: the kind's default

    def packer(self, max_seq_length: int):
        """The garden.serving.text.TextPacker fine-tuning packs text with; its `vocab_path`
        says which file it read (garden.bertology.representations loads it again)."""
        from garden.serving.text import load_packer

        return load_packer(self.vocab, max_seq_length, kind=self.tokenizer_kind,
                           lower_case=self.lower_case, layout=self.layout)

    def tokenizer(self):
        """The data_pipelines TextTokenizer of the vocabulary."""
        from text import tokenizers, vocab_files

        return tokenizers.load_tokenizer(self.tokenizer_kind or vocab_files.detect_kind(self.vocab),
                                         self.vocab, lower_case=self.lower_case)

    def tokens(self) -> List[str]:
        """Token strings by id (the vocabulary's own spelling)."""
        return list(self.tokenizer().vocab.tokens)


class Run:
    """An opened model directory (module docstring). Subclasses set `kind` and override what
    their kind provides; the rest refuse with `cannot`."""

    kind = ""
    family: Optional[str] = None
    checkpoint: Optional[str] = None
    text: Optional[TextSettings] = None
    # what -> why this kind cannot give it (appended to "PATH is a KIND: ")
    cannot: Dict[str, str] = {}

    def __init__(self, path: str, who: str):
        self.path, self.who = path, who

    @property
    def description(self) -> str:
        return f"{KIND_NAMES[self.kind]} {self.path}"

    def _refuse(self, what: str):
        return RunError(f"{self.path} is {KIND_NAMES[self.kind]}: {self.cannot[what]}")

    def backbone(self, output_hidden_states: bool = False, output_attentions: bool = False,
                 use_head_mask: bool = False, max_seq_length: Optional[int] = None):
        raise self._refuse("backbone")

    def task_model(self):
        raise self._refuse("task_model")

    def lm(self):
        raise self._refuse("lm")

    def generation(self):
        raise self._refuse("generation")

    def masked_lm(self):
        raise self._refuse("masked_lm")

    # -- text: every kind that records a vocabulary ------------------------------------------
    def _text(self) -> TextSettings:
        if self.text is None or not self.text.vocab:
            raise RunError(f"{self.path} is {KIND_NAMES[self.kind]} that records no "
                           f"vocabulary: give the vocabulary the model was trained with")
        return self.text

    def packer(self, max_seq_length: int):
        return self._text().packer(max_seq_length)

    def tokens(self) -> List[str]:
        return self._text().tokens()

    # run.vocab, run.tokenizer_kind, run.lower_case, run.layout: run.text's (None without).
    vocab, tokenizer_kind, lower_case, layout = (
        property(lambda self, _f=field: getattr(self.text, _f) if self.text else None)
        for field in ("vocab", "tokenizer_kind", "lower_case", "layout"))


def masked_lm_of(model, where: str):
    """`model` if it is a masked LM (a Keras model whose outputs include mlm_logits at its
    masked_lm_positions input), else RunError naming `where` and what the model is."""
    try:
        outputs, names = model.output, [t.name for t in model.inputs]  # a functional model's
    except (AttributeError, ValueError):  # a subclassed model (a GenerativeLM) has neither
        outputs, names = None, []
    if isinstance(outputs, dict) and "mlm_logits" in outputs and "masked_lm_positions" in names:
        return model
    raise RunError(f"{where}: its model ({type(model).__name__}) has no masked-LM head "
                   f"(mlm_logits at masked_lm_positions); a causal LM is scored by its run.lm()")


def switched(backbone, output_attentions: bool, use_head_mask: bool):
    """`backbone` with attention probabilities / a head mask input switched on: a copy with the
    same weights (the switches change the layers' checkpoint structure, so a switched backbone
    is not restored from the checkpoint itself)."""
    if not (output_attentions or use_head_mask):
        return backbone
    from garden.models.instrument import instrumented

    return instrumented(backbone, output_attentions=output_attentions,
                        use_head_mask=use_head_mask)


def family_of(backbone) -> Optional[str]:
    """The family's name of a backbone's class (BertBackbone: "bert"), None if none."""
    from garden import models

    return next((f.name for f in models.families() if f.backbone_class() is type(backbone)),
                None)


def read_json(path: str) -> Dict:
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise RunError(f"{path} is not JSON ({e})") from None
