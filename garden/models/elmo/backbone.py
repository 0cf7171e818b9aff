"""ELMo (Peters et al. 2018, "Deep contextualized word representations"): the bidirectional
language model whose layers, mixed per task, are the representations.

    char_ids [B, T, C] -> character embedding (char_embedding_size) -> one convolution per
    (width, filters) over each token's characters, max over positions, activation ->
    highway layers -> linear projection to projection_size: the context-free token vectors x
    -> forward LSTM stack over x, backward LSTM stack over x reversed within each sequence's
    length; each layer an LSTM of lstm_units cells projected to projection_size, cells and
    projections clipped, layer i > 0 adding its input to its output (residual)

Outputs: hidden_states [L + 1, B, T, 2 x projection_size] (layer 0 = [x; x], layer i =
[forward_i; backward_i], as AllenNLP's ELMo gives them; hidden_states[-1] is the top layer),
sequence_output = ELMo's representation, the task's ScalarMix of all L + 1 layers (gamma *
softmax(w) mix; the mean until a task trains it), pooled_output = its mean over the real
tokens, forward_output and backward_output (the top layers the two language models' shared
softmax reads; pretraining leaves the mix untouched).

Inputs: char_ids [B, T, max_characters] and padding_mask; with `vocab` (a vocabulary file of
the garden's tokenizers) token_ids [B, T] instead, each piece's characters looked up in a
table made from the vocabulary (as make_pretrain --objective=bilm --characters writes them),
so that the fine-tuning tasks' packers and raw-text exports work unchanged. Character ids
are AllenNLP's (bilm-tf's + 1; 0 = no character).

The published configuration (elmo_2x4096_512_2048cnn_2xhighway, preset "elmo") has 93.6M
parameters: 93,600,868 here, bilm-tf's 93,600,848 plus one zero character row (the + 1 ids)
and the scalar mix's 4.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import keras
import numpy as np
from keras import ops

from garden.layers.recurrent import ProjectedLSTM, ScalarMix
from garden.models.backbone import Backbone
from garden.models.instrument import Readout

# The published character CNN: (width, filters) pairs, 2048 filters in all.
ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


@keras.saving.register_keras_serializable(package="garden")
class Highway(keras.layers.Layer):
    """bilm-tf's highway layer: g = sigmoid(x W_carry + b_carry), t = relu(x W_transform +
    b_transform), y = g t + (1 - g) x; bilm-tf's initialisation (kernels N(0, 1/width),
    b_carry = -2: the layer starts close to the identity)."""

    def build(self, input_shape):
        width = input_shape[-1]
        kernel = keras.initializers.RandomNormal(stddev=float(np.sqrt(1.0 / width)))
        self.carry = keras.layers.Dense(width, activation="sigmoid", kernel_initializer=kernel,
                                        bias_initializer=keras.initializers.Constant(-2.0),
                                        name="carry")
        self.transform = keras.layers.Dense(width, activation="relu", kernel_initializer=kernel,
                                            name="transform")
        self.carry.build(input_shape)
        self.transform.build(input_shape)
        self.built = True

    def call(self, x):
        gate = self.carry(x)
        return gate * self.transform(x) + (1 - gate) * x


@keras.saving.register_keras_serializable(package="garden")
class CharacterEncoder(keras.layers.Layer):
    """char_ids [B, T, C] -> token vectors [B, T, projection_size] (module docstring).

    char_table: None, or [vocab size, C] character ids of every piece of a vocabulary
    (text.char_ids.char_table): the input is then token_ids [B, T], looked up
    in the table (a constant of the graph, not a weight)."""

    def __init__(self, num_characters: int, char_embedding_size: int,
                 filters: Sequence[Tuple[int, int]], num_highway: int, projection_size: int,
                 activation: str = "relu", char_table=None, **kwargs):
        super().__init__(**kwargs)
        self.char_table = None if char_table is None else np.asarray(char_table, np.int32)
        self.filters = [tuple(int(v) for v in f) for f in filters]
        self.activation = keras.activations.get(activation)
        # bilm-tf's initialisation: characters U(-1, 1); convolutions U(-0.05, 0.05) under relu,
        # N(0, 1 / (width x E)) under tanh; the projection N(0, 1 / filters).
        self.char_embedding = keras.layers.Embedding(
            num_characters, char_embedding_size,
            embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
            name="char_embedding")
        self.convolutions = [keras.layers.Conv1D(
            num, width, kernel_initializer=(
                keras.initializers.RandomUniform(-0.05, 0.05) if activation == "relu" else
                keras.initializers.RandomNormal(
                    stddev=float(np.sqrt(1.0 / (width * char_embedding_size))))),
            name=f"conv_{i}") for i, (width, num) in enumerate(self.filters)]
        self.highways = [Highway(name=f"highway_{i}") for i in range(num_highway)]
        # Also as attributes: TensorFlow checkpoints follow a layer's attributes, not the
        # layers in its Python lists (a list's convolutions would be saved through the
        # optimizer only, and a restored backbone would keep its random ones).
        for layer in self.convolutions + self.highways:
            setattr(self, layer.name, layer)
        total = sum(num for _, num in self.filters)
        self.projection = keras.layers.Dense(
            projection_size, kernel_initializer=keras.initializers.RandomNormal(
                stddev=float(np.sqrt(1.0 / total))), name="projection")

    def call(self, char_ids):
        if self.char_table is not None:  # token ids -> their pieces' characters
            char_ids = ops.take(ops.convert_to_tensor(self.char_table), char_ids, axis=0)
        shape = ops.shape(char_ids)
        chars = ops.reshape(char_ids, (-1, shape[-1]))            # [B*T, C]
        x = self.char_embedding(chars)                            # [B*T, C, E]
        x = ops.concatenate([self.activation(ops.max(conv(x), axis=1))
                             for conv in self.convolutions], axis=-1)
        for highway in self.highways:
            x = highway(x)
        x = self.projection(x)
        return ops.reshape(x, (shape[0], shape[1], x.shape[-1]))


@keras.saving.register_keras_serializable(package="garden")
class ElmoBackbone(Backbone):
    """ELMo's biLM (module docstring).

    Args:
        num_characters: character vocabulary with the 0 row (AllenNLP: 262).
        max_characters: characters per token (50).
        char_embedding_size: 16.
        filters: (width, filters) pairs (ELMO_FILTERS).
        num_highway: 2.
        projection_size: 512 (the token vectors and every LSTM's projected state).
        lstm_units: 4096 cells per LSTM.
        num_layers: 2 per direction.
        cell_clip, projection_clip: 3.
        activation: of the character CNN ("relu"; bilm-tf's smaller models: "tanh").
        dropout: on the token vectors and between layers in training (0.1).
        vocab: None (char_ids in), or a vocabulary file (token_ids in).

    Example:
        backbone = ElmoBackbone.untrained("elmo_tiny")
        out = backbone({"char_ids": ids, "padding_mask": mask})  # hidden_states [3, B, T, 2P]
    """

    presets_module = "garden.models.elmo.presets"
    readout = Readout(None, "0: the character CNN's token vectors [x; x]; 1..L: the biLSTM "
                      "layers [forward; backward]",
                      no_attention="ELMo has no attention: its layers are a character CNN and "
                                   "LSTMs, which read the sequence in order", blocks="")

    def __init__(self, num_characters: int = 262, max_characters: int = 50,
                 char_embedding_size: int = 16, filters=ELMO_FILTERS, num_highway: int = 2,
                 projection_size: int = 512, lstm_units: int = 4096, num_layers: int = 2,
                 cell_clip: float = 3.0, projection_clip: float = 3.0,
                 activation: str = "relu", dropout: float = 0.1,
                 vocab: Optional[str] = None, dtype=None, **kwargs):
        # === Layers ===
        encoder = CharacterEncoder(num_characters, char_embedding_size, filters, num_highway,
                                   projection_size, activation,
                                   char_table=vocab_char_table(vocab, max_characters) if vocab
                                   else None, dtype=dtype, name="char_encoder")
        mix = ScalarMix(num_layers + 1, dtype=dtype, name="scalar_mix")
        stacks = {direction: [ProjectedLSTM(
            lstm_units, projection_size=projection_size, cell_clip=cell_clip,
            projection_clip=projection_clip, go_backwards=direction == "backward",
            dtype=dtype, name=f"{direction}_lstm_{i}") for i in range(num_layers)]
            for direction in ("forward", "backward")}
        drop = keras.layers.Dropout(dropout, dtype=dtype, name="dropout")
        # === Functional graph ===
        ids = (keras.Input(shape=(None,), dtype="int32", name="token_ids") if vocab else
               keras.Input(shape=(None, max_characters), dtype="int32", name="char_ids"))
        inputs = {ids.name: ids, "padding_mask": keras.Input(shape=(None,), dtype="int32",
                                                             name="padding_mask")}
        mask = inputs["padding_mask"]
        real = ops.cast(mask, "float32")[:, :, None]
        tokens = encoder(ids) * real
        tops, layers = {}, {}
        for direction, stack in stacks.items():
            h, outputs = tokens, []
            for i, lstm in enumerate(stack):
                out = lstm(drop(h), padding_mask=mask)
                h = out + h if i > 0 else out  # residual between layers
                outputs.append(h)
            tops[direction], layers[direction] = h, outputs
        hidden = [ops.concatenate([tokens, tokens], axis=-1)] + [
            ops.concatenate([f, b], axis=-1)
            for f, b in zip(layers["forward"], layers["backward"])]
        mixed = mix(hidden)
        pooled = ops.sum(mixed * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
        outputs = {"sequence_output": mixed, "pooled_output": pooled,
                   "hidden_states": ops.stack(hidden, axis=0),
                   "forward_output": tops["forward"], "backward_output": tops["backward"]}
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        self.char_encoder, self.lstm_stacks, self.scalar_mix = encoder, stacks, mix

    def layer_groups(self):
        """Backbone.layer_groups: the character encoder (ELMo's token embeddings), each layer's
        forward and backward LSTM, the scalar mix on top."""
        return [[self.char_encoder],
                *[[f, b] for f, b in zip(self.lstm_stacks["forward"], self.lstm_stacks["backward"])],
                [self.scalar_mix]]

    @property
    def input_name(self) -> str:
        """token_ids (a vocabulary's pieces) or char_ids."""
        return "token_ids" if self.vocab else "char_ids"

    @property
    def token_embedding(self):
        raise AttributeError("ELMo reads characters: it has no word table to tie a softmax to")


def vocab_char_table(vocab: str, max_characters: int) -> np.ndarray:
    """[vocab size, max_characters] ELMo character ids of every piece of the vocabulary file
    (its kind from its name, as the tokenizers detect it)."""
    from text import tokenizers, vocab_files
    from text.char_ids import char_table

    loaded = tokenizers.load_tokenizer(vocab_files.detect_kind(vocab), vocab)
    return char_table(loaded.vocab, max_characters)
