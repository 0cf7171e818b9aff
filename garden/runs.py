"""One way to open a trained model: a garden.train run, a garden.convert directory, an export or
a garden.generate model directory, with its tokenizer, text packer and settings.

    from garden import runs
    run = runs.open("runs/sst2")        # or a garden.convert OUT, an export <base>/<name>/<N>
    packer = run.packer(128)            # raw text -> the backbone's inputs, as in fine-tuning
    backbone = run.backbone(output_hidden_states=True, output_attentions=True,
                            use_head_mask=True)    # Keras, weights restored
    out = backbone({**packer.encode_numpy(["a text"]), "head_mask": mask})

A directory is the first kind whose marker file it holds (KINDS):
    model_dir  a garden.train run: operative_config.gin (the task is rebuilt from it) and the
               newest checkpoint of checkpoints/
    converted  a garden.convert output: convert_info.json (architecture, tokenizer, casing,
               layout), checkpoints/ckpt-0 and the tokenizer files (garden/pretrained.py)
    export     an export version directory <export_base>/<name>/<N>: saved_model.pb and
               assets.extra/garden_export.json (tokenizer, casing, layout, assets/ vocabulary)
    generate   a garden.generate model directory: generation.json, lm.keras, the vocabulary

What each kind gives; anything else is a RunError naming the path, what it is and what to open
instead:
    run.backbone(...)    model_dir (its task's encoder), converted: a Keras backbone with its
                         weights; switches output_hidden_states, output_attentions, use_head_mask
    run.task_model()     model_dir: the task's Keras model (reads the task's files, as training
                         did); export: the `serving_ids` signature as a callable on packed ids
    run.lm()             model_dir of an LM task, converted generative family, generate: the
                         GenerativeLM
    run.generation()     garden.generate_dir.GenerationModel (model, tokenizer, prompt ids):
                         generate (as recorded); model_dir of an LM task (the restored LM, the
                         task's vocabulary, the ids of generation_ids); converted (its generate/
                         model directory). open_generation(path, who) is the one loader
                         garden.generate and garden.fewshot call.
    run.packer(n), run.tokens()   every kind with a vocabulary (run.text: vocab,
                         tokenizer_kind, lower_case, layout)
    run.family, run.checkpoint, run.description
A Keras backbone cannot come from an export: the SavedModel holds the task's traced signatures,
not the Keras layers; open the run directory it was exported from.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from garden.generate_dir import CONFIG_FILE as GENERATE_CONFIG
from garden.generate_dir import FORMAT as GENERATE_FORMAT
from garden.generate_dir import MODEL_FILE as GENERATE_MODEL
from garden.pretrained import CHECKPOINT_DIR, INFO_FILE

MODEL_DIR, CONVERTED, EXPORT, GENERATE = "model_dir", "converted", "export", "generate"
CONVERTED_GENERATE_DIR = "generate"  # garden.convert's GENERATE_DIR (convert imports TensorFlow)
OPERATIVE_CONFIG = "operative_config.gin"  # garden.train writes it beside checkpoints/
# garden.serving.export's METADATA_FILENAME in assets.extra/ (that module loads TensorFlow).
EXPORT_METADATA = "assets.extra/garden_export.json"


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


def _switched(backbone, output_attentions: bool, use_head_mask: bool):
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


# --- model_dir: a garden.train run ------------------------------------------------------------

class ModelDirRun(Run):
    kind = MODEL_DIR

    def __init__(self, path: str, who: str, gin_params: Sequence[str] = ()):
        import gin
        import tensorflow as tf

        from garden import tasks, train  # noqa: F401 (registers train and the task table)

        super().__init__(path, who)
        tasks.register_with_gin()
        gin.clear_config()
        try:
            # gin's finalize hooks check the references (a retired name fails here); the
            # process's config is left unlocked for its caller (a notebook, a test, another run).
            with gin.unlock_config():
                gin.parse_config_files_and_bindings([posixpath.join(path, OPERATIVE_CONFIG)],
                                                    list(gin_params), skip_unknown=True)
        except ValueError as e:  # e.g. train.task = @garden.<a retired name>(): say its new one
            hint = tasks.renamed_hint(str(e))
            raise RunError(f"{posixpath.join(path, OPERATIVE_CONFIG)}: {str(e).splitlines()[0]}"
                           + (f" ({hint}: replace the name in that file)" if hint else "")
                           ) from None
        self.task = gin.query_parameter("train.task").scoped_configurable_fn()
        self.checkpoint = tf.train.latest_checkpoint(posixpath.join(path, CHECKPOINT_DIR))
        if self.checkpoint is None:
            raise RunError(f"{path} is a garden.train run directory without a checkpoint in "
                           f"{posixpath.join(path, CHECKPOINT_DIR)} (did the run save one?)")
        self.converted = getattr(self.task, "converted", None)  # its init_checkpoint's, or None
        vocab = getattr(self.task, "vocab", None)
        layout = getattr(self.task, "layout", None) or (
            self.converted.tokenizer.get("layout") if self.converted is not None else None)
        self.text = TextSettings(vocab, getattr(self.task, "tokenizer_kind", None),
                                 bool(getattr(self.task, "lower_case", True)), layout)
        self.objects: Dict[str, object] = {}
        self.family = self.converted.family if self.converted is not None else None
        self._built: Optional[str] = None  # the backbone's class name, once built

    @property
    def description(self) -> str:
        """"<backbone class> of PATH (ckpt-N)" once the backbone is built (the task's before)."""
        return f"{self._built or type(self.task).__name__} of {self.path} " \
               f"({posixpath.basename(self.checkpoint)})"

    def task_model(self):
        """The task's model, restored from the newest checkpoint (the task's prepare() reads
        its files first, as training did). run.objects holds every checkpointed object."""
        import tensorflow as tf

        if not self.objects:
            self.task.prepare()
            _, self.objects = self.task.build_model()
            status = tf.train.Checkpoint(**self.objects).read(self.checkpoint)
            status.expect_partial()
            status.assert_existing_objects_matched()
        return self.objects["model"]

    def backbone(self, output_hidden_states: bool = False, output_attentions: bool = False,
                 use_head_mask: bool = False, max_seq_length: Optional[int] = None):
        """The task's backbone: the task model's once task_model() has built it; else built
        from the task's backbone factory and vocabulary (no task files read) when it has one
        and the checkpoint a `backbone`; else the task model's."""
        from garden import pretrained

        factory = getattr(self.task, "backbone_fn", None)
        if self.objects or factory is None or \
                "backbone" not in pretrained.checkpoint_objects(self.checkpoint):
            model = self.task_model()
            # A task that checkpoints its GenerativeLM alone (T5 pretraining): the LM's backbone.
            backbone = self.objects.get("backbone", getattr(model, "backbone", None))
            if backbone is None:
                raise RunError(f"{self.path}: its task {type(self.task).__name__} has no "
                               f"backbone (it checkpoints {sorted(self.objects)})")
            if output_hidden_states:
                from garden.models.instrument import instrumented

                backbone = instrumented(backbone, output_hidden_states=True)
        else:
            backbone = self._backbone_from_factory(factory, output_hidden_states, max_seq_length)
        self.family = self.family or family_of(backbone)
        self._built = type(backbone).__name__
        return _switched(backbone, output_attentions, use_head_mask)

    def _backbone_from_factory(self, factory: Callable, output_hidden_states: bool,
                               max_seq_length: Optional[int]):
        from garden import pretrained
        from garden.tasks.shared import make_backbone, restore_backbone

        packer = self.packer(max_seq_length or getattr(self.task, "max_seq_length", 128))
        if self.converted is not None:  # the converted architecture, not the factory's preset
            backbone = pretrained.build_backbone(
                self.converted, factory, self.who, output_hidden_states,
                vocab_size=packer.vocab_size, max_seq_length=max_seq_length)
        else:
            backbone = make_backbone(factory, packer, output_hidden_states=output_hidden_states)
        restore_backbone(backbone, self.checkpoint, "backbone", self.who)
        return backbone

    def lm(self):
        model = self.task_model()
        if not hasattr(model, "is_encoder_decoder"):
            raise RunError(f"{self.path}: its task {type(self.task).__name__} trains "
                           f"{type(model).__name__}, not a GenerativeLM (garden.generate and "
                           f"garden.fewshot take a run of {_generative_families()})")
        return model

    def generation(self):
        """garden.generate_dir.GenerationModel of an LM task's run: the restored GenerativeLM,
        the task's tokenizer, and the prompt ids as training laid a text out (generation_ids)."""
        from garden.generate_dir import GenerationModel

        model = self.lm()  # builds and restores the task model (the task's prepare() first)
        tokenizer = self.text.tokenizer()
        ids = generation_ids(self.task, model, self.text.tokenizer_kind or tokenizer.kind,
                             tokenizer.vocab.specials, f"{self.path} vocabulary {self.vocab}")
        return GenerationModel(model=model, tokenizer=tokenizer, **ids)


def _generative_families() -> str:
    from garden import models

    return ", ".join(f.name for f in models.families() if f.lm)


def generation_ids(task, model, tokenizer_kind: str, specials: Dict[str, int],
                   who: str) -> Dict:
    """GenerationModel's ids (eos_id, pad_id, prompt_prefix_ids, prompt_suffix_ids,
    encoder_prefix_ids, encoder_suffix_ids, decoder_start_ids) of a garden.train run's task:
      a generative fine-tuning task (TextToText, CausalLMFinetuning): its own ids and prompt
        layout, as its export encodes a prompt (its prefix, the causal separator, its decoder
        start);
      a pretraining task: the prompt framing of the model's family (garden/models/framing.py:
        GPT / GPT-2 / GPT-3 <|endoftext|> x, T5 x </s>, BART <s> x </s>) from the vocabulary's
        specials; a model of no known family: the framing of its shape and vocabulary."""
    from garden.models import framing
    from garden.tasks.generation import GenerativeFinetuning

    if isinstance(task, GenerativeFinetuning):  # prepare() set its ids (task_model ran it)
        layout = task.serving_layout()
        ids = {"eos_id": task.eos_id, "pad_id": task.pad_id,
               "decoder_start_ids": list(layout.get("decoder_start_ids", []))}
        prefix, suffix = (list(layout.get("prompt_prefix_ids", [])),
                          list(layout.get("prompt_suffix_ids", [])))
        if model.is_encoder_decoder:
            return {**ids, "encoder_prefix_ids": prefix, "encoder_suffix_ids": suffix}
        return {**ids, "prompt_prefix_ids": prefix, "prompt_suffix_ids": suffix}
    from garden import models

    family = family_of(getattr(model, "backbone", None))
    kind = models.spec(family).framing if family else ""
    framed = (framing.frame(kind, specials, who) if kind else
              framing.vocabulary_framing(model.is_encoder_decoder, tokenizer_kind, specials, who))
    return framed.ids()


# --- converted: a garden.convert output directory -----------------------------------------------

class ConvertedRun(Run):
    kind = CONVERTED
    cannot = {"task_model": "a pretrained backbone without a task head; fine-tune it with "
                            "garden.train (INIT_CHECKPOINT) and open that run directory",
              "generation": "it has no generate/ model directory (garden.convert writes one "
                            "when the source had a tokenizer garden.generate reads)",
              "lm": "an encoder, which does not generate; convert a GPT, GPT-2, T5 or BART "
                    "checkpoint"}

    def __init__(self, path: str, who: str):
        from garden import pretrained

        super().__init__(path, who)
        self.converted = pretrained.open_converted(path)
        tok = self.converted.tokenizer
        self.family, self.checkpoint = self.converted.family, self.converted.checkpoint
        lower_case = self.converted.lower_case
        if lower_case is None:  # unrecorded: encoders default to uncased, generative LMs not
            lower_case = "lm_class" not in self.converted.architecture
        self.text = TextSettings(self.converted.vocab, tok.get("tokenizer"), bool(lower_case),
                                 tok.get("layout"))

    @property
    def description(self) -> str:
        return self.converted.describe()

    def backbone(self, output_hidden_states: bool = False, output_attentions: bool = False,
                 use_head_mask: bool = False, max_seq_length: Optional[int] = None):
        from garden import pretrained

        backbone = pretrained.build_backbone(self.converted, None, self.who,
                                             output_hidden_states, max_seq_length=max_seq_length)
        pretrained.restore(backbone, self.checkpoint, "backbone", self.who)
        return _switched(backbone, output_attentions, use_head_mask)

    def lm(self):
        from garden import pretrained

        if self.converted.lm_class() is None:
            raise self._refuse("lm")
        model = pretrained.build_lm(self.converted, None, self.who)
        pretrained.restore(model, self.checkpoint, "model", self.who)
        return model

    def generation(self):
        """The GenerationModel of its generate/ model directory (garden.convert's
        GENERATE_DIR: the LM with the ids of the source's config.json)."""
        import tensorflow as tf

        inner = posixpath.join(self.path, CONVERTED_GENERATE_DIR)
        if not tf.io.gfile.exists(posixpath.join(inner, GENERATE_CONFIG)):
            raise self._refuse("lm" if self.converted.lm_class() is None else "generation")
        return GenerateRun(inner, self.who).generation()


# --- export: a SavedModel version directory ---------------------------------------------------

class SignatureModel:
    """A SavedModel signature called like a Keras model on a dict of packed int32 ids."""

    def __init__(self, signature, path: str):
        self.signature, self.path = signature, path
        self.input_names = tuple(sorted(signature.structured_input_signature[1]))

    def __call__(self, inputs: Dict, training: bool = False) -> Dict:
        import tensorflow as tf

        missing = [k for k in self.input_names if k not in inputs]
        if missing:
            raise RunError(f"{self.path}: the export's ids signature takes {self.input_names}; "
                           f"the inputs lack {missing}")
        return self.signature(**{k: tf.cast(inputs[k], tf.int32) for k in self.input_names})


class ExportRun(Run):
    kind = EXPORT
    _no_keras = ("the SavedModel holds the task's traced signatures, not Keras layers; open the "
                 "garden.train run directory it was exported from (or a garden.convert "
                 "directory)")
    cannot = {"backbone": f"no Keras backbone: {_no_keras}",
              "lm": f"no Keras GenerativeLM: {_no_keras}",
              "generation": f"no garden.generate model: {_no_keras}"}

    def __init__(self, path: str, who: str):
        super().__init__(path, who)
        self.metadata = _read_json(posixpath.join(path, EXPORT_METADATA))
        vocab = self.metadata.get("vocab_file")
        self.text = TextSettings(posixpath.join(path, vocab) if vocab else None,
                                 self.metadata.get("tokenizer"),
                                 bool(self.metadata.get("lower_case", True)),
                                 self.metadata.get("layout"))
        self.family = self.metadata.get("family")
        self.checkpoint = None

    @property
    def description(self) -> str:
        return f"{self.metadata.get('task', 'task')} export {self.path}"

    def task_model(self) -> SignatureModel:
        """The export's `serving_ids` signature: packed ids in, the task's outputs out."""
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 - registers the text ops the signatures use

        signatures = tf.saved_model.load(self.path).signatures
        if "serving_ids" not in signatures:
            raise RunError(f"{self.path}: the export has no serving_ids signature (it has "
                           f"{sorted(signatures)}); call its text signatures with "
                           f"tf.saved_model.load")
        return SignatureModel(signatures["serving_ids"], self.path)


# --- generate: a garden.generate model directory ---------------------------------------------

class GenerateRun(Run):
    kind = GENERATE
    cannot = {"backbone": "a Keras-saved GenerativeLM; take run.lm().backbone",
              "task_model": "a GenerativeLM without a task head; use run.lm()"}

    def __init__(self, path: str, who: str):
        super().__init__(path, who)
        where = posixpath.join(path, GENERATE_CONFIG)
        self.config = _read_json(where)
        if self.config.get("format") != GENERATE_FORMAT:
            raise RunError(f"{where}: format {self.config.get('format')!r}, expected "
                           f"{GENERATE_FORMAT!r}")
        missing = [k for k in ("model_module", "model_class", "tokenizer", "vocab", "eos_id",
                               "pad_id") if k not in self.config]
        if missing:
            raise RunError(f"{where} lacks {missing}")
        self.text = TextSettings(posixpath.join(path, self.config["vocab"]),
                                 self.config["tokenizer"],
                                 bool(self.config.get("lower_case", False)))

    def lm(self):
        import importlib

        import keras

        config, where = self.config, posixpath.join(self.path, GENERATE_CONFIG)
        try:
            cls = getattr(importlib.import_module(config["model_module"]), config["model_class"])
        except (ImportError, AttributeError) as e:
            raise RunError(f"{where}: cannot import the model class "
                           f"{config['model_module']}.{config['model_class']} ({e})") from None
        custom = {cls.__name__: cls, keras.saving.get_registered_name(cls): cls}
        model = keras.saving.load_model(posixpath.join(self.path, GENERATE_MODEL),
                                        custom_objects=custom, compile=False)
        self.family = self.family or family_of(getattr(model, "backbone", None))
        return model

    def generation(self):
        """garden.generate_dir.GenerationModel: the model, its tokenizer, the recorded ids."""
        from garden.generate_dir import GenerationModel

        ids = lambda key: [int(i) for i in self.config.get(key, [])]  # noqa: E731
        return GenerationModel(model=self.lm(), tokenizer=self.text.tokenizer(),
                               eos_id=int(self.config["eos_id"]),
                               pad_id=int(self.config["pad_id"]),
                               prompt_prefix_ids=ids("prompt_prefix_ids"),
                               encoder_prefix_ids=ids("encoder_prefix_ids"),
                               encoder_suffix_ids=ids("encoder_suffix_ids"),
                               decoder_start_ids=ids("decoder_start_ids"))


# --- the table and open() -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    marker: str        # the file, relative to the directory, that says what it is
    what: str          # "a garden.train run directory"
    opener: Callable   # (path, who, gin_params) -> Run


KINDS: Tuple[Kind, ...] = (
    Kind(MODEL_DIR, OPERATIVE_CONFIG, "a garden.train run directory",
         lambda path, who, gin_params: ModelDirRun(path, who, gin_params)),
    Kind(CONVERTED, INFO_FILE, "a garden.convert output directory",
         lambda path, who, gin_params: ConvertedRun(path, who)),
    Kind(EXPORT, EXPORT_METADATA, "an export version directory",
         lambda path, who, gin_params: ExportRun(path, who)),
    Kind(GENERATE, GENERATE_CONFIG, "a garden.generate model directory",
         lambda path, who, gin_params: GenerateRun(path, who)),
)
KIND_NAMES = {k.name: k.what for k in KINDS}


def _read_json(path: str) -> Dict:
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise RunError(f"{path} is not JSON ({e})") from None


LM_KINDS = (MODEL_DIR, CONVERTED, GENERATE)  # the directories a GenerativeLM opens from


def open_generation(path: str, who: str):
    """The one loader of garden.generate and garden.fewshot: the GenerationModel (the restored
    GenerativeLM, its tokenizer, its prompt ids) of a garden.train run of an LM task (GPT,
    GPT-2, GPT-3, T5, BART pretraining; causal LM or text-to-text fine-tuning), a garden.convert
    directory with its generate/ model directory, or a garden.generate model directory.
    RunError in one line naming the path when it is none, or its run is no GenerativeLM's.
    What a run's task prints while it reads its files goes to stderr: stdout is the tool's."""
    import contextlib
    import sys

    with contextlib.redirect_stdout(sys.stderr):
        return open(path, LM_KINDS, who=who).generation()


def detect(path: str) -> Optional[Kind]:
    """The kind of the directory at `path` (the first whose marker it holds), or None."""
    import tensorflow as tf

    return next((k for k in KINDS if tf.io.gfile.exists(posixpath.join(path, k.marker))), None)


def open(path: str, kinds: Optional[Sequence[str]] = None, *,  # noqa: A001 - runs.open(path)
         who: str = "garden.runs", gin_params: Sequence[str] = ()) -> Run:
    """The model directory at `path`, opened (nothing is built until asked); `kinds` limits what
    is accepted (default: every kind). RunError in one line naming `path` when it is none of
    them. gin_params: extra bindings for a model_dir's operative config."""
    import tensorflow as tf

    wanted = [k for k in KINDS if kinds is None or k.name in kinds]
    unknown = sorted(set(kinds or ()) - set(KIND_NAMES))
    if unknown:
        raise ValueError(f"unknown run kinds {unknown}; choose from {list(KIND_NAMES)}")
    found = detect(path)
    if found is not None and found in wanted:
        return found.opener(path, who, gin_params)
    # One kind: the file that is missing, by its path; several: their names.
    expected = " nor ".join(f"{k.what} ({posixpath.join(path, k.marker)} does not exist)"
                            if len(wanted) == 1 else f"{k.what} (no {k.marker})" for k in wanted)
    if found is not None:
        raise RunError(f"{path} is {found.what}, but {who} takes "
                       f"{' or '.join(k.what for k in wanted)}")
    versions = sorted(int(n.rstrip("/")) for n in tf.io.gfile.listdir(path)
                      if n.rstrip("/").isdigit()) if tf.io.gfile.isdir(path) else []
    hint = (f"; it holds export versions {versions}: pass {posixpath.join(path, str(versions[-1]))}"
            if versions and any(k.name == EXPORT for k in wanted) else "")
    raise RunError(f"{path} is {'neither' if len(wanted) > 1 else 'not'} {expected}{hint}")
