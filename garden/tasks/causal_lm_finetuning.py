"""CausalLMFinetuning, the decoder-only shape of the generation kind (GPT-2): prompt + completion
as one sequence, the loss on the completion only (garden.tasks.generation holds what the two
shapes share: data, tokenizer, loss, evaluation, export).

CausalLMFinetuning: the sequence is [<bos>] + x + separator + y + [EOS] (bos: BPE's
<|endoftext|>, none for SentencePiece; EOS: <|endoftext|> for BPE, </s> for SentencePiece;
the separator is `separator` tokenized as text, default " =>", and y is " " + target, GPT-3's
leading space), token_ids = sequence[:-1], labels = sequence[1:], and the loss covers only the
completion labels (y and EOS): never the prompt, never padding. Sources are cut to
max_prompt_length with the separator kept.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf

from garden.tasks.generation import GenerativeFinetuning, dense, fill


def left_pad(ids, mask):
    """Right-padded rows moved to the right end (left padding, what generation expects)."""
    length = tf.shape(ids)[1]
    shift = length - tf.reduce_sum(mask, axis=1)
    index = (tf.range(length)[None] - shift[:, None]) % length
    return tf.gather(ids, index, batch_dims=1), tf.gather(mask, index, batch_dims=1)


class CausalLMFinetuning(GenerativeFinetuning):
    """Decoder-only fine-tuning (GPT-2) on prompt + completion, the loss on the completion
    only (module docstring).

    Args:
        model: gin factory (default_vocab_size=...) -> a decoder-only GenerativeLM
            (garden.models.factory.generative_lm with a GPT-2 preset).
        vocab, train_file, eval_file, lower_case, tokenizer, generation, max_eval_examples,
            eval_batch_size, init_checkpoint, init_checkpoint_object, export_base, model_name,
            max_beams: as TextToText.
        max_prompt_length: prompt tokens (bos, source, separator).
        max_target_length: completion tokens including EOS.
        separator: text between source and target (tokenized on its own), default " =>".
    """

    name = "causal_lm_finetuning"
    encoder_decoder = False
    prompt_names = ("token_ids", "padding_mask")

    def __init__(self, model: Callable, vocab: str, train_file: str, eval_file: str,
                 max_prompt_length: int = 128, max_target_length: int = 64,
                 separator: str = " =>", **kwargs):
        super().__init__(model, vocab, train_file, eval_file, max_target_length, **kwargs)
        self.max_prompt_length = int(max_prompt_length)
        self.separator = separator

    _target_prefix = " "  # GPT-3: completions start with a space

    def _target_text(self, target: str) -> str:
        return self._target_prefix + target

    def _set_specials(self, eager) -> None:
        # GPT-2's BPE: <|endoftext|> starts and ends a text, and pads (OpenAI's vocabulary has
        # no <pad>; padded positions carry no loss and are masked); SentencePiece: </s>, <pad>.
        framed = self.prompt_framing(eager.vocab)
        self.eos_id, self.pad_id = framed.eos_id, framed.pad_id
        self.prefix = list(framed.prompt_prefix_ids)
        self.separator_ids = eager.tokenize([self.separator])[0] if self.separator else []
        self._frame_sources(self.max_prompt_length, self.prefix, self.separator_ids,
                            "max_prompt_length", f"{self.prefix} and the separator "
                            f"{self.separator!r} ({len(self.separator_ids)} tokens)")

    @property
    def train_decoder_length(self) -> int:
        return self.max_prompt_length + self.max_target_length - 1

    def _encode(self, source, target, for_generation):
        batch = source.nrows()
        prompt = self._framed_sources(source)  # prefix, source, separator
        if for_generation:  # the prompt, left-padded
            ids, mask = dense(prompt, self.max_prompt_length, self.pad_id)
            ids, mask = left_pad(ids, mask)
            return {"token_ids": ids, "padding_mask": mask}
        sequence = tf.concat([prompt, target[:, :self.max_target_length - 1],
                              fill(batch, [self.eos_id])], axis=1)
        length = self.train_decoder_length
        inputs, input_mask = dense(sequence[:, :-1], length, self.pad_id)
        labels, label_mask = dense(sequence[:, 1:], length, self.pad_id)
        # Label j is sequence[j + 1]: a completion token when j + 1 >= len(prompt).
        completion = tf.range(length)[None] >= tf.cast(prompt.row_lengths() - 1, tf.int32)[:, None]
        return {"token_ids": inputs, "padding_mask": input_mask, "labels": labels,
                "label_weights": tf.cast(label_mask * tf.cast(completion, tf.int32), tf.float32)}
