"""The garden.generate model directory: a GenerativeLM with its vocabulary and the ids
decoding needs, as one directory that garden.convert writes (OUT/generate/) and garden.runs
opens (`runs.open(DIR).generation()`, how garden.generate and garden.fewshot read it).

    DIR/lm.keras         the GenerativeLM, saved with model.save (Keras format)
    DIR/generation.json  {"format": "garden.generate/1",
                          "model_module": module to import first (registers the class),
                          "model_class": the class name,
                          "tokenizer": "bpe" | "sentencepiece" | "wordpiece",
                          "vocab": the vocabulary file, relative to DIR (vocab.json with
                                   merges.txt beside it, a SentencePiece .model, vocab.txt),
                          "lower_case": bool,
                          "eos_id", "pad_id": ints,
                          "prompt_prefix_ids": ids before a decoder-only prompt (e.g. BOS),
                          "encoder_suffix_ids": ids after an encoder prompt (T5 / BART: EOS),
                          "encoder_prefix_ids": ids before it (BART: <s>),
                          "decoder_start_ids": an encoder-decoder's decoder start
                                               (T5 [0], BART [2, 0])}
    the vocabulary file(s), copied in by save_model_dir.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

FORMAT = "garden.generate/1"
MODEL_FILE, CONFIG_FILE = "lm.keras", "generation.json"


@dataclasses.dataclass
class GenerationModel:
    """A loaded model directory: the model, its tokenizer and the ids decoding needs."""

    model: object
    tokenizer: object  # text.tokenizers.TextTokenizer
    eos_id: int
    pad_id: int
    prompt_prefix_ids: List[int]
    encoder_prefix_ids: List[int]
    encoder_suffix_ids: List[int]
    decoder_start_ids: List[int]
    # ids after a decoder-only prompt: a fine-tuned causal run's separator (garden.runs; a
    # model directory records none)
    prompt_suffix_ids: List[int] = dataclasses.field(default_factory=list)

    def encode(self, texts: Sequence[str], width: Optional[int] = None) -> Dict[str, np.ndarray]:
        """The GenerativeLM prompt dict for `texts`, left-padded to `width` (default: the
        longest)."""
        ids = self.tokenizer.tokenize(list(texts))
        if self.model.is_encoder_decoder:
            encoder = [self.encoder_prefix_ids + list(r) + self.encoder_suffix_ids for r in ids]
            enc_ids, enc_mask = left_pad(encoder, width)
            dec_ids, dec_mask = left_pad([self.decoder_start_ids] * len(texts))
            return {"encoder_token_ids": enc_ids, "encoder_padding_mask": enc_mask,
                    "decoder_token_ids": dec_ids, "decoder_padding_mask": dec_mask}
        rows = [self.prompt_prefix_ids + list(r) + self.prompt_suffix_ids for r in ids]
        empty = [texts[i] for i, r in enumerate(rows) if not r]
        if empty:
            raise ValueError(f"prompt {empty[0]!r} has no tokens: a decoder-only model needs at "
                             f"least one (give text, or set prompt_prefix_ids in {CONFIG_FILE})")
        token_ids, mask = left_pad(rows, width)
        return {"token_ids": token_ids, "padding_mask": mask}

    def prompt_length(self, texts: Sequence[str]) -> int:
        """The width encode() pads to for these texts."""
        prompt = self.encode(texts)
        return next(iter(prompt.values())).shape[1]


def left_pad(rows: Sequence[Sequence[int]], width: Optional[int] = None, pad: int = 0):
    """int32 ids and mask [len(rows), width], each row right-aligned (left padding)."""
    width = max([width or 0] + [len(r) for r in rows])
    ids = np.full((len(rows), width), pad, np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = row
            mask[i, width - len(row):] = 1
    return ids, mask


def save_model_dir(model_dir: str, model, *, tokenizer_kind: str, vocab: str, eos_id: int,
                   pad_id: int, lower_case: bool = False, prompt_prefix_ids: Sequence[int] = (),
                   encoder_prefix_ids: Sequence[int] = (), encoder_suffix_ids: Sequence[int] = (),
                   decoder_start_ids: Sequence[int] = ()) -> str:
    """Write `model` and its vocabulary as a model directory (module docstring). The directory
    appears whole or not at all (written beside it, then renamed into place); an existing one
    is refused."""
    from text.vocab_files import bpe_files
    from text.tokenizers import load_tokenizer

    if os.path.exists(model_dir):
        raise FileExistsError(f"{model_dir} exists: give a new directory for the model")
    if model.is_encoder_decoder and not decoder_start_ids:
        raise ValueError("an encoder-decoder model needs decoder_start_ids (T5 [0], BART [2, 0])")
    load_tokenizer(tokenizer_kind, vocab, lower_case=lower_case)  # refuse a bad vocabulary now
    files = list(bpe_files(vocab)) if tokenizer_kind == "bpe" else [vocab]
    parent = os.path.dirname(os.path.abspath(model_dir))
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".generate-", dir=parent)
    try:
        for path in files:
            shutil.copyfile(path, os.path.join(work, os.path.basename(path)))
        model.save(os.path.join(work, MODEL_FILE))
        config = {"format": FORMAT, "model_module": type(model).__module__,
                  "model_class": type(model).__name__, "tokenizer": tokenizer_kind,
                  "vocab": os.path.basename(files[0]), "lower_case": bool(lower_case),
                  "eos_id": int(eos_id), "pad_id": int(pad_id),
                  "prompt_prefix_ids": [int(i) for i in prompt_prefix_ids],
                  "encoder_prefix_ids": [int(i) for i in encoder_prefix_ids],
                  "encoder_suffix_ids": [int(i) for i in encoder_suffix_ids],
                  "decoder_start_ids": [int(i) for i in decoder_start_ids]}
        with open(os.path.join(work, CONFIG_FILE), "w") as f:
            json.dump(config, f, indent=2)
        os.rename(work, model_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return model_dir
