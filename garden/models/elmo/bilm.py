"""ELMo's pretraining model: the biLM's forward and backward language models on one
ElmoBackbone, sharing its token representation and one softmax (Peters et al. 2018,
section 3.1: "we tie the parameters for both the token representation and Softmax layer in
the forward and the backward direction").

Outputs: forward_logits [B, T, V] (position t scores token t + 1) and backward_logits
[B, T, V] (position t scores token t - 1). The word vocabulary is the data's (make_pretrain
--objective=bilm --characters); the full softmax is computed (bilm-tf's sampled softmax over
793,471 words is not implemented here).
"""

from __future__ import annotations

import keras


class ElmoBiLM(keras.Model):
    """backbone -> dropout -> the shared softmax, on both directions' top layers.

    Example:
        lm = ElmoBiLM(ElmoBackbone.from_preset("elmo_tiny"), vocab_size=1000)
    """

    def __init__(self, backbone, vocab_size: int, dropout: float = 0.1, **kwargs):
        inputs = {"char_ids": keras.Input(shape=(None, backbone.max_characters), dtype="int32",
                                          name="char_ids"),
                  "padding_mask": keras.Input(shape=(None,), dtype="int32",
                                              name="padding_mask")}
        outputs = backbone(inputs)
        drop = keras.layers.Dropout(dropout, name="softmax_dropout")
        softmax = keras.layers.Dense(vocab_size, dtype="float32", name="softmax")
        super().__init__(inputs=inputs, outputs={
            "forward_logits": softmax(drop(outputs["forward_output"])),
            "backward_logits": softmax(drop(outputs["backward_output"]))}, **kwargs)
        self.backbone, self.vocab_size = backbone, vocab_size
