"""The family folders are the family table: every folder under garden/models with a backbone
(its own backbone.py, or presets for another family's, as SpanBERT's for BERT's) holds a
complete FamilySpec as SPEC, and garden.models.families() finds exactly those folders.
A spec with a missing or wrong field fails the same check (negative controls)."""

from __future__ import annotations

import dataclasses
import inspect
import os

import keras
import pytest

from text.vocab_files import KINDS
from garden import models
from garden.models import framing
from garden.models.factory import family_of
from garden.models.family import FamilySpec, resolve
from garden.serving.text import LAYOUTS
from garden.tasks.pretraining import PretrainingRecord

MODELS_DIR = os.path.dirname(os.path.abspath(models.__file__))
FOLDERS = sorted(
    name for name in os.listdir(MODELS_DIR)
    if os.path.isfile(os.path.join(MODELS_DIR, name, "__init__.py")) and any(
        os.path.exists(os.path.join(MODELS_DIR, name, f)) for f in ("backbone.py", "presets.py")))
# Every role a framing may read, distinct ids so that a swapped role shows.
ROLES = {"eos": 1, "pad": 0, "bos": 2, "eod": 3, "decoder_start": 4}


def check_complete(spec: FamilySpec) -> None:
    """Raises (ValueError, AssertionError, ImportError or AttributeError) on the first field
    that is missing, out of its choices or does not resolve."""
    spec.check()
    assert issubclass(spec.backbone_class(), keras.Model), f"{spec.backbone} is not a model"
    presets = spec.preset_table()
    for preset in presets:  # preset names are unique across families: the factory finds them
        assert family_of(preset).name == spec.name, f"preset {preset!r} is in another family"
    assert spec.tokenizer in KINDS, f"{spec.name}: tokenizer {spec.tokenizer!r}"
    assert spec.layout in LAYOUTS, f"{spec.name}: layout {spec.layout!r} not in {LAYOUTS}"
    for cls in (spec.pretrainer_class(), spec.lm_class()):
        assert cls is None or issubclass(cls, keras.Model), cls
    for source in spec.converters:
        assert callable(spec.converter(source)), spec.converters[source]
    if spec.pretraining:
        assert isinstance(spec.pretraining_record(), PretrainingRecord), spec.pretraining
    if spec.framing:
        framed = framing.frame(spec.framing, ROLES, spec.name)
        assert framed.eos_id in (ROLES["eos"], ROLES["eod"])


def test_the_folders_are_the_families():
    assert len(FOLDERS) >= 12, FOLDERS
    assert [s.name for s in models.families()] == FOLDERS
    assert all(models.spec(name).name == name for name in FOLDERS)
    with pytest.raises(ValueError, match="unknown model family 'gpt9'"):
        models.spec("gpt9")


@pytest.mark.parametrize("name", FOLDERS)
def test_every_spec_is_complete(name):
    check_complete(models.spec(name))


@pytest.mark.parametrize("change, error", [
    ({"backbone": ""}, "backbone is empty"),
    ({"tokenizer": "morse"}, "tokenizer 'morse'"),
    ({"layout": "bart"}, "layout 'bart'"),
    ({"framing": ""}, "names both its lm and its framing"),
    ({"framing": "prefix_lm"}, "framing 'prefix_lm'"),
    ({"converters": {"onnx": "garden.models.gpt2.conversion:from_huggingface"}}, "onnx"),
    ({"lm": "garden.models.gpt2.causal_lm:GPT2CausalLM"}, "lm is not a class"),
    ({"lm": dict}, "dict"),
    ({"pretraining": "garden.tasks.pretraining.gpt2:NO_RECORD"}, "NO_RECORD"),
    ({"presets": "garden.models.gpt2.nosuch"}, "nosuch"),
])
def test_an_incomplete_spec_fails_the_check(change, error):
    good = models.spec("gpt2")
    check_complete(good)
    with pytest.raises((ValueError, AssertionError, ImportError, AttributeError), match=error):
        check_complete(dataclasses.replace(good, **change))


def test_required_fields_are_the_ones_without_defaults():
    required = [p.name for p in inspect.signature(FamilySpec).parameters.values()
                if p.default is inspect.Parameter.empty]
    assert required == ["name", "backbone", "tokenizer", "layout", "lower_case"]
    with pytest.raises(TypeError, match="lower_case"):
        FamilySpec("x", object, "bpe", "roberta")


def test_relative_references_and_the_derived_fields():
    """A "." converter reference is the family folder's; presets, hf_model_types and
    hf_tokenizer_files follow from the name and the tokenizer kind unless a record says
    otherwise; the classes are held as they are."""
    from garden.models.bert import BertBackbone, BertPretrainer

    def bert(tokenizer="wordpiece", converters=None, **fields):
        return FamilySpec("bert", BertBackbone, tokenizer, "bert", True,
                          converters={"huggingface": ".conversion:from_huggingface"}
                          if converters is None else converters, **fields)

    spec = bert(pretrainer=BertPretrainer, pretraining="a.b:C")
    assert (spec.backbone_class(), spec.pretrainer_class(), spec.lm_class()) == \
        (BertBackbone, BertPretrainer, None)
    assert spec.converters == {"huggingface": "garden.models.bert.conversion:from_huggingface"}
    assert (spec.presets, spec.pretraining) == ("garden.models.bert.presets", "a.b:C")
    assert (spec.hf_model_types, spec.hf_tokenizer_files) == (("bert",), ("vocab.txt",))
    assert dataclasses.replace(spec) == spec  # the record holds the absolute, derived form
    assert bert("sentencepiece").hf_tokenizer_files == ("spiece.model",)
    assert bert("bpe").hf_tokenizer_files == ("vocab.json", "merges.txt")
    # No huggingface converter: nothing to accept; an explicit value wins over the derived one.
    assert (bert(converters={}).hf_model_types, bert(converters={}).hf_tokenizer_files) == ((), ())
    assert bert(hf_model_types=["x"], hf_tokenizer_files=()).hf_model_types == ("x",)
    assert bert(hf_tokenizer_files=()).hf_tokenizer_files == ()
    gpt = models.spec("gpt")
    assert (gpt.hf_model_types, gpt.hf_tokenizer_files) == (("openai-gpt",), ())
    assert models.spec("gpt2").hf_tokenizer_files == ("vocab.json", "merges.txt")
    assert models.spec("spanbert").backbone is spec.backbone  # BERT's
    assert models.spec("spanbert").presets == "garden.models.spanbert.presets"


def test_resolve_names_module_and_attribute():
    assert resolve("garden.models.family:FamilySpec") is FamilySpec
    with pytest.raises(AttributeError):
        resolve("garden.models.family:Nothing")


def test_the_framings_of_each_kind():
    # Hugging Face config.json roles (garden.convert): GPT-2 has no pad and no prompt prefix.
    gpt2 = framing.frame("causal", framing.config_roles({"eos_token_id": 50256,
                                                          "bos_token_id": 50256}))
    assert (gpt2.eos_id, gpt2.pad_id, gpt2.prompt_prefix_ids) == (50256, 50256, ())
    t5 = framing.frame("t5", framing.config_roles({"eos_token_id": 1, "pad_token_id": 0,
                                                   "decoder_start_token_id": 0}))
    assert t5.ids() == {"eos_id": 1, "pad_id": 0, "prompt_prefix_ids": [],
                        "encoder_prefix_ids": [], "encoder_suffix_ids": [1],
                        "decoder_start_ids": [0]}
    bart = framing.frame("bart", framing.config_roles({
        "eos_token_id": 2, "pad_token_id": 1, "bos_token_id": 0, "decoder_start_token_id": 2}))
    assert (bart.encoder_prefix_ids, bart.encoder_suffix_ids, bart.decoder_start_ids) == (
        (0,), (2,), (2, 0))
    # A vocabulary's specials (the LM tasks, garden.fewshot): GPT-2's <|endoftext|> ("eod")
    # starts, ends and pads a text; BART's decoder starts from </s> <s> by default.
    causal = framing.vocabulary_framing(False, "bpe", {"eod": 7})
    assert (causal.eos_id, causal.pad_id, causal.prompt_prefix_ids) == (7, 7, (7,))
    seq2seq = framing.vocabulary_framing(True, "bpe", {"bos": 0, "pad": 1, "eos": 2})
    assert seq2seq.decoder_start_ids == (2, 0)
    assert framing.vocabulary_framing(True, "sentencepiece", {"pad": 0, "eos": 1}) == \
        framing.Framing(1, 0, encoder_suffix_ids=(1,), decoder_start_ids=(0,))
    with pytest.raises(ValueError, match="has no 'bos' token, which the bart prompt framing"):
        framing.frame("bart", {"eos": 2, "pad": 1})
