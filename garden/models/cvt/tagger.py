"""CVT's tagger: a primary prediction module on the whole encoder and four auxiliary modules
that each see a restricted view of the first BiLSTM layer (Clark et al. 2018, section 3.2):

    forward   f1(t)        the left context and the word
    backward  b1(t)        the right context and the word
    future    f1(t - 1)    the left context only (the word itself unseen)
    past      b1(t + 1)    the right context only

Each module is a ReLU layer then a linear layer to the tags. Outputs: logits (the primary's)
and aux_<view> logits [B, T, num_labels].
"""

from __future__ import annotations

import keras
from keras import ops

from garden.models.backbone import backbone_inputs, input_names

VIEWS = ("forward", "backward", "future", "past")


def shifted(x, by: int):
    """x [B, T, D] moved along time by `by` (1: position t holds x[t - 1]; -1: x[t + 1]),
    zeros where nothing moves in."""
    if by > 0:
        return ops.pad(x[:, :-by], [[0, 0], [by, 0], [0, 0]])
    return ops.pad(x[:, -by:], [[0, 0], [0, -by], [0, 0]])


def _module(hidden: int, num_labels: int, name: str) -> keras.Sequential:
    return keras.Sequential([keras.layers.Dense(hidden, activation="relu"),
                             keras.layers.Dense(num_labels, dtype="float32")], name=name)


class CvtTagger(keras.Model):
    """The primary and auxiliary modules on a CvtBackbone (module docstring).

    Example:
        tagger = CvtTagger(CvtBackbone.untrained("cvt_tiny", vocab_size=100), num_labels=9)
    """

    def __init__(self, backbone, num_labels: int, hidden: int = 1024, dropout: float = 0.5,
                 **kwargs):
        inputs = backbone_inputs(input_names(backbone))
        out = backbone(inputs)
        drop = keras.layers.Dropout(dropout, name="prediction_dropout")
        primary = _module(hidden, num_labels, "primary")
        views = {"forward": out["first_forward"], "backward": out["first_backward"],
                 "future": shifted(out["first_forward"], 1),
                 "past": shifted(out["first_backward"], -1)}
        modules = {view: _module(hidden, num_labels, f"aux_{view}") for view in VIEWS}
        outputs = {"logits": primary(drop(out["sequence_output"])),
                   **{f"aux_{v}": modules[v](drop(views[v])) for v in VIEWS}}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.backbone, self.num_labels = backbone, int(num_labels)
        self.primary = primary
        for view, module in modules.items():
            setattr(self, f"aux_{view}", module)  # attributes: checkpoints follow them
