"""FamilySpec: what the garden knows about one model family, as one record in its folder.

Every family folder holds its record as `SPEC` in `garden/models/<family>/__init__.py`; the
tools read the records through `garden.models.families()` and `garden.models.spec(name)`
(the folders are the table: adding a family is a new folder, no row elsewhere):

    factory        backbone class and presets module (garden.models.factory)
    garden.convert converters per source (SOURCES), Hugging Face model types and tokenizer
                   files, the TF1 release's tokenizer files, the text layout and default casing
    pretraining    the garden.Pretraining record of the family (garden/tasks/pretraining/)
    generation     the GenerativeLM class and the prompt framing (garden/models/framing.py)
                   of garden.convert's generate/ directory, the LM tasks and garden.fewshot

The backbone, pretrainer and LM classes are the classes themselves (the folder's __init__
imports them anyway). Converters and the pretraining record are lazy "module:attr" strings,
resolved on use: a converter may need a peer's package (tf-models-official, torch: the bench
extra), and the record lives in garden.tasks, a layer above the models. A converter reference
that starts with "." is relative to the family's folder (".conversion:from_huggingface" is
"garden.models.bert.conversion:from_huggingface"); the record holds the absolute form. What
follows from other fields is not written in a record (override it where a family differs):

    presets             "garden.models.<name>.presets"
    hf_model_types      (name,) for a family with a huggingface converter
    hf_tokenizer_files  the Hugging Face slow tokenizer's files of the tokenizer kind
                        (HF_TOKENIZER_FILES) for a family with a huggingface converter

Example:
    from garden import models
    models.spec("bert").backbone             # BertBackbone
    [s.name for s in models.families() if s.lm]   # the generative families
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Dict, Mapping, Optional, Tuple

SOURCES = ("huggingface", "tf1", "model_garden", "allennlp", "keras_hub")
FRAMINGS = ("causal", "t5", "bart")  # garden/models/framing.py
PACKAGE = __name__.rpartition(".")[0]  # garden.models: the family folders' package
# The files Hugging Face's slow tokenizer of each kind reads from a model folder: BertTokenizer
# (BERT, DistilBERT, ELECTRA), the SentencePiece ones (ALBERT, T5, XLNet), the byte-level BPE
# ones (RoBERTa, BART, GPT-2).
HF_TOKENIZER_FILES = {"wordpiece": ("vocab.txt",), "sentencepiece": ("spiece.model",),
                      "bpe": ("vocab.json", "merges.txt")}
# The tokenizer assets a keras-hub preset holds (save_to_preset writes them under
# assets/tokenizer/), {name written: name in the preset}, by kind: WordPieceTokenizer's
# vocabulary.txt, BytePairTokenizer's vocabulary.json + merges.txt (Hugging Face's vocab.json +
# merges.txt layout). A kind without a row has no keras_hub converter yet.
KERAS_HUB_TOKENIZER_FILES = {"wordpiece": {"vocab.txt": "vocabulary.txt"},
                             "bpe": {"vocab.json": "vocabulary.json", "merges.txt": "merges.txt"}}


def resolve(reference: str):
    """The object a lazy "module:attr" reference names."""
    module, _, attr = reference.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """One family's facts (module docstring). Required fields first; the rest default to
    "the family has none" (no converter, no LM, no pretraining record)."""

    name: str
    backbone: type  # the Backbone class
    tokenizer: str  # text.tokenizers kind: "wordpiece" | "sentencepiece" | "bpe"
    layout: str  # garden.serving.text layout of the family's packed text
    lower_case: bool  # the casing when the checkpoint's tokenizer config does not say
    # module with a PRESETS dict (preset name -> complete constructor config); "": the folder's
    presets: str = ""
    pretrainer: Optional[type] = None  # the pretraining heads around the backbone
    lm: Optional[type] = None  # the GenerativeLM, lm(backbone) (generative families)
    framing: str = ""  # FRAMINGS: how the LM lays out a prompt (generative families)
    # source (SOURCES) -> "module:function"(config, weights) -> {"backbone", "pretrainer"}
    converters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # config.json model_type values accepted; None: (name,) with a huggingface converter
    hf_model_types: Optional[Tuple[str, ...]] = None
    # the tokenizer files of a Hugging Face folder; None: HF_TOKENIZER_FILES[tokenizer] with a
    # huggingface converter (GPT names none: openai-gpt's BPE is not readable here)
    hf_tokenizer_files: Optional[Tuple[str, ...]] = None
    # The TF1 release's tokenizer files, {name written: name in the release} (GPT-2's
    # encoder.json + vocab.bpe); none: vocab.txt or a SentencePiece *.model next to it.
    tf1_tokenizer_files: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # "module:attr" of the family's garden.tasks.pretraining.PretrainingRecord (garden.Pretraining's
    # family = <name>: "garden.tasks.pretraining.<name>:RECORD"); the objective its data records
    # is the family's name.
    pretraining: str = ""

    def __post_init__(self):
        """Relative references made absolute and the derived fields filled (module docstring)."""
        def absolute(reference: str) -> str:
            return f"{PACKAGE}.{self.name}{reference}" if reference.startswith(".") else reference

        hf = "huggingface" in self.converters
        derived = {
            "pretraining": absolute(self.pretraining),
            "presets": absolute(self.presets or ".presets"),
            "converters": {k: absolute(v) for k, v in self.converters.items()},
            "hf_model_types": ((self.name,) if hf else ()) if self.hf_model_types is None
            else tuple(self.hf_model_types),
            "hf_tokenizer_files": (HF_TOKENIZER_FILES.get(self.tokenizer, ()) if hf else ())
            if self.hf_tokenizer_files is None else tuple(self.hf_tokenizer_files)}
        for field, value in derived.items():
            object.__setattr__(self, field, value)  # frozen: set once, here

    def backbone_class(self):
        return self.backbone

    def preset_table(self) -> Dict[str, Dict]:
        return importlib.import_module(self.presets).PRESETS

    def pretrainer_class(self):
        return self.pretrainer

    def lm_class(self):
        return self.lm

    def converter(self, source: str):
        """The function converting a `source` checkpoint, or NotImplementedError naming what
        the family converts from."""
        if source not in self.converters:
            have = ", ".join(sorted(self.converters)) or "no source"
            raise NotImplementedError(f"no --source={source} converter for {self.name!r} "
                                      f"(it converts from {have})")
        return resolve(self.converters[source])

    @property
    def generates_from_huggingface(self) -> bool:
        """A generative family whose Hugging Face folder carries a tokenizer garden reads:
        garden.convert writes its generate/ model directory (openai-gpt's character-level
        BPE is not readable here: GPT lists no tokenizer files)."""
        return bool(self.lm and self.hf_tokenizer_files)

    def pretraining_record(self):
        """garden.Pretraining's record of this family (ValueError when it has none)."""
        if not self.pretraining:
            raise ValueError(f"family {self.name!r} has no garden.Pretraining record")
        return resolve(self.pretraining)

    def check(self) -> None:
        """ValueError naming every required field that is missing or out of its choices."""
        from text.vocab_files import KINDS

        problems = [f"{f.name} is empty" for f in dataclasses.fields(self)
                    if f.default is dataclasses.MISSING and f.default_factory is
                    dataclasses.MISSING and getattr(self, f.name) in ("", None)]
        problems += [f"{field} is not a class: {getattr(self, field)!r}"
                     for field in ("backbone", "pretrainer", "lm")
                     if getattr(self, field) and not isinstance(getattr(self, field), type)]
        if self.tokenizer not in KINDS:
            problems.append(f"tokenizer {self.tokenizer!r} is not one of {KINDS}")
        if self.framing and self.framing not in FRAMINGS:
            problems.append(f"framing {self.framing!r} is not one of {FRAMINGS}")
        if bool(self.lm) != bool(self.framing):
            problems.append("a generative family names both its lm and its framing")
        unknown = sorted(set(self.converters) - set(SOURCES))
        if unknown:
            problems.append(f"converters for unknown sources {unknown} (known: {SOURCES})")
        if self.hf_model_types and "huggingface" not in self.converters:
            problems.append("hf_model_types without a huggingface converter")
        if problems:
            raise ValueError(f"FamilySpec {self.name or '?'}: {'; '.join(problems)}")
