"""A single-layer BiLSTM sentence classifier, the student of Tang et al. (2019), "Distilling
Task-Specific Knowledge from BERT into Simple Neural Networks" (garden.tasks.task_distillation).

    token ids -> embeddings -> one bidirectional LSTM -> max-pool over the real positions
    -> dropout -> Dense + ReLU -> dropout -> Dense(num_classes) logits

Tang et al. embed words (300-d word2vec) and encode a sentence pair with a siamese BiLSTM; here
the student reads the same packed word pieces as its teacher (one sequence, the pair's [SEP]
inside it), so that both see one batch and the student exports with the classification
ServingModule like any classifier.
"""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.embeddings import truncated_normal


@keras.saving.register_keras_serializable(package="garden")
class BiLstmClassifier(keras.Model):
    """Tang et al.'s BiLSTM: embeddings, one BiLSTM, max-pooling, a ReLU layer, logits.

    Inputs (dict, int32 [B, T]): token_ids, padding_mask (1 = a real token).
    Outputs (dict): logits float32 [B, num_classes].

    Args:
        vocab_size: int, rows of the embedding table (the teacher's vocabulary).
        num_classes: int, labels.
        embedding_dim: int, width of the embeddings (Tang et al.: 300).
        lstm_units: int, units of each direction (Tang et al.: 150 for the single sentence).
        hidden_units: int, the ReLU layer before the logits (Tang et al.: 200-400).
        dropout: float, before the ReLU layer and before the logits.
        **kwargs: name, trainable.

    Example:
        clf = BiLstmClassifier(vocab_size=1000, num_classes=2)
        logits = clf({"token_ids": ids, "padding_mask": mask})["logits"]   # [B, 2]
    """

    def __init__(self, vocab_size: int, num_classes: int = 2, embedding_dim: int = 300,
                 lstm_units: int = 150, hidden_units: int = 400, dropout: float = 0.1,
                 **kwargs):
        # === Layers ===
        embedding = keras.layers.Embedding(vocab_size, embedding_dim,
                                           embeddings_initializer=truncated_normal(0.02),
                                           name="token_embedding")
        lstm = keras.layers.Bidirectional(
            keras.layers.LSTM(lstm_units, return_sequences=True), name="bilstm")
        hidden = keras.layers.Dense(hidden_units, activation="relu", name="hidden_dense")
        # float32: the logits feed a softmax cross-entropy (as SequenceClassifier's)
        logits_dense = keras.layers.Dense(num_classes, dtype="float32", name="classifier_dense")
        drop_pooled = keras.layers.Dropout(dropout, name="pooled_dropout")
        drop_hidden = keras.layers.Dropout(dropout, name="hidden_dropout")

        # === Functional graph ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in ("token_ids", "padding_mask")}
        real = ops.cast(inputs["padding_mask"], "bool")
        states = lstm(embedding(inputs["token_ids"]), mask=real)  # [B, T, 2 * lstm_units]
        # Max over the real positions only: padding would otherwise win with its zero output.
        pooled = ops.max(ops.where(real[:, :, None], states, ops.cast(-1e9, states.dtype)),
                         axis=1)
        logits = logits_dense(drop_hidden(hidden(drop_pooled(pooled))))
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)

        # === Config ===
        self.vocab_size, self.num_classes = int(vocab_size), int(num_classes)
        self.embedding_dim, self.lstm_units = int(embedding_dim), int(lstm_units)
        self.hidden_units, self.dropout = int(hidden_units), float(dropout)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable, "vocab_size": self.vocab_size,
                "num_classes": self.num_classes, "embedding_dim": self.embedding_dim,
                "lstm_units": self.lstm_units, "hidden_units": self.hidden_units,
                "dropout": self.dropout}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
