"""ULMFiT's language model: the AWD-LSTM with a softmax tied to its embedding table
(Merity et al. 2018, section 4.5; Inan et al. 2017), output dropout before it (fastai's
output_p, 0.1). Stages 1 and 2 of ULMFiT train it (garden.Pretraining family 'ulmfit' on
make_pretrain --objective=bilm blocks: the forward LM); stage 3 fine-tunes its backbone as a
classifier (configs/finetune/classification_ulmfit_tiny.gin).
"""

from __future__ import annotations

import keras
from keras import ops

from garden.layers.recurrent import VariationalDropout
from garden.models.backbone import backbone_inputs


@keras.saving.register_keras_serializable(package="garden")
class TiedSoftmax(keras.layers.Layer):
    """logits = h E^T + b over an Embedding layer's table E (shared, not copied)."""

    def __init__(self, embedding: keras.layers.Embedding, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(self.embedding.input_dim,),
                                    initializer="zeros")
        self.built = True

    def call(self, hidden):
        table = ops.cast(self.embedding.embeddings, hidden.dtype)
        return ops.cast(ops.matmul(hidden, ops.transpose(table)) + self.bias, "float32")


class AwdLstmLM(keras.Model):
    """The AWD-LSTM LM: backbone -> variational dropout (output_dropout) -> tied softmax.

    Inputs: the backbone's (token_ids, padding_mask). Outputs: {"logits": float32 [B, T, V]},
    position t scoring token t + 1.

    Example:
        lm = AwdLstmLM(AwdLstmBackbone.untrained("ulmfit_tiny", vocab_size=1000))
    """

    def __init__(self, backbone, output_dropout: float = 0.1, **kwargs):
        inputs = backbone_inputs(("token_ids", "padding_mask"))
        hidden = backbone(inputs)["sequence_output"]
        hidden = VariationalDropout(output_dropout, name="output_dropout")(hidden)
        logits = TiedSoftmax(backbone.token_embedding, name="tied_softmax")(hidden)
        super().__init__(inputs=inputs, outputs={"logits": logits}, **kwargs)
        self.backbone, self.output_dropout = backbone, output_dropout
