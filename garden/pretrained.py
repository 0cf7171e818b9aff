"""Converted checkpoints as the starting point of fine-tuning ("bring your own checkpoint").

`python -m garden.convert ... --output=OUT` writes OUT/convert_info.json (the marker of a
converted directory), OUT/checkpoints/ckpt-0 (a tf.train.Checkpoint: `backbone`, for ELECTRA
also `discriminator` (the same tower), for the generative families also `model`, the whole
GenerativeLM) and the source's tokenizer files. Every fine-tuning task takes such a directory as
INIT_CHECKPOINT:

    * the backbone is built from OUT's architecture (the backbone class and its get_config()
      recorded in convert_info.json), not from the config's preset; its sizes are printed on
      one line; dropout-type bindings of the config are applied (fine-tuning choices);
    * VOCAB and lower_case default to OUT's tokenizer and casing (and the tokenizer kind and
      text layout to OUT's);
    * a binding that contradicts the checkpoint (an explicitly bound architecture argument such
      as `backbone.num_layers = 2`, a VOCAB of another size, a lower_case, tokenizer or
      layout other than OUT's) is refused with one line naming both values.

This module is the one place that reads a converted directory; the tasks call text_settings()
in their constructor, resolve_checkpoint() in prepare() and build_backbone() / build_lm() in
build_model().
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import posixpath
from typing import Dict, List, Optional, Tuple

INFO_FILE = "convert_info.json"
CHECKPOINT_DIR = "checkpoints"

# Constructor arguments that are not the architecture of the weights: never a contradiction.
# Dropout-type arguments (any name holding "dropout") and _APPLIED are applied, the others
# ignored (the preset, the initializer of weights that are restored, ELECTRA's tower sizes).
_NOT_ARCHITECTURE = {"preset", "name", "trainable", "dtype", "output_hidden_states",
                     "output_attentions", "use_head_mask", "initializer_range", "embeddings",
                     "generator_hidden_size", "generator_num_heads",
                     "generator_intermediate_size"}
# Bindings that change how the converted backbone runs, not its weights: applied like the
# dropouts, because a binding dropped without a word does not do what was asked
# (`backbone.trainable = False` would train the converted backbone all the same).
_APPLIED = {"trainable", "dtype", "output_hidden_states", "output_attentions", "use_head_mask"}


class ConvertedCheckpointError(ValueError):
    """A converted directory that is incomplete, or a binding that contradicts it."""


def _read_json(path: str) -> Dict:
    import tensorflow as tf

    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def is_converted(path: Optional[str]) -> bool:
    """Whether `path` is a garden.convert output directory (it holds convert_info.json)."""
    import tensorflow as tf

    return bool(path) and tf.io.gfile.isdir(path) and tf.io.gfile.exists(
        posixpath.join(path, INFO_FILE))


@dataclasses.dataclass
class Converted:
    """A garden.convert output directory, read from its convert_info.json."""

    path: str
    info: Dict

    @property
    def family(self) -> str:
        return self.info["family"]

    @property
    def architecture(self) -> Dict:
        return self.info["architecture"]

    @property
    def config(self) -> Dict:
        return dict(self.architecture["config"])

    @property
    def tokenizer(self) -> Dict:
        return self.info.get("tokenizer") or {}

    @property
    def vocab(self) -> Optional[str]:
        """The path of the copied vocabulary (vocab.txt, *.model or vocab.json), or None."""
        name = self.tokenizer.get("vocab")
        return posixpath.join(self.path, name) if name else None

    @property
    def lower_case(self) -> Optional[bool]:
        return self.tokenizer.get("lower_case")

    @property
    def checkpoint(self) -> str:
        return posixpath.join(self.path, self.info["checkpoint"])

    def backbone_class(self):
        module, cls = self.architecture["backbone_class"].split(":")
        return getattr(importlib.import_module(module), cls)

    def lm_class(self):
        spec = self.architecture.get("lm_class")
        if not spec:
            return None
        module, cls = spec.split(":")
        return getattr(importlib.import_module(module), cls)

    def describe(self) -> str:
        """One line of the backbone's sizes."""
        c = self.config
        keys = ("num_layers", "num_encoder_layers", "num_decoder_layers", "hidden_size",
                "embedding_size", "num_heads", "num_heads_per_layer", "intermediate_size",
                "vocab_size", "max_sequence_length", "max_position_embeddings",
                "type_vocab_size")
        sizes = ", ".join(f"{k}={c[k]}" for k in keys if c.get(k) is not None)
        return (f"{self.architecture['backbone_class'].split(':')[1]} from converted "
                f"{self.info.get('source')} {self.family} checkpoint {self.path}: {sizes}")


def open_converted(path: Optional[str]) -> Optional[Converted]:
    """The converted directory at `path`, None when `path` is not one; an error when it is one
    written by an older garden.convert (no checkpoint or architecture recorded)."""
    if not is_converted(path):
        return None
    info = _read_json(posixpath.join(path, INFO_FILE))
    if "architecture" not in info or "checkpoint" not in info:
        raise ConvertedCheckpointError(
            f"{path} was converted by an older garden.convert (its {INFO_FILE} records no "
            f"architecture or checkpoint): convert it again to fine-tune from it")
    return Converted(path, info)


# --- checkpoint paths ------------------------------------------------------------------------

def _object_graph(path: str):
    """The object graph a tf.train.Checkpoint saved with its variables."""
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(path).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return graph


def checkpoint_objects(path: str) -> List[str]:
    """Names of the top-level objects of a tf.train.Checkpoint (model, backbone, ...)."""
    return [child.local_name for child in _object_graph(path).nodes[0].children]


def saved_variable_count(path: str, key: str) -> Optional[int]:
    """How many variables a tf.train.Checkpoint holds under its top-level object `key` (a
    variable reachable twice counts once); None: no such object. A restore checks only that
    what was built exists in the checkpoint, so comparing this count with the built model's
    finds a checkpoint of a deeper or larger model."""
    graph = _object_graph(path)
    stack = [c.node_id for c in graph.nodes[0].children if c.local_name == key]
    if not stack:
        return None
    seen, count = set(), 0
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            count += any(a.name == "VARIABLE_VALUE" for a in graph.nodes[node].attributes)
            stack.extend(c.node_id for c in graph.nodes[node].children)
    return count


def resolve_checkpoint(path: str, wanted_object: str) -> str:
    """The checkpoint prefix of INIT_CHECKPOINT: a garden.train model_dir (its checkpoints/),
    a converted directory, a checkpoints/ folder or a prefix; checked to hold the object the
    backbone is restored from."""
    import tensorflow as tf

    ckpt = path
    if tf.io.gfile.isdir(path):
        converted = open_converted(path)
        if converted is not None:
            ckpt = converted.checkpoint
        else:
            ckpt = (tf.train.latest_checkpoint(posixpath.join(path, CHECKPOINT_DIR))
                    or tf.train.latest_checkpoint(path))
            if ckpt is None:
                raise FileNotFoundError(
                    f"INIT_CHECKPOINT {path} is neither a garden.train model_dir (no checkpoint "
                    f"in it nor in its {CHECKPOINT_DIR}/ folder) nor a garden.convert output "
                    f"directory (no {INFO_FILE})")
    elif not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"INIT_CHECKPOINT {path} does not exist: give a garden.train "
                                f"model_dir, a garden.convert output directory or a checkpoint "
                                f"prefix")
    objects = checkpoint_objects(ckpt)
    if wanted_object not in objects:
        hint = (" (an ELECTRA pretraining checkpoint: bind garden.Classification"
                ".init_checkpoint_object = 'discriminator', as configs/finetune/"
                "classification_electra_tiny.gin does)" if "discriminator" in objects else "")
        raise ValueError(f"checkpoint {ckpt} has no {wanted_object!r} object to initialise the "
                         f"backbone from; it holds {sorted(objects)}{hint}")
    return ckpt


# --- the text settings -----------------------------------------------------------------------

def text_settings(who: str, init_checkpoint: Optional[str], vocab: Optional[str],
                  lower_case: Optional[bool], tokenizer: Optional[str] = None,
                  layout: Optional[str] = None, default_lower_case: bool = True
                  ) -> Tuple[Optional[Converted], str, bool, Optional[str], Optional[str]]:
    """(converted or None, vocab, lower_case, tokenizer kind, layout) of a fine-tuning task.

    With a converted INIT_CHECKPOINT the unset ones come from it and a set one that contradicts
    it is an error; without one, `vocab` is required and lower_case defaults to
    `default_lower_case`."""
    converted = open_converted(init_checkpoint) if init_checkpoint else None
    if converted is None:
        if init_checkpoint:
            import tensorflow as tf

            if tf.io.gfile.isdir(init_checkpoint) and not (
                    tf.train.latest_checkpoint(posixpath.join(init_checkpoint, CHECKPOINT_DIR))
                    or tf.train.latest_checkpoint(init_checkpoint)):
                resolve_checkpoint(init_checkpoint, "backbone")  # raises the clear error
        if vocab is None:
            raise ConvertedCheckpointError(
                f"{who}: no vocabulary: bind VOCAB (e.g. --gin_param=\"VOCAB='vocab.txt'\") or "
                f"set INIT_CHECKPOINT to a garden.convert output directory (its tokenizer is "
                f"used)")
        return None, vocab, default_lower_case if lower_case is None else bool(lower_case), \
            tokenizer, layout
    tok = converted.tokenizer
    if vocab is None:
        if converted.vocab is None:
            raise ConvertedCheckpointError(
                f"{who}: the converted checkpoint {converted.path} has no tokenizer files (none "
                f"were found next to its source): bind VOCAB to the model's vocabulary")
        vocab = converted.vocab
    else:
        _check_vocab_size(who, vocab, tokenizer, lower_case, converted)
    if lower_case is None:
        lower_case = converted.lower_case if converted.lower_case is not None else \
            default_lower_case
    elif converted.lower_case is not None and bool(lower_case) != converted.lower_case:
        raise ConvertedCheckpointError(
            f"{who}.lower_case = {bool(lower_case)} contradicts the converted checkpoint "
            f"{converted.path}, whose tokenizer has lower_case = {converted.lower_case} "
            f"({'uncased' if converted.lower_case else 'cased'}); drop the binding")
    if vocab == converted.vocab:
        for name, value in (("tokenizer", tokenizer), ("layout", layout)):
            if value is not None and tok.get(name) and value != tok[name]:
                raise ConvertedCheckpointError(
                    f"{who}.{name} = {value!r} contradicts the converted checkpoint "
                    f"{converted.path}, whose {name} is {tok[name]!r}; drop the binding")
        tokenizer = tokenizer or tok.get("tokenizer")
    layout = layout or tok.get("layout")
    return converted, vocab, bool(lower_case), tokenizer, layout


def _check_vocab_size(who, vocab, tokenizer, lower_case, converted: Converted) -> None:
    """An explicitly bound VOCAB must have the size of the checkpoint's own vocabulary (or, when
    it has none, fit its embedding table)."""
    from text import tokenizers, vocab_files

    size = tokenizers.load_tokenizer(tokenizer or vocab_files.detect_kind(vocab), vocab,
                                     lower_case=True if lower_case is None else lower_case
                                     ).vocab.size
    if converted.vocab is not None:
        own = tokenizers.load_tokenizer(converted.tokenizer.get("tokenizer") or
                                        vocab_files.detect_kind(converted.vocab),
                                        converted.vocab).vocab.size
        if size != own:
            raise ConvertedCheckpointError(
                f"VOCAB {vocab} has {size} tokens but the converted checkpoint "
                f"{converted.path} was trained with {own} ({converted.vocab}); drop the VOCAB "
                f"binding to use the checkpoint's")
    table = converted.config.get("vocab_size")
    if table is not None and size > table:
        raise ConvertedCheckpointError(
            f"VOCAB {vocab} has {size} tokens but the converted checkpoint {converted.path} "
            f"has vocab_size = {table}")


# --- the backbone ----------------------------------------------------------------------------

def _configurable_names(factory) -> List[str]:
    """The gin names whose bindings reach `factory`'s backbone."""
    name = getattr(factory, "__name__", None)
    names = [name] if name else []
    if name == "electra_discriminator":
        names.append("electra_towers")
    if name != "backbone":
        names.append("backbone")
    return names


def _bindings(factory) -> Dict[str, Tuple[str, object]]:
    """argument -> (the binding's selector, value) of every explicit gin binding of the
    configurables that build the backbone."""
    import gin

    out = {}
    for name in _configurable_names(factory):
        try:
            bound = gin.get_bindings(name)
        except (ValueError, KeyError):
            continue
        for key, value in bound.items():
            out.setdefault(key, (f"{name}.{key}", value))
    return out


def _same(a, b) -> bool:
    norm = lambda v: json.loads(json.dumps(v, default=str))  # noqa: E731 - tuples == lists
    try:
        return norm(a) == norm(b)
    except (TypeError, ValueError):
        return a == b


def check_bindings(converted: Converted, factory) -> Dict:
    """The backbone config of `converted` with the config's dropout-type bindings applied;
    ConvertedCheckpointError for a bound architecture argument of another value. factory None:
    no config (garden.runs opening the directory by itself), the recorded config as is."""
    config = converted.config
    if factory is None:
        return config
    for key, (selector, value) in _bindings(factory).items():
        if value is None:
            continue
        if "dropout" in key or key in _APPLIED:
            if key in config:
                config[key] = value
                continue
            if key in _APPLIED and not value:
                continue  # a switch off: what the backbone does anyway
        elif key in _NOT_ARCHITECTURE:
            continue
        if key not in config:
            raise ConvertedCheckpointError(
                f"{selector} = {value!r}: the converted {converted.family} backbone of "
                f"{converted.path} takes no {key}, so the binding would be ignored; drop it")
        if not _same(value, config[key]):
            raise ConvertedCheckpointError(
                f"{selector} = {value!r} contradicts the converted checkpoint {converted.path}, "
                f"which has {key} = {config[key]!r}; drop the binding (the backbone is built "
                f"from the checkpoint's architecture)")
    return config


def build_backbone(converted: Converted, factory, who: str,
                   output_hidden_states: bool = False, vocab_size: Optional[int] = None,
                   max_seq_length: Optional[int] = None):
    """The backbone of `converted`'s architecture (weights not yet restored)."""
    config = check_bindings(converted, factory)
    positions = config.get("max_sequence_length")
    if max_seq_length is not None and positions is not None and max_seq_length > positions:
        raise ConvertedCheckpointError(
            f"{who}: max_seq_length = {max_seq_length} exceeds the converted checkpoint "
            f"{converted.path}'s max_sequence_length = {positions}; bind a smaller "
            f"max_seq_length")
    if vocab_size is not None and config.get("vocab_size") is not None and \
            vocab_size > config["vocab_size"]:
        raise ConvertedCheckpointError(
            f"{who}: the vocabulary has {vocab_size} tokens but the converted checkpoint "
            f"{converted.path} has vocab_size = {config['vocab_size']}")
    if output_hidden_states and "output_hidden_states" in config:
        config["output_hidden_states"] = True
    backbone = converted.backbone_class().from_config(config)
    if output_hidden_states and "hidden_states" not in backbone.output:
        # ELMo and CoVe give them without the switch; the others have none to give.
        raise ValueError(f"{who}: the converted {converted.family} backbone gives no "
                         f"hidden_states (feature-based use: garden.Tagging.feature_layers, "
                         f"extract_features)")
    print(f"[{who}] {converted.describe()}", flush=True)
    return backbone


def build_lm(converted: Converted, factory, who: str):
    """The GenerativeLM of a converted generative checkpoint (GPT, GPT-2, T5, BART)."""
    lm_class = converted.lm_class()
    if lm_class is None:
        raise ConvertedCheckpointError(
            f"{who}: the converted checkpoint {converted.path} is a {converted.family} encoder, "
            f"which does not generate; give a GPT, GPT-2, T5 or BART checkpoint")
    config = check_bindings(converted, factory)
    model = lm_class(converted.backbone_class().from_config(config))
    print(f"[{who}] {converted.describe()}", flush=True)
    return model


def restore(model, checkpoint: str, object_name: str, who: str) -> None:
    """Restores `model` from the checkpoint's `object_name`; every weight must be found."""
    import tensorflow as tf

    status = tf.train.Checkpoint(**{object_name: model}).read(checkpoint)
    status.expect_partial()
    status.assert_existing_objects_matched()
    print(f"[{who}] initialised from {checkpoint} (its {object_name!r})", flush=True)


# --- what garden.convert writes --------------------------------------------------------------

def architecture_of(family: str, backbone, lm=None) -> Dict:
    """The architecture record of convert_info.json: the backbone's class and get_config()
    (JSON), and the GenerativeLM class of a generative family."""
    cls = type(backbone)
    config = json.loads(json.dumps(backbone.get_config(), default=_not_json))
    out = {"backbone_class": f"{cls.__module__}:{cls.__name__}", "config": config}
    if lm is not None:
        out["lm_class"] = f"{type(lm).__module__}:{type(lm).__name__}"
    return out


def _not_json(value):
    raise TypeError(f"backbone config value {value!r} is not JSON")


def write_checkpoint(output: str, family: str, backbone, lm=None) -> str:
    """OUT/checkpoints/ckpt-0 with `backbone` (ELECTRA: also `discriminator`; a generative
    family: also `model`, the GenerativeLM). Returns its path relative to `output`."""
    import tensorflow as tf

    objects = {"backbone": backbone}
    if family == "electra":
        objects["discriminator"] = backbone
    if lm is not None:
        objects["model"] = lm
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects),
                                         os.path.join(output, CHECKPOINT_DIR), max_to_keep=1)
    path = manager.save(checkpoint_number=0)
    return os.path.relpath(path, output)


def copy_tokenizer(output: str, family: str, kind: str, files: Dict[str, str],
                   lower_case: Optional[bool]) -> Dict:
    """Copies a tokenizer's files ({name in `output`: source path}) into `output`; returns
    their convert_info.json record (garden.convert's, and garden.bertology.prune's for a
    pruned model)."""
    import shutil

    for name, path in files.items():
        shutil.copyfile(path, os.path.join(output, name))
    vocab = "vocab.json" if kind == "bpe" else next(iter(files))
    return {"vocab": vocab, "files": sorted(files), "tokenizer": kind,
            "layout": _layout(family, kind),
            "lower_case": lower_case,
            "sources": {n: os.path.abspath(p) for n, p in files.items()}}


def _layout(family: str, kind: str) -> str:
    """The family's text layout, or its tokenizer kind's default for a vocabulary of another
    kind (--vocab)."""
    from garden import models
    from garden.serving.text import DEFAULT_LAYOUT

    spec = models.spec(family)
    return spec.layout if kind == spec.tokenizer else DEFAULT_LAYOUT[kind]
