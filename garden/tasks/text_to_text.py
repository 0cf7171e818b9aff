"""TextToText, the encoder-decoder shape of the generation kind (T5, BART): a source through the
encoder, its target teacher-forced through the decoder (garden.tasks.generation holds what the
two shapes share: data, tokenizer, loss, evaluation, export).

TextToText, for an example with source ids x and target ids y (S = max_source_length,
T = max_target_length target tokens including EOS):
    encoder_token_ids   x[:S - |prefix| - |suffix|] between the source prefix / suffix
                        (SentencePiece: T5's x </s>; BPE: BART's <s> x </s>), right-padded
    decoder_token_ids   start + y[:T - 1]; `decoder_start_ids` (T5 [0], BART [2, 0]: </s> <s>;
                        default by vocabulary: SentencePiece [<pad>], BPE [</s>, <s>])
    labels              (start + y[:T - 1] + [EOS])[1:]: logits[:, t] scores label t
    label_weights       1 on the labels that are target tokens or the EOS, 0 on start tokens
                        (BART's <s> after </s>) and padding
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import tensorflow as tf

from garden.tasks.generation import GenerativeFinetuning, dense, fill


class TextToText(GenerativeFinetuning):
    """Encoder-decoder fine-tuning (T5, BART) on source -> target pairs (module docstring).

    Args:
        model: gin factory (default_vocab_size=...) -> an encoder-decoder GenerativeLM
            (garden.models.factory.generative_lm with a T5 or BART preset).
        vocab: SentencePiece .model or BPE vocab.json the model's ids come from.
        train_file, eval_file: .jsonl / .tsv / .csv with source and target.
        max_source_length: encoder length including the prefix / suffix specials.
        max_target_length: target tokens including EOS (also the default max_new_tokens).
        decoder_start_ids: the decoder's start tokens (T5 [0], BART [2, 0]); default by
            vocabulary: SentencePiece [<pad>], BPE [</s>, <s>].
        lower_case: lower-case text before tokenizing (must match the vocabulary).
        tokenizer: "sentencepiece" | "bpe"; default from the vocabulary's name.
        generation: GenerationConfig overrides for evaluation (greedy by default).
        max_eval_examples: score only the first N eval pairs (None: all).
        eval_batch_size: batch of the evaluation and generation.
        init_checkpoint, init_checkpoint_object: restore the backbone from a pretraining run.
        export_base, model_name: where the trainer exports the generation SavedModel
            (<export_base>/<model_name>/<version>; None: no export; model_name default: the
            task's name).
        max_beams: the widest beam the export's `generate` signature decodes (one compiled
            loop per width 2..max_beams; 1: greedy and sampling only).
    """

    name = "text_to_text"
    encoder_decoder = True
    prompt_names = ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
                    "decoder_padding_mask")

    def __init__(self, model: Callable, vocab: str, train_file: str, eval_file: str,
                 max_source_length: int = 128, max_target_length: int = 64,
                 decoder_start_ids: Optional[Sequence[int]] = None, **kwargs):
        super().__init__(model, vocab, train_file, eval_file, max_target_length, **kwargs)
        self.max_source_length = int(max_source_length)
        self.decoder_start_ids = list(decoder_start_ids) if decoder_start_ids else None

    def _set_specials(self, eager) -> None:
        vocab = eager.vocab
        # SentencePiece: T5's x </s>, decoder from <pad>; BPE: BART's <s> x </s>, from </s> <s>.
        framed = self.prompt_framing(vocab)
        self.pad_id, self.eos_id = framed.pad_id, framed.eos_id
        self.source_prefix = list(framed.encoder_prefix_ids)
        self.source_suffix = list(framed.encoder_suffix_ids)
        self.start_ids = self.decoder_start_ids or list(framed.decoder_start_ids)
        bad = [i for i in self.start_ids if not 0 <= i < vocab.size]
        if bad:
            raise ValueError(f"{self.name}.decoder_start_ids {self.start_ids}: ids {bad} are not "
                             f"in {self.vocab} ({vocab.size} ids)")
        self._frame_sources(self.max_source_length, self.source_prefix, self.source_suffix,
                            "max_source_length", f"{self.source_prefix} and {self.source_suffix}")

    @property
    def decoder_length(self) -> int:
        return len(self.start_ids) + self.max_target_length - 1

    train_decoder_length = decoder_length

    def serving_layout(self) -> dict:
        """make_generation_serving's prompt layout: the source's frame, then the decoder's
        start ids."""
        return {**super().serving_layout(), "decoder_start_ids": self.start_ids}

    def _encode(self, source, target, for_generation):
        batch = source.nrows()
        source = self._framed_sources(source)
        encoder_ids, encoder_mask = dense(source, self.max_source_length, self.pad_id)
        out = {"encoder_token_ids": encoder_ids, "encoder_padding_mask": encoder_mask}
        if for_generation:  # the prompt: the encoder inputs and the start tokens
            start = tf.tile(tf.constant([self.start_ids], tf.int32), [batch, 1])
            return dict(out, decoder_token_ids=start, decoder_padding_mask=tf.ones_like(start))
        sequence = tf.concat([fill(batch, self.start_ids),
                              target[:, :self.max_target_length - 1],
                              fill(batch, [self.eos_id])], axis=1)
        length = self.decoder_length
        out["decoder_token_ids"], out["decoder_padding_mask"] = dense(sequence[:, :-1], length,
                                                                       self.pad_id)
        labels, label_mask = dense(sequence[:, 1:], length, self.pad_id)
        # Labels before position len(start) - 1 are start tokens (BART's <s>), not targets.
        is_target = tf.cast(tf.range(length) >= len(self.start_ids) - 1, tf.int32)[None]
        out.update(labels=labels, label_weights=tf.cast(label_mask * is_target, tf.float32))
        return out
