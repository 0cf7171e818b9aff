"""ELMo's pretraining model: the biLM's forward and backward language models on one
ElmoBackbone, sharing its token representation and one softmax (Peters et al. 2018,
section 3.1: "we tie the parameters for both the token representation and Softmax layer in
the forward and the backward direction").

Outputs: forward_logits [B, T, V] (position t scores token t + 1), backward_logits [B, T, V]
(position t scores token t - 1), and forward_hidden / backward_hidden [B, T, D], the states
the softmax reads (after dropout), for a sampled softmax. The word vocabulary is the data's
(make_pretrain --objective=bilm --characters). bilm-tf trains its 793,471-word softmax with a
sampled softmax (8,192 samples); garden.Pretraining's elmo record does the same with
`sampled_softmax = N` (tf.nn.sampled_softmax_loss on this layer's kernel and bias; the full
softmax for evaluation and accuracy).
"""

from __future__ import annotations

import keras


class ElmoBiLM(keras.Model):
    """backbone -> dropout -> the shared softmax, on both directions' top layers.

    Example:
        lm = ElmoBiLM(ElmoBackbone.untrained("elmo_tiny"), vocab_size=1000)
    """

    def __init__(self, backbone, vocab_size: int, dropout: float = 0.1, **kwargs):
        inputs = {"char_ids": keras.Input(shape=(None, backbone.max_characters), dtype="int32",
                                          name="char_ids"),
                  "padding_mask": keras.Input(shape=(None,), dtype="int32",
                                              name="padding_mask")}
        outputs = backbone(inputs)
        drop = keras.layers.Dropout(dropout, name="softmax_dropout")
        softmax = keras.layers.Dense(vocab_size, dtype="float32", name="softmax")
        forward, backward = drop(outputs["forward_output"]), drop(outputs["backward_output"])
        super().__init__(inputs=inputs, outputs={
            "forward_logits": softmax(forward), "backward_logits": softmax(backward),
            "forward_hidden": forward, "backward_hidden": backward}, **kwargs)
        self.backbone, self.vocab_size, self.softmax = backbone, vocab_size, softmax
