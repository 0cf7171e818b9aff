"""One stack of an encoder-decoder backbone (T5, BART) seen as a single-stack backbone, so that
garden.bertology reads it as it reads BERT or GPT-2.

Inputs (dict, int32 [B, T]): token_ids, padding_mask: a text as the family's packer packs it.
  "encoder": the encoder reads the text; the outputs are its sequence_output and, with the
      switches, its hidden_states [L+1, B, T, H] and self-attention attention_probs
      [L, B, A, T, T] (bidirectional).
  "decoder": the encoder reads the text and the decoder reads the same text as its input
      (teacher forcing without the decoder start token, so that the decoder's position t has
      read the text's tokens 0..t, aligned with the text as GPT-2's states are), attending to
      the encoder's states; the outputs are the decoder's (causal self-attention; the
      cross-attention's probabilities are not read). Through that cross-attention every
      decoder position reads the whole text, so its context is the whole sentence.
The view holds the whole encoder-decoder and no weight of its own: its weights are the
encoder-decoder's, in the same order (`view(backbone, stack)` copies them).

Example:
    encoder = view(BartBackbone.untrained("bart_tiny", vocab_size=1000), "encoder")
    states = instrumented(encoder, output_hidden_states=True)(inputs)["hidden_states"]
"""

from __future__ import annotations

from typing import Dict

import keras

from garden.models.backbone import Backbone, backbone_inputs
from garden.models.instrument import Readout, readout


@keras.saving.register_keras_serializable(package="garden")
class StackView(Backbone):
    """One stack of an encoder-decoder (module docstring).

    Args:
        seq2seq: {"class": the encoder-decoder's registered Keras name (e.g.
            "garden>BartBackbone"), "config": its get_config()}.
        stack: "encoder" or "decoder" (its Readout's stacks).
        output_hidden_states, output_attentions: bool, the stack's hidden_states and
            attention_probs (the encoder-decoder's switches).
    """

    def __init__(self, seq2seq: Dict, stack: str, output_hidden_states: bool = False,
                 output_attentions: bool = False, **kwargs):
        # === Layers ===
        cls = keras.saving.get_registered_object(seq2seq["class"])
        stacks = cls.readout.stacks
        if stack not in stacks:
            raise ValueError(f"stack={stack!r}: the {cls.family()} backbone has the stacks "
                             f"{list(stacks)}")
        inner = cls.from_config({**seq2seq["config"],
                                 "output_hidden_states": output_hidden_states,
                                 "output_attentions": output_attentions})

        # === Functional graph ===
        inputs = backbone_inputs(("token_ids", "padding_mask"))
        text = {"token_ids": inputs["token_ids"], "padding_mask": inputs["padding_mask"]}
        out = inner({f"{side}_{name}": tensor for side in ("encoder", "decoder")
                     for name, tensor in text.items()})
        outputs = {"sequence_output": out[f"{stack}_sequence_output"]}
        for name, on in (("hidden_states", output_hidden_states),
                         ("attention_probs", output_attentions)):
            if on:
                outputs[name] = out[f"{stack}_{name}"]
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config === (recorded by Backbone from the arguments above)
        self.seq2seq_backbone = inner
        config = seq2seq["config"]
        self.num_layers = int(config["num_layers"] if stack == "encoder" else
                              config.get("num_decoder_layers") or config["num_layers"])
        # The encoder's blocks when they are garden's (BART's; T5's are its own), read by the
        # analyses that run blocks one by one; the decoder's need the encoder's states.
        self._blocks = cls.readout.blocks if stack == "encoder" else ""
        no_blocks = (f"a decoder's blocks need its encoder's states besides hidden_states[0] "
                     f"(their cross-attention reads them)" if stack == "decoder" else
                     f"the {cls.family()} encoder's blocks are its own (one relative position "
                     f"bias per stack, from its first block), not garden's Transformer blocks "
                     f"that run from hidden_states[0] alone")
        self._readout = Readout(
            "bidirectional" if stack == "encoder" else "causal",
            f"0: the {cls.family()} {stack}'s embeddings; 1..L: its layers' outputs",
            blocks="encoder_blocks" if self._blocks else "",
            no_blocks="" if self._blocks else no_blocks, cross_attends=stack == "decoder")

    @property
    def readout(self) -> Readout:
        """The stack's: the encoder bidirectional, the decoder causal (module docstring)."""
        return self._readout

    @property
    def encoder_blocks(self):
        """The encoder's garden blocks (BART's), for Readout.blocks."""
        return list(getattr(self.seq2seq_backbone, self._blocks))

    def value_transforms(self):
        """The stack's self-attention value transforms (garden.models.instrument), from the
        encoder-decoder's `value_transforms(stack)`."""
        return self.seq2seq_backbone.value_transforms(self.stack)

    @property
    def token_embedding(self):
        return self.seq2seq_backbone.token_embedding


def view(backbone: keras.Model, stack: str, output_hidden_states: bool = False,
         output_attentions: bool = False) -> StackView:
    """`stack` of the encoder-decoder `backbone` as a StackView with its weights (and the
    switches given on)."""
    stacks = readout(backbone).stacks
    if stack not in stacks:
        raise ValueError(f"--stack={stack}: the {backbone.family()} backbone has "
                         f"{'the stacks ' + ', '.join(stacks) if stacks else 'one stack'}")
    config = backbone.get_config()
    config = {k: v for k, v in config.items() if k not in ("output_hidden_states",
                                                          "output_attentions")}
    seq2seq = {"class": keras.saving.get_registered_name(type(backbone)), "config": config}
    result = StackView(seq2seq, stack, output_hidden_states, output_attentions)
    result.set_weights(backbone.get_weights())
    return result
