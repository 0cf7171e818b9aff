"""Reading a released checkpoint's files, with errors that name the file: a release's JSON
and HDF5 files, a Hugging Face checkpoint directory (config.json; safetensors, sharded or not,
or pytorch_model.bin), a Hugging Face model id in the local hub cache (never downloaded) and a
keras-hub preset directory; and the tokenizer a checkpoint comes with (its files per source,
its casing). The converters (garden/models/<family>/conversion.py) map what these return onto
garden weights."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from garden import models
from garden.models.family import KERAS_HUB_TOKENIZER_FILES
from text import vocab_files


def read_json_object(path: str) -> Dict:
    """The JSON object in the file at `path` (a release's config.json, options or hparams
    JSON). FileNotFoundError when there is nothing at `path`; ValueError naming the file when it
    is a directory, not UTF-8 JSON, or JSON that is not an object of settings."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory, not a JSON file")
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not JSON: not UTF-8 text (byte {e.start})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not an object of "
                         f"settings")
    return value


def read_hdf5(path: str) -> Dict[str, np.ndarray]:
    """{dataset name: array} of every dataset in the HDF5 file at `path` (AllenNLP's weight
    files). FileNotFoundError when there is nothing at `path`; ValueError naming the file when
    h5py cannot read it (another format, or a truncated file)."""
    import h5py

    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist")
    arrays: Dict[str, np.ndarray] = {}
    try:
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, item: arrays.__setitem__(name, item[...])
                         if isinstance(item, h5py.Dataset) else None)
    except OSError as e:  # h5py's "Unable to synchronously open file (file signature not found)"
        raise ValueError(f"{path} is not a readable HDF5 file ({e})") from None
    return arrays


def huggingface_directory(path_or_dir: str) -> str:
    """The Hugging Face checkpoint directory `path_or_dir` is or holds a file of."""
    if not os.path.exists(path_or_dir):
        raise FileNotFoundError(f"{path_or_dir} does not exist: give a Hugging Face checkpoint "
                                f"directory (config.json next to its weights)")
    return path_or_dir if os.path.isdir(path_or_dir) else os.path.dirname(path_or_dir)


def read_huggingface_config(path_or_dir: str) -> Dict:
    """The parsed config.json of a Hugging Face checkpoint directory (or of a file in one);
    ValueError naming the file when it is not a JSON object."""
    config_path = os.path.join(huggingface_directory(path_or_dir), "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(f"{config_path} not found: a Hugging Face checkpoint directory "
                                "holds config.json next to its weights")
    return read_json_object(config_path)


def _load_weights(path: str, directory: str) -> Dict[str, np.ndarray]:
    """The arrays of one Hugging Face weights file (or of the shards a .safetensors.index.json
    names); ValueError naming the file that cannot be read."""
    if path.endswith(".safetensors.index.json"):
        weight_map = read_json_object(path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{path} has no \"weight_map\" object (parameter -> shard file)")
        weights = {}
        for shard in sorted(set(weight_map.values())):
            weights.update(_load_weights(os.path.join(directory, shard), directory))
        return weights
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist")
        try:
            return load_file(path)
        except SafetensorError as e:
            raise ValueError(f"{path} is not a readable safetensors file ({e})") from None
    if path.endswith(".bin"):
        import pickle

        import torch  # optional dependency: only pytorch_model.bin needs it

        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:  # torch's message is a page on the weights_only switch
            raise ValueError(f"{path} is not a PyTorch state dict (torch.load with "
                             f"weights_only=True cannot read it)") from None
        except (RuntimeError, EOFError) as e:  # not a zip archive, or a truncated one
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"{path} is not a readable PyTorch file ({why})") from None
        if not isinstance(state, dict):
            raise ValueError(f"{path} holds a {type(state).__name__}, not a state dict")
        return {k: v.detach().float().numpy() if v.is_floating_point()
                else v.numpy() for k, v in state.items()}
    raise ValueError(f"{path}: expected a .safetensors or pytorch_model.bin file")


def read_huggingface_dir(path_or_dir: str) -> Tuple[Dict, Dict[str, np.ndarray]]:
    """(config, weights) of a Hugging Face checkpoint directory (or a weights file in one).

    Reads config.json and, in this order, model.safetensors, model.safetensors.index.json
    (sharded), pytorch_model.bin. Weights come back as numpy arrays under their state-dict
    names; nothing is downloaded.
    """
    directory = huggingface_directory(path_or_dir)
    config = read_huggingface_config(directory)
    candidates = ([path_or_dir] if os.path.isfile(path_or_dir) else
                  [os.path.join(directory, n) for n in
                   ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")])
    for path in candidates:
        if os.path.exists(path):
            return config, _load_weights(path, directory)
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {directory}")


# --- a Hugging Face model id in the hub cache -------------------------------------------------
# huggingface_hub (a runtime requirement; tokenizers needs it too) resolves the cache's layout,
# models--{org}--{name}/refs/{revision} -> snapshots/<commit>/: try_to_load_from_cache reads it
# and never touches the network, and its validate_repo_id tells a model id from a path. The
# cache folder is worked out here, when called, in huggingface_hub's own order: its constants
# read the environment once, at its import, and the error must name the folder it looked in.


def huggingface_cache(cache_dir: Optional[str] = None) -> str:
    """The Hugging Face hub cache folder: `cache_dir` (--cache_dir), else $HF_HUB_CACHE (or
    its old name $HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub."""
    env = os.environ.get
    folder = cache_dir or env("HF_HUB_CACHE") or env("HUGGINGFACE_HUB_CACHE") or os.path.join(
        env("HF_HOME") or os.path.join(env("XDG_CACHE_HOME") or os.path.join("~", ".cache"),
                                       "huggingface"), "hub")
    return os.path.expanduser(os.path.expandvars(folder))


def is_model_id(text: str) -> bool:
    """Whether `text` reads as a Hugging Face model id ("org/name" or "name") rather than a
    path: not absolute, and huggingface_hub's validate_repo_id accepts it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if os.path.isabs(text) or text.startswith(("~", ".")):
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def cached_huggingface_dir(model_id: str, cache_dir: Optional[str] = None,
                           revision: Optional[str] = None) -> str:
    """The snapshot directory of `model_id` at `revision` (a branch or tag ref, or a commit
    hash; None: "main") in the hub cache (huggingface_cache). Nothing is downloaded: a model or
    revision the cache lacks is a FileNotFoundError naming the folder looked in and the
    command that brings it on a machine with network."""
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.file_download import repo_folder_name

    cache = huggingface_cache(cache_dir)
    revision = revision or "main"
    config = try_to_load_from_cache(model_id, "config.json", cache_dir=cache, revision=revision)
    if isinstance(config, str):
        return os.path.dirname(config)
    repo = os.path.join(cache, repo_folder_name(repo_id=model_id, repo_type="model"))
    fetch = (f"hf download {model_id}" + ("" if revision == "main" else f" --revision {revision}"))
    if not os.path.isdir(repo):
        raise FileNotFoundError(
            f"--input={model_id} is not a directory, and the Hugging Face cache {cache} holds "
            f"no {os.path.basename(repo)} (looked in --cache_dir, else $HF_HUB_CACHE, else "
            f"$HF_HOME/hub, else ~/.cache/huggingface/hub; nothing is downloaded): run "
            f"`{fetch}` (or `huggingface-cli download`) on a machine with network and copy the "
            f"cache here, or give the model's directory")
    cached = sorted(set(_names(os.path.join(repo, "refs"))) |
                    set(_names(os.path.join(repo, "snapshots"))))
    raise FileNotFoundError(
        f"--input={model_id}: the Hugging Face cache {repo} has no config.json at revision "
        f"{revision!r} (cached refs and commits: {', '.join(cached) or 'none'}; nothing is "
        f"downloaded): pass --revision=<one of them>, or run `{fetch}` on a machine with "
        f"network and copy the cache here")


def _names(folder: str) -> List[str]:
    return os.listdir(folder) if os.path.isdir(folder) else []


# --- a keras-hub preset directory ------------------------------------------------------------

KERAS_HUB_FILES = ("config.json", "model.weights.h5")


def read_keras_hub_preset(preset_dir: str) -> Tuple[Dict, Dict[str, np.ndarray]]:
    """(config.json's object, {weight path: array}) of a keras-hub preset directory, as
    `Backbone.save_to_preset` writes it: config.json names the backbone class
    ("class_name") and its constructor arguments ("config"); model.weights.h5 is Keras 3's
    weights file, read by dataset path ("layers/transformer_encoder/_self_attention_layer/
    query_dense/vars/0") with h5py. Errors name the directory or the file."""
    if not os.path.isdir(preset_dir):
        raise FileNotFoundError(f"--input={preset_dir} is not a directory: give a keras-hub "
                                f"preset directory ({' + '.join(KERAS_HUB_FILES)}, as "
                                f"save_to_preset writes)")
    missing = [n for n in KERAS_HUB_FILES if not os.path.exists(os.path.join(preset_dir, n))]
    if missing:
        raise FileNotFoundError(f"--input={preset_dir} has no {' or '.join(missing)}: not a "
                                f"keras-hub backbone preset (save_to_preset writes "
                                f"{' + '.join(KERAS_HUB_FILES)})")
    config_path = os.path.join(preset_dir, "config.json")
    config = read_json_object(config_path)
    if not isinstance(config.get("class_name"), str) or not isinstance(config.get("config"),
                                                                      dict):
        raise ValueError(f"{config_path} has no \"class_name\" and \"config\": not a keras-hub "
                         f"backbone config")
    return config, read_hdf5(os.path.join(preset_dir, "model.weights.h5"))


# --- the tokenizer a checkpoint comes with ------------------------------------------------

def _checkpoint_dir(source: str, input_path: str) -> str:
    if source == "huggingface":
        return huggingface_directory(input_path)
    if source == "keras_hub":
        return input_path  # the preset directory
    return os.path.dirname(os.path.abspath(input_path))


def find_tokenizer(source: str, family: str, input_path: str,
                   vocab: Optional[str] = None) -> Optional[Tuple[str, Dict[str, str]]]:
    """(kind, {file name in OUT: source path}) of the source's tokenizer, or None.

    Hugging Face: the family's files in the checkpoint directory; keras-hub: the preset's
    assets/tokenizer/ files of the family's kind (KERAS_HUB_TOKENIZER_FILES); TF1: vocab.txt or the
    SentencePiece *.model next to the checkpoint (GPT-2: encoder.json + vocab.bpe, copied as
    vocab.json + merges.txt); Model Garden: vocab.txt next to the checkpoint or in its assets/
    or parent folder. `vocab` (--vocab) names the file instead."""
    if vocab is not None:
        if not os.path.exists(vocab):
            raise FileNotFoundError(f"--vocab={vocab} does not exist")
        return vocab_files.tokenizer_files(vocab)
    folder = _checkpoint_dir(source, input_path)
    spec = models.spec(family)
    if source == "huggingface":
        if not spec.hf_tokenizer_files:
            return None
        names = spec.hf_tokenizer_files
        files = {n: os.path.join(folder, n) for n in names}
        if spec.tokenizer == "sentencepiece" and not os.path.exists(files[names[0]]):
            found = sorted(n for n in os.listdir(folder) if n.endswith(".model"))
            files = {found[0]: os.path.join(folder, found[0])} if found else files
        return (spec.tokenizer, files) if all(map(os.path.exists, files.values())) else None
    if source == "keras_hub":
        assets = os.path.join(folder, "assets", "tokenizer")
        files = {n: os.path.join(assets, r)
                 for n, r in KERAS_HUB_TOKENIZER_FILES.get(spec.tokenizer, {}).items()}
        return (spec.tokenizer, files) if files and all(map(os.path.exists, files.values())) \
            else None
    if spec.tf1_tokenizer_files:  # GPT-2's release: encoder.json + vocab.bpe
        files = {n: os.path.join(folder, r) for n, r in spec.tf1_tokenizer_files.items()}
        return (spec.tokenizer, files) if all(map(os.path.exists, files.values())) else None
    for where in (folder, os.path.join(folder, "assets"), os.path.dirname(folder)):
        if os.path.exists(os.path.join(where, "vocab.txt")):
            return "wordpiece", {"vocab.txt": os.path.join(where, "vocab.txt")}
        found = sorted(n for n in os.listdir(where) if n.endswith(".model")) \
            if os.path.isdir(where) else []
        if found:
            return "sentencepiece", {found[0]: os.path.join(where, found[0])}
        if source == "tf1":
            break  # the release's files sit next to the checkpoint
    return None


def infer_lower_case(source: str, family: str, input_path: str, kind: Optional[str],
                     flag: Optional[bool]) -> Optional[bool]:
    """The casing of the source's tokenizer: --lower_case / --no-lower_case when given; Hugging
    Face: tokenizer_config.json's do_lower_case; keras-hub: tokenizer.json's "lowercase"; else
    an "uncased" / "cased" directory name
    (google-research/bert's validate_case_matches_checkpoint); else the family's default
    (FamilySpec.lower_case: Hugging Face, SentencePiece, byte-level BPE, cased families); a
    WordPiece TF1 / Model Garden checkpoint without
    a hint is an error asking for the flag."""
    if flag is not None:
        return flag
    if source == "huggingface":
        config_path = os.path.join(huggingface_directory(input_path), "tokenizer_config.json")
        if os.path.exists(config_path):
            value = read_json_object(config_path).get("do_lower_case")
            if value is not None:
                return bool(value)
    if source == "keras_hub":
        config_path = os.path.join(input_path, "tokenizer.json")
        if os.path.exists(config_path):
            value = (read_json_object(config_path).get("config") or {}).get("lowercase")
            if value is not None:
                return bool(value)
    names = [p.lower() for p in os.path.abspath(input_path).split(os.sep)]
    if any(p.startswith("uncased") or "_uncased" in p or "-uncased" in p for p in names):
        return True
    if any(p.startswith("cased") or "_cased" in p or "-cased" in p for p in names):
        return False
    spec = models.spec(family)
    if kind == "bpe" or not spec.lower_case:
        return False
    if source in ("huggingface", "keras_hub") or kind == "sentencepiece":
        return spec.lower_case
    if kind is None:
        return None
    raise ValueError(f"cannot tell whether {input_path} is a cased or an uncased model (its "
                     f"directory is named neither uncased_... nor cased_...): pass --lower_case "
                     f"(an uncased model, e.g. uncased_L-12_H-768_A-12) or --no-lower_case (cased)")
