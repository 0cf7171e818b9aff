"""ServingModule of the generative kind: prompt strings in, generated strings out, with the
tokenizer, left padding, garden.models.decoding's decode loop and the detokenizer inside the graph.

    module = make_generation_serving(lm, "bpe/vocab.json", "bpe", eos_id=2, pad_id=1,
                                     max_prompt_length=64, max_new_tokens=64)
    garden.serving.export.export(module, "/tmp/exports", "writer")
    curl -d '{"instances": [{"prompt": "once upon a time"}]}' \\
        http://localhost:8501/v1/models/writer:predict

Signatures (every text input string [batch]; a tensor of another rank answers
InvalidArgumentError naming it):
    serving_default  prompt -> text string [B], num_tokens int32 [B], score float32 [B]
                     decoded with the export's default settings (`defaults`, a
                     garden.models.decoding.GenerationConfig).
    generate         prompt plus one value per row of each decoding setting:
                         max_new_tokens int32 (1 .. the export's cap), method string
                         ("greedy" | "sample" | "beam"), num_beams int32 (1 .. max_beams),
                         temperature float32 (> 0), top_k int32 (>= 0, 0 = off),
                         top_p float32 (0, 1], seed int32
                     -> the same outputs.
    serving_ids      token_ids, padding_mask int32 [B, P] (left-padded, P = the export's
                     max_prompt_length; encoder-decoder: the encoder's ids, right-padded)
                     -> token_ids int32 [B, N] (the new tokens, pad_id after EOS),
                     num_tokens [B], score [B]; the default settings.

Optional settings. TF Serving's Predict API has no optional inputs: a request must feed every
input of its signature (the model server answers "input size does not match signature"
otherwise, and garden.serve does the same). So the optional settings are two signatures: a
client that wants the export's defaults sends the prompt alone to serving_default; one that
sets anything calls `generate` with every setting (the defaults are listed in
assets.extra/garden_export.json under "defaults"). `generate` takes the settings as [B]
vectors, one value per row, so that both the row format ({"instances": [{"prompt": ...,
"method": "beam", ...}]}) and the columnar format work; one request is decoded with one set
of settings, so every row must carry the same values (InvalidArgumentError otherwise: send
different settings in separate requests). method and num_beams choose among decode loops
compiled into the export (tf.switch_case over greedy, sample and beam widths 2..max_beams;
method "beam" with num_beams 1 runs the greedy loop, which with length_penalty 0 picks the
same tokens, and saves a loop per export);
the other settings are tensors of the loop (garden.models.decoding.Generator.decode_fn), so no
setting recompiles anything. length_penalty, its kind, min_new_tokens and
no_repeat_ngram_size are fixed at export (from `defaults`).

Prompt encoding (what garden.models.decoding's tests and a Python caller do, see `encode_prompts`):
    decoder-only     prompt_prefix_ids + the text's pieces + prompt_suffix_ids (e.g. the
                     causal LM task's separator), cut to the LAST max_prompt_length ids (the
                     context nearest the continuation), left-padded with pad_id to
                     max_prompt_length.
    encoder-decoder  the text's pieces cut to the FIRST max_prompt_length - len(prefix) -
                     len(suffix), between prompt_prefix_ids and prompt_suffix_ids (T5: suffix
                     [</s>]; BART: prefix [<s>], suffix [</s>]), right-padded; the decoder
                     prompt is decoder_start_ids (T5 [0], BART [2, 0]).
    A decoder-only row with no token at all (an empty prompt and no prefix) answers
    InvalidArgumentError.

Detokenization (core TensorFlow ops, so the export needs no tensorflow-text op beyond the
tokenizer's): the new tokens up to num_tokens, special ids (pad, EOS, control symbols) left
out, each id's piece joined; SentencePiece: U+2581 -> space and the first leading space
dropped, <unk> as " \u2047 " (sentencepiece's DecodeIds); byte-level BPE: each character back
to its byte (GPT-2's bytes_to_unicode inverse), invalid UTF-8 replaced by U+FFFD (Hugging
Face's errors="replace"). WordPiece vocabularies do not generate (no model family pairs them).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from text import bpe, tokenizers, vocab_files
from garden.models.decoding import METHODS, GenerationConfig, Generator
from garden.serving.base import PREDICT, ServingModule, strings
from garden.serving.text import checked_text

# The settings `generate` takes, with their dtypes (method is a string).
SETTINGS = {"max_new_tokens": tf.int32, "method": tf.string, "num_beams": tf.int32,
            "temperature": tf.float32, "top_k": tf.int32, "top_p": tf.float32,
            "seed": tf.int32}
SP_UNK_SURFACE = " \u2047 "


def _pieces_table(tokenizer) -> Tuple[np.ndarray, np.ndarray]:
    """(surface string of every id as bytes, whether an id is left out of the text)."""
    vocab = tokenizer.vocab
    skip = np.zeros(vocab.size, bool)
    skip[sorted(vocab.special_ids)] = True
    if tokenizer.kind == "sentencepiece":
        unk = vocab.specials.get("unk")
        surfaces = [t.replace(vocab_files.SP_WORD_START, " ").encode("utf-8")
                    for t in vocab.tokens]
        if unk is not None:
            surfaces[unk], skip[unk] = SP_UNK_SURFACE.encode("utf-8"), False
    elif tokenizer.kind == "bpe":
        to_byte = {c: b for b, c in bpe.bytes_to_unicode().items()}
        surfaces = [bytes(to_byte[c] for c in t) if all(c in to_byte for c in t) else b""
                    for t in vocab.tokens]
    else:
        raise ValueError(f"generation serving needs a sentencepiece or bpe vocabulary, not "
                         f"{tokenizer.kind!r} ({tokenizer.path})")
    return np.array(surfaces, dtype=object), skip


def detokenize_numpy(tokenizer, token_ids: np.ndarray, lengths: np.ndarray) -> List[str]:
    """Eager twin of the graph's detokenizer (tests, garden.fewshot): row i's first lengths[i]
    ids as text."""
    surfaces, skip = _pieces_table(tokenizer)
    texts = []
    for row, n in zip(np.asarray(token_ids), np.asarray(lengths)):
        joined = b"".join(surfaces[i] for i in row[:n] if not skip[i])
        if tokenizer.kind == "sentencepiece" and joined.startswith(b" "):
            joined = joined[1:]
        texts.append(joined.decode("utf-8", "replace"))
    return texts


class GenerationServing(ServingModule):
    """Exports a GenerativeLM with its tokenizer (see the module docstring).

    Args:
        model: a GenerativeLM (garden/models/generative.py).
        tokenizer: the text.tokenizers.TextTokenizer it was trained with
            (sentencepiece or bpe).
        vocab_path: its vocabulary file (copied into assets/; a BPE merges.txt too).
        eos_id, pad_id: as garden.models.decoding.generate takes them.
        max_prompt_length: prompt slots (decoder-only) or encoder length (encoder-decoder).
        max_new_tokens: the cap of every request's max_new_tokens (the decode buffers' size).
        max_beams: the widest beam a request may ask for.
        defaults: the settings of serving_default and serving_ids (and the fixed beam
            settings); default GenerationConfig(max_new_tokens=max_new_tokens).
        prompt_prefix_ids, prompt_suffix_ids: ids around each prompt's pieces.
        decoder_start_ids: encoder-decoder models' decoder prompt (required for them).
        warmup_prompts: a few prompts for the warmup requests.
    """

    task = "generation"

    def __init__(self, model, tokenizer, vocab_path: str, *, eos_id: int, pad_id: int,
                 max_prompt_length: int = 64, max_new_tokens: int = 32, max_beams: int = 4,
                 defaults: Optional[GenerationConfig] = None,
                 prompt_prefix_ids: Sequence[int] = (), prompt_suffix_ids: Sequence[int] = (),
                 decoder_start_ids: Optional[Sequence[int]] = None,
                 warmup_prompts: Optional[Sequence[str]] = None):
        super().__init__(name="generation_serving")
        self._hold("model", model)
        self.encoder_decoder = bool(model.is_encoder_decoder)
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)
        self.max_prompt_length, self.max_new_tokens = int(max_prompt_length), int(max_new_tokens)
        self.max_beams = int(max_beams)
        self.defaults = defaults or GenerationConfig(max_new_tokens=self.max_new_tokens)
        self.prefix, self.suffix = [int(i) for i in prompt_prefix_ids], [
            int(i) for i in prompt_suffix_ids]
        self.decoder_start = None if decoder_start_ids is None else [int(i) for i in
                                                                      decoder_start_ids]
        self._check(model, tokenizer)
        self.kind, self.lower_case = tokenizer.kind, bool(tokenizer.lower_case)
        self.vocab_size, self.fingerprint = tokenizer.vocab.size, tokenizer.fingerprint
        files = vocab_files.bpe_files(vocab_path) if tokenizer.kind == "bpe" else (vocab_path,)
        self._vocab_path = files[0]
        self.vocab_file = tf.saved_model.Asset(files[0])
        if len(files) > 1:
            self.merges_file = tf.saved_model.Asset(files[1])
        # Kept as attributes so that their resources and constants are saved with the export.
        self.tokenizer = tokenizer.in_graph()
        surfaces, skip = _pieces_table(tokenizer)
        self.surfaces = tf.constant(surfaces.tolist(), tf.string)
        self.skip = tf.constant(skip)
        self.generator = Generator(model, eos_id=self.eos_id, pad_id=self.pad_id)
        self._loops = {}  # (method, num_beams) -> tf.function of the decode loop
        self._warmup = list(warmup_prompts or ["A warmup prompt.", "Another, longer one."])

    def _check(self, model, tokenizer) -> None:
        problems = []
        d = self.defaults
        if d.max_new_tokens > self.max_new_tokens:
            problems.append(f"defaults.max_new_tokens={d.max_new_tokens} exceeds the cap "
                            f"max_new_tokens={self.max_new_tokens}")
        if d.method == "beam" and d.num_beams > self.max_beams:
            problems.append(f"defaults.num_beams={d.num_beams} exceeds max_beams={self.max_beams}")
        room = self.max_prompt_length - len(self.prefix) - len(self.suffix)
        if room < 1:
            problems.append(f"max_prompt_length={self.max_prompt_length} leaves no room for "
                            f"text after {len(self.prefix) + len(self.suffix)} prefix/suffix ids")
        if self.encoder_decoder and not self.decoder_start:
            problems.append("an encoder-decoder model needs decoder_start_ids (T5 [0], BART [2, 0])")
        decoder = (len(self.decoder_start) if self.encoder_decoder else self.max_prompt_length)
        limit = getattr(model, "max_decoder_length", None)
        if limit is not None and decoder + self.max_new_tokens > limit:
            problems.append(f"{decoder} prompt slots + max_new_tokens {self.max_new_tokens} "
                            f"exceed the model's {limit} decoder positions")
        vocab = tokenizer.vocab.size
        for name, ids in (("eos_id", [self.eos_id]), ("pad_id", [self.pad_id]),
                          ("prompt_prefix_ids", self.prefix), ("prompt_suffix_ids", self.suffix),
                          ("decoder_start_ids", self.decoder_start or [])):
            if any(not 0 <= i < vocab for i in ids):
                problems.append(f"{name}={ids} outside the vocabulary's {vocab} ids")
        if problems:
            raise ValueError("GenerationServing: " + "; ".join(problems))

    # -- prompts ------------------------------------------------------------------------
    def _pieces(self, prompt: tf.Tensor) -> tf.RaggedTensor:
        pieces = tf.cast(self.tokenizer(prompt), tf.int32)
        if pieces.ragged_rank > 1:
            pieces = pieces.merge_dims(-2, -1)
        return pieces

    def encode(self, prompt: tf.Tensor) -> Dict[str, tf.Tensor]:
        """string [B] -> the model's prompt dict (module docstring), int32."""
        pieces = self._pieces(prompt)
        batch = pieces.nrows(out_type=tf.int32)
        around = lambda ids: tf.RaggedTensor.from_tensor(  # noqa: E731
            tf.tile(tf.constant([ids], tf.int32), [batch, 1])) if ids else None
        length = self.max_prompt_length
        if self.encoder_decoder:
            room = length - len(self.prefix) - len(self.suffix)
            parts = [around(self.prefix), pieces[:, :room], around(self.suffix)]
            ids = tf.concat([p for p in parts if p is not None], axis=1)
            token_ids = ids.to_tensor(self.pad_id, shape=[None, length])
            mask = tf.sequence_mask(ids.row_lengths(), length, tf.int32)
            start = tf.tile(tf.constant([self.decoder_start], tf.int32), [batch, 1])
            return {"encoder_token_ids": token_ids, "encoder_padding_mask": mask,
                    "decoder_token_ids": start, "decoder_padding_mask": tf.ones_like(start)}
        parts = [around(self.prefix), pieces, around(self.suffix)]
        ids = tf.concat([p for p in parts if p is not None], axis=1)
        # The last `length` pieces, then left-padded: column j holds piece j - (length - n).
        n = tf.minimum(tf.cast(ids.row_lengths(), tf.int32), length)
        last = ids.to_tensor(self.pad_id)
        total = tf.cast(ids.row_lengths(), tf.int32)
        source = tf.range(length)[None, :] - (length - n)[:, None] + (total - n)[:, None]
        real = tf.range(length)[None, :] >= (length - n)[:, None]
        last = tf.pad(last, [[0, 0], [0, 1]], constant_values=self.pad_id)  # never empty
        token_ids = tf.where(real, tf.gather(last, tf.maximum(source, 0), batch_dims=1),
                             self.pad_id)
        check = tf.debugging.assert_greater(
            n, 0, message="prompt: a row has no token (an empty prompt): give some text")
        with tf.control_dependencies([check]):
            return {"token_ids": tf.identity(token_ids), "padding_mask": tf.cast(real, tf.int32)}

    def decode_text(self, token_ids: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
        """int32 [B, N] new tokens and their count -> string [B] (module docstring)."""
        ragged = tf.RaggedTensor.from_tensor(token_ids, lengths=lengths)
        kept = tf.ragged.boolean_mask(ragged, ~tf.gather(self.skip, ragged))
        text = tf.strings.reduce_join(tf.gather(self.surfaces, kept), axis=1)
        if self.kind == "sentencepiece":
            text = tf.strings.regex_replace(text, "^ ", "")
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                            replacement_char=0xFFFD)

    # -- decoding -----------------------------------------------------------------------
    def _settings(self, **overrides) -> Dict[str, tf.Tensor]:
        settings = dict(self.defaults.settings())
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return settings

    def _decode(self, prompt, settings, method: str, num_beams: int):
        """The decode loop of (method, num_beams), one tf.function each: the signatures that
        share a loop (serving_default, serving_ids and generate's branch of the same method)
        call one traced graph, which halves the export's tracing time."""
        if method != "beam" or num_beams <= 1:
            method, num_beams = ("greedy" if method == "beam" else method), 1
        key = f"{method}_{num_beams}"
        if key not in self._loops:
            prompt_spec = {k: tf.TensorSpec([None, v.shape[1]], tf.int32, name=k)
                           for k, v in prompt.items()}
            settings_spec = {k: tf.TensorSpec([], v.dtype, name=k) for k, v in settings.items()}
            self._loops[key] = tf.function(
                lambda p, s: self.generator.decode_fn(p, s, method=method,
                                                      max_new_tokens=self.max_new_tokens,
                                                      num_beams=num_beams),
                input_signature=[prompt_spec, settings_spec], autograph=False)
        prompt = {k: tf.cast(v, tf.int32) for k, v in prompt.items()}
        return self._loops[key](prompt, settings)

    def _outputs(self, out) -> Dict[str, tf.Tensor]:
        return {"text": self.decode_text(out["token_ids"], out["lengths"]),
                "num_tokens": out["lengths"], "score": out["scores"]}

    def generate_default(self, prompt):
        prompt = checked_text(prompt, "prompt")
        out = self._decode(self.encode(prompt), self._settings(), self.defaults.method,
                           self.defaults.num_beams)
        return self._outputs(out)

    def generate_ids(self, token_ids, padding_mask):
        if self.encoder_decoder:
            batch = tf.shape(token_ids)[0]
            start = tf.tile(tf.constant([self.decoder_start], tf.int32), [batch, 1])
            prompt = {"encoder_token_ids": token_ids, "encoder_padding_mask": padding_mask,
                      "decoder_token_ids": start, "decoder_padding_mask": tf.ones_like(start)}
        else:
            prompt = {"token_ids": token_ids, "padding_mask": padding_mask}
        out = self._decode(prompt, self._settings(), self.defaults.method,
                           self.defaults.num_beams)
        return {"token_ids": out["token_ids"], "num_tokens": out["lengths"],
                "score": out["scores"]}

    def _one_setting(self, value, name, batch):
        value = tf.reshape(value, [-1])
        checks = [tf.debugging.assert_equal(
            tf.size(value), batch, message=f"{name} must hold one value per prompt row"),
            tf.debugging.assert_equal(
                tf.reduce_all(tf.equal(value, value[0])), True,
                message=f"{name}: every row of a request must have the same value (one "
                        f"request is decoded with one set of settings; send different "
                        f"settings in separate requests)")]
        with tf.control_dependencies(checks):
            return tf.identity(value[0])

    def generate_with_settings(self, prompt, max_new_tokens, method, num_beams, temperature,
                               top_k, top_p, seed):
        prompt = checked_text(prompt, "prompt")
        batch = tf.size(prompt)
        raw = dict(max_new_tokens=max_new_tokens, method=method, num_beams=num_beams,
                   temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        s = {k: self._one_setting(tf.convert_to_tensor(v, SETTINGS[k]), k, batch)
             for k, v in raw.items()}
        method_index = tf.argmax(tf.cast(tf.equal(s["method"], tf.constant(METHODS)),
                                         tf.int32), output_type=tf.int32)
        checks = [
            tf.debugging.assert_equal(tf.reduce_any(tf.equal(s["method"], METHODS)), True,
                                      message=f"method must be one of {list(METHODS)}"),
            tf.debugging.assert_greater_equal(s["max_new_tokens"], 1,
                                              message="max_new_tokens must be >= 1"),
            tf.debugging.assert_less_equal(
                s["max_new_tokens"], self.max_new_tokens,
                message=f"max_new_tokens must be <= {self.max_new_tokens}, the export's cap"),
            tf.debugging.assert_greater(s["temperature"], 0.0, message="temperature must be > 0"),
            tf.debugging.assert_greater_equal(s["top_k"], 0, message="top_k must be >= 0"),
            tf.debugging.assert_greater(s["top_p"], 0.0, message="top_p must be in (0, 1]"),
            tf.debugging.assert_less_equal(s["top_p"], 1.0, message="top_p must be in (0, 1]"),
        ]
        beam = tf.equal(method_index, METHODS.index("beam"))
        checks.append(tf.debugging.assert_equal(
            ~beam | ((s["num_beams"] >= 1) & (s["num_beams"] <= self.max_beams)), True,
            message=f"num_beams must be in 1..{self.max_beams} (the export's max_beams)"))
        with tf.control_dependencies(checks):
            settings = self._settings(**{k: tf.identity(s[k]) for k in (
                "max_new_tokens", "temperature", "top_k", "top_p", "seed")})
            encoded = self.encode(prompt)
        branches = [lambda: self._decode(encoded, settings, "greedy", 1),
                    lambda: self._decode(encoded, settings, "sample", 1)]
        # Beam widths 2..max_beams have their loops; width 1 is greedy's (see the docstring).
        branches += [(lambda k=k: self._decode(encoded, settings, "beam", k))
                     for k in range(2, self.max_beams + 1)]
        index = tf.where(beam & (s["num_beams"] > 1),
                         tf.clip_by_value(s["num_beams"], 2, self.max_beams),
                         tf.where(beam, 0, method_index))
        out = tf.switch_case(index, branches)
        return self._outputs(out)

    # -- the contract ---------------------------------------------------------------------
    def signatures(self):
        text = lambda name: tf.TensorSpec(None, tf.string, name=name)  # noqa: E731
        serve_default = tf.function(self.generate_default, input_signature=[text("prompt")])
        serve_ids = tf.function(self.generate_ids, input_signature=[
            tf.TensorSpec([None, self.max_prompt_length], tf.int32, name="token_ids"),
            tf.TensorSpec([None, self.max_prompt_length], tf.int32, name="padding_mask")])
        serve_settings = tf.function(self.generate_with_settings, input_signature=[
            text("prompt")] + [tf.TensorSpec(None, dtype, name=name)
                               for name, dtype in SETTINGS.items()])
        return {"serving_default": (serve_default.get_concrete_function(), PREDICT),
                "generate": (serve_settings.get_concrete_function(), PREDICT),
                "serving_ids": (serve_ids.get_concrete_function(), PREDICT)}

    def warmup_requests(self):
        prompts = self._warmup
        d = self.defaults
        n = len(prompts)
        settings = {"max_new_tokens": np.full(n, d.max_new_tokens, np.int32),
                    "method": np.array([b"beam"] * n, dtype=object),
                    "num_beams": np.full(n, min(2, self.max_beams), np.int32),
                    "temperature": np.full(n, d.temperature, np.float32),
                    "top_k": np.full(n, d.top_k, np.int32),
                    "top_p": np.full(n, d.top_p, np.float32),
                    "seed": np.full(n, d.seed, np.int32)}
        encoded = self.encode_prompts(prompts)
        ids_names = (("encoder_token_ids", "encoder_padding_mask") if self.encoder_decoder
                     else ("token_ids", "padding_mask"))
        return ([("serving_default", {"prompt": strings([p])}) for p in prompts]
                + [("generate", dict(settings, prompt=strings(prompts))),
                   ("serving_ids", {"token_ids": encoded[ids_names[0]],
                                    "padding_mask": encoded[ids_names[1]]})])

    def encode_prompts(self, prompts: Sequence[str]) -> Dict[str, np.ndarray]:
        """Eager helper (tests, warmup): the prompt dict generate() takes, as numpy."""
        out = self.encode(tf.constant(list(prompts), tf.string, shape=[len(prompts)]))
        return {k: v.numpy() for k, v in out.items()}

    def metadata(self) -> dict:
        d = self.defaults
        return {"task": self.task, "tokenizer": self.kind, "lower_case": self.lower_case,
                "vocab_file": "assets/" + self._vocab_path.rstrip("/").split("/")[-1],
                "vocab_size": self.vocab_size, "vocab_fingerprint": self.fingerprint,
                "encoder_decoder": self.encoder_decoder, "eos_id": self.eos_id,
                "pad_id": self.pad_id, "max_prompt_length": self.max_prompt_length,
                "max_new_tokens": self.max_new_tokens, "max_beams": self.max_beams,
                "prompt_prefix_ids": self.prefix, "prompt_suffix_ids": self.suffix,
                "decoder_start_ids": self.decoder_start,
                "defaults": {"max_new_tokens": d.max_new_tokens, "method": d.method,
                             "num_beams": d.num_beams, "temperature": d.temperature,
                             "top_k": d.top_k, "top_p": d.top_p, "seed": d.seed,
                             "length_penalty": d.length_penalty,
                             "length_penalty_kind": d.length_penalty_kind,
                             "min_new_tokens": d.min_new_tokens,
                             "no_repeat_ngram_size": d.no_repeat_ngram_size},
                "settings_inputs": {"generate": sorted(SETTINGS)}}


def make_generation_serving(model, vocab_path: str, tokenizer_kind: str, eos_id: int,
                            pad_id: int, *, lower_case: bool = False,
                            **kwargs) -> GenerationServing:
    """The hook of the LM tasks' serving_module(): a GenerationServing of `model` with the
    tokenizer of `vocab_path` (kind "sentencepiece" or "bpe"; lower_case as the data was made).
    kwargs: GenerationServing's (max_prompt_length, max_new_tokens, max_beams, defaults,
    prompt_prefix_ids, prompt_suffix_ids, decoder_start_ids, warmup_prompts)."""
    tokenizer = tokenizers.load_tokenizer(tokenizer_kind, vocab_path, lower_case=lower_case)
    return GenerationServing(model, tokenizer, vocab_path, eos_id=eos_id, pad_id=pad_id,
                             **kwargs)
