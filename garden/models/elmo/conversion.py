"""AllenNLP's ELMo release into ElmoBackbone: the options JSON and the HDF5 weight file
(bilm-tf's variables dumped by name, e.g. elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5).

    char_embed                                 [261, E]: ours has a zero row 0 on top (ids + 1)
    CNN/W_cnn_{i}, CNN/b_cnn_{i}               [1, width, E, n], [n]
    CNN_high_{k}/W_carry, b_carry, W_transform, b_transform
    CNN_proj/W_proj, b_proj
    RNN_{d}/RNN/MultiRNNCell/Cell{l}/LSTMCell/W_0, B, W_P_0
                                               d = 0 forward, 1 backward; W_0 [in + P, 4U] is
                                               TF1 LSTMCell's [x, h] kernel with gates (i, j, f,
                                               o) and forget_bias 1 added at run time: reordered
                                               to (i, f, j, o), the 1 folded into B.

The softmax is not in the release (it ships the biLM for features only).

Example:
    backbone = load_allennlp("elmo_options.json", "elmo_weights.hdf5")
    # or: python -m garden.convert --source=allennlp --model=elmo --input=elmo_weights.hdf5 \
    #         --config=elmo_options.json --output=OUT
"""

from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

from garden.models.checkpoint_files import read_hdf5, read_json_object
from garden.models.elmo.backbone import ElmoBackbone


class ElmoWeightsError(ValueError):
    """An options or weight file that is not AllenNLP's ELMo layout (names the file and key)."""


def config_from_options(options: Dict, path: str = "<options>") -> Dict:
    """ElmoBackbone's config from the options JSON (lstm + char_cnn sections)."""
    try:
        lstm, cnn = options["lstm"], options["char_cnn"]
        if not lstm.get("use_skip_connections", False):
            raise ElmoWeightsError(f"{path}: lstm.use_skip_connections is false; ElmoBackbone "
                                   f"has the residual connection of the released models")
        return dict(num_characters=int(cnn["n_characters"]),
                    max_characters=int(cnn["max_characters_per_token"]),
                    char_embedding_size=int(cnn["embedding"]["dim"]),
                    filters=tuple((int(w), int(n)) for w, n in cnn["filters"]),
                    num_highway=int(cnn["n_highway"]), projection_size=int(lstm["projection_dim"]),
                    lstm_units=int(lstm["dim"]), num_layers=int(lstm["n_layers"]),
                    cell_clip=float(lstm["cell_clip"]), projection_clip=float(lstm["proj_clip"]),
                    activation=cnn.get("activation", "relu"), dropout=0.0)
    except KeyError as e:
        raise ElmoWeightsError(f"{path}: no {e.args[0]!r} in the options (not an ELMo options "
                               f"file?)") from None


def _gates(tf_gates: np.ndarray, units: int) -> np.ndarray:
    """Last axis (i, j, f, o) -> (i, f, j, o)."""
    i, j, f, o = (tf_gates[..., k * units:(k + 1) * units] for k in range(4))
    return np.concatenate([i, f, j, o], axis=-1)


def weights_from_release(arrays: Mapping[str, np.ndarray], config: Dict,
                         path: str = "<weights>") -> Dict[str, np.ndarray]:
    """{our variable path: array} of the release's arrays (HDF5 dataset name -> array)."""
    def get(key):
        if key not in arrays:
            raise ElmoWeightsError(f"{path}: no {key!r} (not AllenNLP's ELMo weight file?)")
        return np.asarray(arrays[key], np.float32)

    chars = get("char_embed")
    out = {"char_encoder/char_embedding/embeddings": np.concatenate(
        [np.zeros((1, chars.shape[1]), np.float32), chars])}
    for i in range(len(config["filters"])):
        out[f"char_encoder/conv_{i}/kernel"] = get(f"CNN/W_cnn_{i}")[0]
        out[f"char_encoder/conv_{i}/bias"] = get(f"CNN/b_cnn_{i}")
    for k in range(config["num_highway"]):
        for part in ("carry", "transform"):
            out[f"char_encoder/highway_{k}/{part}/kernel"] = get(f"CNN_high_{k}/W_{part}")
            out[f"char_encoder/highway_{k}/{part}/bias"] = get(f"CNN_high_{k}/b_{part}")
    out["char_encoder/projection/kernel"] = get("CNN_proj/W_proj")
    out["char_encoder/projection/bias"] = get("CNN_proj/b_proj")
    units, proj = config["lstm_units"], config["projection_size"]
    for d, direction in enumerate(("forward", "backward")):
        for layer in range(config["num_layers"]):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            kernel = _gates(get(f"{cell}/W_0"), units)
            bias = get(f"{cell}/B").copy()
            bias[2 * units:3 * units] += 1.0  # TF1's forget_bias, in the (i, j, f, o) order
            name = f"{direction}_lstm_{layer}"
            out[f"{name}/kernel"] = kernel[:-proj]
            out[f"{name}/recurrent_kernel"] = kernel[-proj:]
            out[f"{name}/bias"] = _gates(bias, units)
            out[f"{name}/projection_kernel"] = get(f"{cell}/W_P_0")
    return out


def weights_from_hdf5(path: str, config: Dict) -> Dict[str, np.ndarray]:
    """{our variable path: array} of the HDF5 file at `path` (ValueError naming it when it is
    not HDF5)."""
    return weights_from_release(read_hdf5(path), config, path)


def from_allennlp(options: Dict, arrays: Mapping[str, np.ndarray],
                  path: str = "<weights>", options_path: str = "<options>") -> Dict:
    """garden.convert's allennlp converter: {"backbone": ElmoBackbone} with the release's
    architecture (options JSON, read from options_path, which its errors name) and weights
    (HDF5 datasets by name, read from path)."""
    config = config_from_options(options, options_path)
    backbone = ElmoBackbone(**config)
    _assign(backbone, weights_from_release(arrays, config, path), path)
    return {"backbone": backbone, "pretrainer": None}


def _assign(backbone: ElmoBackbone, weights: Dict[str, np.ndarray], path: str) -> None:
    variables = {v.path: v for v in backbone.weights}
    # The scalar mix is the task's (the release has none): it stays the mean of the layers.
    missing = sorted(n for n in set(variables) - set(weights) if not n.startswith("scalar_mix/"))
    if missing:
        raise ElmoWeightsError(f"{path}: nothing for {missing[:5]}")
    for name, value in weights.items():
        variable = variables[name]
        if tuple(variable.shape) != value.shape:
            raise ElmoWeightsError(f"{path}: {name} has shape {value.shape}, the options make "
                                   f"it {tuple(variable.shape)}")
        variable.assign(value)


def load_allennlp(options_path: str, weights_path: str) -> ElmoBackbone:
    """An ElmoBackbone with the release's architecture and weights (dropout 0: features)."""
    config = config_from_options(read_json_object(options_path), options_path)
    backbone = ElmoBackbone(**config)
    _assign(backbone, weights_from_hdf5(weights_path, config), weights_path)
    return backbone
