"""CoVe (McCann et al. 2017, "Learned in Translation: Contextualized Word Vectors"): the encoder
of an attentional translation model, whose states are word vectors in context.

    token_ids -> word embeddings (embedding_size, 300: GloVe's; initialised from a local GloVe
                 text file when `glove` is given, and then optionally kept fixed)
              -> the MT-LSTM: num_layers (2) bidirectional LSTM layers of lstm_units (300) per
                 direction; each layer a forward ProjectedLSTM and a backward one
                 (go_backwards: each sequence read from its last real token), concatenated,
                 layer i + 1 reading layer i's output
Outputs: sequence_output [B, T, E + 2U] = [GloVe(x); CoVe(x)] (900 wide: the paper's downstream
features, section 4), pooled_output [B, E + 2U] its mean over the real tokens, cove_output
[B, T, 2U] (the top layer: what the decoder attends over) and, when E = U (both presets),
hidden_states [L + 1, B, T, 2U]: [x; x] (as ELMo gives its layer 0), then each biLSTM layer, for
a task's ScalarMix.

The published encoder (preset "cove": 2 x 2 LSTMs of 300 over 300-d inputs) has 3,604,800
LSTM parameters (the paper's PyTorch LSTMs count a second bias per gate: 4,800 more).
Text goes through the garden's tokenizers (CoVe's own is GloVe's word list, Moses-tokenised):
the GloVe file is looked up piece by piece (a WordPiece continuation "##ing" as "ing" is not
done: only whole pieces that the file spells the same way are found).
"""

from __future__ import annotations

from typing import Optional

import keras
import numpy as np
from keras import ops

from garden.layers.recurrent import ProjectedLSTM
from garden.models.backbone import Backbone, backbone_inputs
from garden.models.instrument import Readout


def read_glove(path: str, pieces, width: int, table: np.ndarray, lower_case: bool = False):
    """Copies the GloVe vectors of `pieces` found in the text file `path` ("word v1 ... vD" a
    line; a first line "count width" of word2vec's text format is skipped) into the rows of
    `table` [len(pieces), width]. Returns the number of rows found. A vector of another width
    raises ValueError naming the file and line. Nothing is downloaded."""
    import tensorflow as tf

    rows = {}
    for i, piece in enumerate(pieces):
        rows.setdefault(piece.lower() if lower_case else piece, []).append(i)
    found = 0
    with tf.io.gfile.GFile(path, "r") as f:
        for number, line in enumerate(f, 1):
            parts = line.rstrip("\n").rstrip().split(" ")
            if number == 1 and len(parts) == 2:
                continue  # word2vec's header
            word = parts[0].lower() if lower_case else parts[0]
            if word not in rows:
                continue
            if len(parts) - 1 != width:
                raise ValueError(f"{path} line {number}: a vector of {len(parts) - 1} values, "
                                 f"the embeddings are {width} wide")
            vector = np.asarray(parts[1:], np.float32)
            for i in rows.pop(word):
                table[i] = vector
                found += 1
    return found


@keras.saving.register_keras_serializable(package="garden")
class CoveBackbone(Backbone):
    """CoVe's embeddings and MT-LSTM encoder (module docstring).

    Args:
        vocab_size: int (the garden vocabulary's pieces).
        embedding_size: 300 (GloVe 300d).
        lstm_units: cells per direction (300).
        num_layers: biLSTM layers (2).
        dropout: on the embeddings and between layers in training (0.2, as the paper's MT).
        glove: None, or a local GloVe-format text file initialising the rows of the pieces
            it holds (needs `vocab`); the others stay random. The count is printed and kept
            as `glove_found`.
        vocab: the vocabulary file whose pieces are the rows (for `glove`).
        freeze_embeddings: keep the word table fixed in training (CoVe keeps GloVe fixed).
        dtype: None, str or keras.DTypePolicy.

    Example:
        backbone = CoveBackbone.untrained("cove_tiny", vocab_size=1000)
        out = backbone({"token_ids": ids, "padding_mask": mask})   # sequence_output [B, T, 48]
    """

    presets_module = "garden.models.cove.presets"
    readout = Readout(None, "0: the GloVe word vectors [x; x]; 1..L: the biLSTM layers "
                      "[forward; backward]",
                      no_attention="CoVe has no attention: its layers are LSTMs, which read "
                                   "the sequence in order", blocks="")

    def __init__(self, vocab_size: int, embedding_size: int = 300, lstm_units: int = 300,
                 num_layers: int = 2, dropout: float = 0.2, glove: Optional[str] = None,
                 vocab: Optional[str] = None, freeze_embeddings: bool = False, dtype=None,
                 **kwargs):
        # === Layers ===
        embeddings = keras.layers.Embedding(
            vocab_size, embedding_size, dtype=dtype, name="embeddings",
            embeddings_initializer=keras.initializers.RandomUniform(-0.1, 0.1),
            trainable=not freeze_embeddings)
        lstms = [[ProjectedLSTM(lstm_units, go_backwards=direction == "backward", dtype=dtype,
                                name=f"{direction}_lstm_{i}")
                  for direction in ("forward", "backward")] for i in range(num_layers)]
        drop = keras.layers.Dropout(dropout, dtype=dtype, name="dropout")
        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"))
        mask = inputs["padding_mask"]
        real = ops.cast(mask, "float32")[:, :, None]
        words = embeddings(inputs["token_ids"])
        h, layers = words, []
        for forward, backward in lstms:
            x = drop(h)
            h = ops.concatenate([forward(x, padding_mask=mask), backward(x, padding_mask=mask)],
                                axis=-1)
            layers.append(h)
        features = ops.concatenate([words * ops.cast(real, words.dtype), h], axis=-1)
        pooled = ops.sum(features * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
        outputs = {"sequence_output": features, "pooled_output": pooled, "cove_output": h}
        if embedding_size == lstm_units:
            bottom = ops.concatenate([words, words], axis=-1) * ops.cast(real, words.dtype)
            outputs["hidden_states"] = ops.stack([bottom] + layers, axis=0)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.embeddings = embeddings
        # Each LSTM an attribute as well as in the list (checkpoints follow attributes).
        for layer in [lstm for pair in lstms for lstm in pair]:
            setattr(self, layer.name, layer)
        self.lstm_layers = lstms
        self.glove_found = self._initialise_from_glove() if glove else None

    def _initialise_from_glove(self) -> int:
        """Rows of the vocabulary's pieces found in the GloVe file; printed as a count."""
        if not self.vocab:
            raise ValueError("CoveBackbone(glove=...) needs vocab=, the vocabulary file whose "
                             "pieces are the embedding rows")
        from text import tokenizers, vocab_files

        kind = vocab_files.detect_kind(self.vocab)
        pieces = tokenizers.load_tokenizer(kind, self.vocab).vocab.tokens
        if len(pieces) != self.vocab_size:
            raise ValueError(f"{self.vocab} has {len(pieces)} pieces, the backbone "
                             f"{self.vocab_size} rows")
        table = np.array(self.embeddings.embeddings.numpy())
        found = read_glove(self.glove, pieces, self.embedding_size, table)
        self.embeddings.embeddings.assign(table)
        print(f"[cove] {found} of {len(pieces)} embedding rows from {self.glove} (the others "
              "random)", flush=True)
        return found

    @property
    def token_embedding(self) -> keras.layers.Embedding:
        return self.embeddings

    def layer_groups(self):
        """Backbone.layer_groups: the word table (not trainable with freeze_embeddings), each
        layer's two directions."""
        return [[self.embeddings], *[list(pair) for pair in self.lstm_layers]]
