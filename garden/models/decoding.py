"""Decoding for every GenerativeLM: greedy, sampling (temperature, top-k, top-p) and beam search.

Drives only the contract of garden/models/generative.py (`start_decoding`, `decode_step`), so a
family that honours it generates without an edit here; tests/models/test_decoding.py checks
every method on the toys of tests/generative_testing.py.

    config = GenerationConfig(max_new_tokens=16, method="beam", num_beams=4, length_penalty=0.6)
    out = generate(model, {"token_ids": ids, "padding_mask": mask}, config, eos_id=1, pad_id=0)
    out["token_ids"]  # int32 [B, 16]: new tokens only, EOS included, pad_id after it
    out["lengths"]    # int32 [B]: new tokens including EOS
    out["scores"]     # float32 [B]: sum of the model's log-probs of the new tokens (beam: the
                      # length-penalised score)

Prompts. Decoder-only: {"token_ids", "padding_mask"} int32 [B, P], rows LEFT-padded (1 = real
token, at least one per row); encoder-decoder: {"encoder_token_ids", "encoder_padding_mask"}
[B, S] plus {"decoder_token_ids", "decoder_padding_mask"} [B, P], the decoder start tokens, also
left-padded. A left-padded row generates what it generates unpadded (the models take position
ids from the mask), and rows never influence each other.

What each setting does (GenerationConfig):
  * the log-probs: log_softmax(logits) of the model; `scores` sum them over the new tokens.
    Constraints set a token's log-prob to -inf without renormalising (as Hugging Face's
    processors do in beam search): min_new_tokens forbids EOS before that many new tokens;
    no_repeat_ngram_size=n forbids a token that would complete an n-gram already present in
    the decoder sequence (prompt included, left padding excluded; n = 1 forbids every token
    already present). The n-gram check is a running "common suffix length" per position
    (O(B * length) per step, no Python, no data-dependent shapes), so it runs inside the
    compiled loop, including under XLA (transformers #18707 and #20901 are about it failing
    there).
  * greedy: argmax of the constrained log-probs.
  * sample: logits / temperature, then top_k (keep the k largest, 0 = off), then top_p (keep
    the smallest set of largest-probability tokens whose mass reaches p, at least one, 1.0 =
    off), as Hugging Face orders them; the draw is Gumbel-max with noise from
    tf.random.stateless_uniform seeded by (seed, step): the same seed gives the same tokens,
    and a row's noise depends only on its row number.
  * beam: an alive set and a finished set per prompt (as in Model Garden's ops/beam_search.py).
    Each step scores every continuation of the num_beams alive hypotheses and takes the best
    2 * num_beams; a candidate that ends with EOS and ranks in the first num_beams leaves the
    beam for the finished set (Hugging Face's and fairseq's rule), and at max_new_tokens the
    first num_beams candidates all finish. Finished hypotheses compete by the penalised score
    logp / lp(len), len = new tokens including EOS:
        "gnmt":    lp = ((5 + len) / 6) ** alpha  (Wu et al. 2016, Model Garden)
        "fairseq": lp = len ** alpha              (fairseq, BART, Hugging Face's length_penalty)
    A prompt is done when no alive hypothesis can beat the worst kept finished one: the bound
    is the best alive logp divided by the largest lp any length it could still reach gives
    (log-probs only fall as tokens are added). That is Hugging Face's early_stopping="never";
    its default heuristic, which bounds with the current length, can stop before the best
    hypothesis is found when alpha > 0. The loop ends when every prompt is done.
  * EOS: a row that produced EOS emits pad_id afterwards; the loop stops when every row did.

Compilation. `Generator` traces one tf.function per (prompt shapes, max_new_tokens, method,
num_beams); every other setting is a tensor argument, so changing it never retraces (tested with
the function's tracing count). The whole decode is one tf.while_loop over `decode_step`
(the step after the last token is skipped with tf.cond), compiled with XLA on a GPU and, on a
CPU, for models under 10M parameters (`default_jit_compile`; `Generator`'s docstring has the
numbers: XLA decodes the toys 10x faster, GPT-2 small 1.7x slower than the plain graph).

Streaming: `Generator.stream(prompt, config)` yields each step's tokens as they are produced
(the loop body compiled once and called per step from Python); it gives exactly generate()'s
tokens. `python -m garden.generate` uses it.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Dict, Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf

METHODS = ("greedy", "sample", "beam")
LENGTH_PENALTY_KINDS = ("gnmt", "fairseq")
NEG_INF = float("-inf")


@dataclasses.dataclass(frozen=True)
class GenerationConfig:
    """Decoding settings (see the module docstring for what each does)."""

    max_new_tokens: int = 32
    method: str = "greedy"            # "greedy" | "sample" | "beam"
    temperature: float = 1.0          # sample: logits / temperature
    top_k: int = 0                    # sample: 0 = off
    top_p: float = 1.0                # sample: nucleus mass, 1.0 = off
    num_beams: int = 4                # beam
    length_penalty: float = 0.0       # beam: alpha (0 = plain sum of log-probs)
    length_penalty_kind: str = "gnmt" # "gnmt": score / ((5 + len) / 6) ** alpha (Wu et al. 2016)
                                      # "fairseq": score / len ** alpha (BART, HF's length_penalty)
    min_new_tokens: int = 0           # EOS forbidden before this many new tokens
    no_repeat_ngram_size: int = 0     # 0 = off
    seed: int = 0                     # sample: stateless RNG seed

    def __post_init__(self):
        problems = []
        if self.method not in METHODS:
            problems.append(f"method {self.method!r} is not one of {METHODS}")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens={self.max_new_tokens} must be >= 1")
        if not self.temperature > 0:
            problems.append(f"temperature={self.temperature} must be > 0")
        if self.top_k < 0:
            problems.append(f"top_k={self.top_k} must be >= 0 (0 = off)")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p={self.top_p} must be in (0, 1] (1.0 = off)")
        if self.num_beams < 1:
            problems.append(f"num_beams={self.num_beams} must be >= 1")
        if self.length_penalty_kind not in LENGTH_PENALTY_KINDS:
            problems.append(f"length_penalty_kind {self.length_penalty_kind!r} is not one of "
                            f"{LENGTH_PENALTY_KINDS}")
        if self.min_new_tokens < 0:
            problems.append(f"min_new_tokens={self.min_new_tokens} must be >= 0")
        if self.no_repeat_ngram_size < 0:
            problems.append(f"no_repeat_ngram_size={self.no_repeat_ngram_size} must be >= 0")
        if problems:
            raise ValueError("GenerationConfig: " + "; ".join(problems))

    def settings(self) -> Dict[str, tf.Tensor]:
        """The settings that are tensors in the trace (changing them never retraces)."""
        return {
            "max_new_tokens": tf.constant(self.max_new_tokens, tf.int32),
            "temperature": tf.constant(self.temperature, tf.float32),
            "top_k": tf.constant(self.top_k, tf.int32),
            "top_p": tf.constant(self.top_p, tf.float32),
            "length_penalty": tf.constant(self.length_penalty, tf.float32),
            "length_penalty_kind": tf.constant(
                LENGTH_PENALTY_KINDS.index(self.length_penalty_kind), tf.int32),
            "min_new_tokens": tf.constant(self.min_new_tokens, tf.int32),
            "no_repeat_ngram_size": tf.constant(self.no_repeat_ngram_size, tf.int32),
            "seed": tf.constant(self.seed, tf.int32),
        }


def default_settings(max_new_tokens: int) -> Dict[str, tf.Tensor]:
    """Tensors of GenerationConfig's defaults, for `Generator.decode_fn` callers (serving) that
    override a few: dict(default_settings(64), top_k=k_tensor)."""
    return GenerationConfig(max_new_tokens=max_new_tokens).settings()


_GENERATORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def generate(model, prompt: Dict, config: GenerationConfig, *, eos_id: int,
             pad_id: int, jit_compile: Optional[bool] = None) -> Dict[str, np.ndarray]:
    """Generate from `prompt` with `config` (see the module docstring). Reuses one Generator per
    (model, eos_id, pad_id, jit_compile), so repeated calls with the same shapes do not
    retrace. Returns numpy {"token_ids" int32 [B, max_new_tokens], "lengths" int32 [B],
    "scores" float32 [B]}."""
    return generator_for(model, eos_id=eos_id, pad_id=pad_id,
                         jit_compile=jit_compile).generate(prompt, config)


def generator_for(model, *, eos_id: int, pad_id: int,
                  jit_compile: Optional[bool] = None) -> "Generator":
    """The Generator generate() uses for (model, eos_id, pad_id, jit_compile), made on first
    use and kept as long as the model lives."""
    per_model = _GENERATORS.setdefault(model, {})
    key = (int(eos_id), int(pad_id), jit_compile)
    if key not in per_model:
        per_model[key] = Generator(model, eos_id=eos_id, pad_id=pad_id, jit_compile=jit_compile)
    return per_model[key]


def _prompt_names(model) -> Tuple[str, ...]:
    if model.is_encoder_decoder:
        return ("encoder_token_ids", "encoder_padding_mask", "decoder_token_ids",
                "decoder_padding_mask")
    return ("token_ids", "padding_mask")


def check_prompt(model, prompt: Dict, max_new_tokens: int) -> Dict[str, np.ndarray]:
    """The prompt as int32 numpy arrays, or a ValueError naming the key / row at fault:
    missing keys, shapes that disagree, a row without a real token, a right-padded row, more
    decoder positions than the model has."""
    names = _prompt_names(model)
    missing = [n for n in names if n not in prompt]
    if missing:
        raise ValueError(f"prompt lacks {missing}: a {'encoder-decoder' if model.is_encoder_decoder else 'decoder-only'} "
                         f"GenerativeLM takes {list(names)}")
    arrays = {n: np.asarray(prompt[n]).astype(np.int32) for n in names}
    pairs = [names[i:i + 2] for i in range(0, len(names), 2)]
    batch = arrays[names[0]].shape[0] if arrays[names[0]].ndim == 2 else None
    for ids_name, mask_name in pairs:
        ids, mask = arrays[ids_name], arrays[mask_name]
        if ids.ndim != 2 or ids.shape != mask.shape or ids.shape[0] != batch:
            raise ValueError(f"prompt[{ids_name!r}] {ids.shape} and prompt[{mask_name!r}] "
                             f"{mask.shape} must both be [batch, length] with one batch size")
        if ids.shape[1] == 0:
            raise ValueError(f"prompt[{ids_name!r}] has length 0: give at least one token per row")
        for row in range(batch):
            real = mask[row] != 0
            if not real.any():
                raise ValueError(f"prompt[{mask_name!r}] row {row} has no real token")
            if ids_name != "encoder_token_ids" and not real[real.argmax():].all():
                raise ValueError(f"prompt[{mask_name!r}] row {row} is not left-padded "
                                 f"(mask {mask[row].tolist()}): pad on the left, the new "
                                 f"tokens follow the last slot")
    decoder_length = arrays[names[-1]].shape[1] + max_new_tokens
    limit = getattr(model, "max_decoder_length", None)
    if limit is not None and decoder_length > limit:
        raise ValueError(f"prompt length {arrays[names[-1]].shape[1]} + max_new_tokens "
                         f"{max_new_tokens} = {decoder_length} decoder positions, more than "
                         f"the model's {limit}: shorten the prompt or max_new_tokens")
    return arrays


# --- the pieces of one step --------------------------------------------------------------------

def _write_column(buffer, column, values):
    """buffer[:, column] = values, for a column index that is a tensor (XLA-friendly)."""
    hit = tf.equal(tf.range(tf.shape(buffer)[1]), column)[None, :]
    return tf.where(hit, values[:, None], buffer)


def _suffix_update(history, match, position):
    """The running n-gram state after history[:, position] was written.

    match[:, j] = the length of the longest common suffix of history[:, :j + 1] and the whole
    sequence so far. Appending token x at `position`: match'[j] = match[j - 1] + 1 where
    history[j] == x, else 0. Unwritten slots and left padding hold -1, which never equals a
    token; a padding slot leaves the state as it was."""
    token = history[:, position][:, None]
    shifted = tf.pad(match[:, :-1], [[0, 0], [1, 0]])
    updated = tf.where(tf.equal(history, token), shifted + 1, 0)
    return tf.where(token >= 0, updated, match)


def _initial_match(history, prompt_length: int):
    """The n-gram state after the prompt's slots 0..prompt_length-1."""
    match = tf.zeros_like(history)
    if prompt_length <= 16:  # unrolled: a handful of small ops
        for position in range(prompt_length):
            match = _suffix_update(history, match, position)
        return match
    return tf.while_loop(lambda p, m: p < prompt_length,
                         lambda p, m: (p + 1, _suffix_update(history, m, p)),
                         (tf.constant(0), match))[1]


def _banned_ngrams(history, match, ngram_size, vocab_size):
    """bool [B, V]: tokens that would complete an n-gram already in `history` (n = ngram_size;
    nothing when n = 0). The token at slot p completes the n-gram ending at p, whose first n - 1
    tokens equal the sequence's last n - 1 exactly when match[p - 1] >= n - 1."""
    before = tf.pad(match[:, :-1], [[0, 0], [1, 0]])
    hit = (before >= ngram_size - 1) & (history >= 0) & (ngram_size > 0)
    rows = tf.broadcast_to(tf.range(tf.shape(history)[0])[:, None], tf.shape(history))
    index = tf.stack([rows, tf.where(hit, history, 0)], axis=-1)
    counts = tf.scatter_nd(tf.reshape(index, [-1, 2]), tf.reshape(tf.cast(hit, tf.int32), [-1]),
                           [tf.shape(history)[0], vocab_size])
    return counts > 0


def _constrained_log_probs(logits, step, history, match, settings, eos_id):
    """log_softmax(logits) with EOS forbidden before min_new_tokens and repeated n-grams
    forbidden (-inf), as Hugging Face's processors (no renormalisation)."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    vocab_size = tf.shape(log_probs)[1]
    banned = _banned_ngrams(history, match, settings["no_repeat_ngram_size"], vocab_size)
    early = step < settings["min_new_tokens"]
    banned |= tf.equal(tf.range(vocab_size), eos_id)[None, :] & early
    return tf.where(banned, NEG_INF, log_probs)


def _sample(log_probs, logits, step, settings):
    """One token per row: temperature, top-k, top-p, then a Gumbel-max draw (stateless)."""
    scaled = tf.where(tf.math.is_inf(log_probs), NEG_INF,
                      tf.cast(logits, tf.float32) / settings["temperature"])
    vocab_size = tf.shape(scaled)[1]
    top_k, top_p = settings["top_k"], settings["top_p"]

    def filtered():
        ordered = tf.sort(scaled, axis=-1, direction="DESCENDING")
        k = tf.where(top_k > 0, tf.minimum(top_k, vocab_size), vocab_size)
        kth = tf.gather(ordered, k - 1, axis=1)[:, None]
        kept = tf.where(ordered >= kth, ordered, NEG_INF)
        # Nucleus: keep sorted token i while the mass before it is below p (the first always).
        probs = tf.nn.softmax(kept, axis=-1)
        before = tf.cumsum(probs, axis=-1, exclusive=True)
        last = tf.reduce_sum(tf.cast(before < top_p, tf.int32), axis=-1)
        threshold = tf.gather(kept, tf.maximum(last, 1) - 1, axis=1, batch_dims=1)[:, None]
        return tf.where(scaled >= tf.maximum(kth, threshold), scaled, NEG_INF)

    scaled = tf.cond((top_k > 0) | (top_p < 1.0), filtered, lambda: scaled)
    uniform = tf.random.stateless_uniform(tf.shape(scaled), seed=tf.stack([settings["seed"], step]),
                                          minval=np.finfo(np.float32).tiny, maxval=1.0)
    gumbel = -tf.math.log(-tf.math.log(uniform))
    return tf.argmax(scaled + gumbel, axis=-1, output_type=tf.int32)


def _length_penalty(length, settings):
    """lp(len) (module docstring): GNMT's ((5 + len) / 6) ** alpha or fairseq's len ** alpha."""
    length = tf.cast(length, tf.float32)
    alpha = settings["length_penalty"]
    return tf.where(tf.equal(settings["length_penalty_kind"], 0),
                    tf.pow((5.0 + length) / 6.0, alpha), tf.pow(length, alpha))


def _batch_size(tensor):
    """The static batch size when known (so loop variables keep static shapes), else a tensor."""
    return tensor.shape[0] if tensor.shape[0] is not None else tf.shape(tensor)[0]


def _gather_rows(nest, rows):
    return tf.nest.map_structure(lambda t: tf.gather(t, rows), nest)


# --- the decode loops --------------------------------------------------------------------------

# Below this many parameters XLA's lower per-op cost wins on a CPU; above it the graph's oneDNN
# matmuls do (see Generator: toys ~50k parameters 10x faster with XLA, GPT-2 small 124M 1.7x
# slower).
XLA_CPU_MAX_PARAMETERS = 10_000_000


def default_jit_compile(model) -> bool:
    """XLA for the decode loop: always on a GPU; on a CPU only below XLA_CPU_MAX_PARAMETERS."""
    if tf.config.list_physical_devices("GPU"):
        return True
    # Summed over the weights that exist: a model not built yet (no weights) counts as small.
    parameters = sum(int(np.prod(w.shape)) for w in model.weights)
    return parameters < XLA_CPU_MAX_PARAMETERS


class Generator:
    """generate() compiled once per (prompt shapes, max_new_tokens, method, num_beams).

        generator = Generator(model, eos_id=1, pad_id=0)
        out = generator.generate(prompt, GenerationConfig(method="sample", top_p=0.9, seed=3))
        generator.tracing_count()  # traces so far: new seeds / settings do not add one

    Serving calls the same loop from its own tf.function:
        out = generator.decode_fn(prompt_tensors, dict(default_settings(64), top_k=k),
                                  method="sample", max_new_tokens=64)
    settings["max_new_tokens"] may then be a tensor below the static max_new_tokens (the
    buffers' size): decoding stops there and the rest is pad_id.

    jit_compile: None picks the default (`default_jit_compile`): XLA on a GPU, and on a CPU only
    for small models. XLA compiles the whole loop into one executable: on this CPU (2 shared
    cores) the toy causal LM decoded 32 new tokens for a batch of 2 in 5.0 ms with XLA against
    50 ms without (greedy; sample 4.3 vs 46 ms; beam of 4: 12 vs 92 ms), because the graph
    executor's per-op cost dominates small steps. For a real model the matmuls dominate, and
    XLA:CPU's are slower than the oneDNN kernels of the graph: one GPT-2 small decode step at
    batch 1 took 124 ms with XLA against 74 ms without (2026-11-25, same machine and load,
    before the per-block cache of garden/models/gpt/causal_lm.py). Compiling costs
    more once per trace (about 3 s against 1-2 s for the toys), so short-lived callers that
    trace many shapes (the tests) pass False.
    """

    def __init__(self, model, *, eos_id: int, pad_id: int, jit_compile: Optional[bool] = None):
        self.model = model
        self.eos_id, self.pad_id = int(eos_id), int(pad_id)
        jit = default_jit_compile(model) if jit_compile is None else bool(jit_compile)
        self.jit_compile = jit
        self._decode = tf.function(self._decode_impl, jit_compile=jit, autograph=False)
        self._start = tf.function(self._start_impl, jit_compile=jit, autograph=False)
        self._step = tf.function(self._step_impl, jit_compile=jit, autograph=False)

    def tracing_count(self) -> int:
        """How many times the whole-decode function was traced (one per distinct key)."""
        return self._decode.experimental_get_tracing_count()

    # Public entry points.
    def generate(self, prompt: Dict, config: GenerationConfig) -> Dict[str, np.ndarray]:
        arrays = check_prompt(self.model, prompt, config.max_new_tokens)
        out = self._decode({k: tf.constant(v) for k, v in arrays.items()}, config.settings(),
                           method=config.method, max_new_tokens=config.max_new_tokens,
                           num_beams=self._num_beams(config))
        return {k: v.numpy() for k, v in out.items()}

    def decode_fn(self, prompt: Dict[str, tf.Tensor], settings: Dict[str, tf.Tensor], *,
                  method: str, max_new_tokens: int, num_beams: int = 1) -> Dict[str, tf.Tensor]:
        """The decode loop as a function of tensors, for use inside another tf.function (a
        SavedModel signature). prompt: int32 tensors as generate() takes them (not checked
        here: the caller left-pads); settings: GenerationConfig.settings()'s keys, tensors.
        Returns generate()'s dict as tensors."""
        if method not in METHODS:
            raise ValueError(f"method {method!r} is not one of {METHODS}")
        return self._decode_impl(prompt, settings, method, max_new_tokens,
                                 num_beams if method == "beam" else 1)

    def stream(self, prompt: Dict, config: GenerationConfig) -> Iterator[np.ndarray]:
        """Yield int32 [B] tokens step by step (pad_id for rows already finished), the same
        tokens generate() returns; stops early when every row has produced EOS. Greedy and
        sample only: a beam's best hypothesis is known only at the end."""
        if config.method == "beam":
            raise ValueError("stream() decodes greedy or sample; beam search knows its best "
                             "hypothesis only at the end: use generate()")
        arrays = check_prompt(self.model, prompt, config.max_new_tokens)
        settings = config.settings()
        carry = self._start({k: tf.constant(v) for k, v in arrays.items()}, settings,
                            config.max_new_tokens)
        for step in range(config.max_new_tokens):
            carry = self._step(carry, settings, config.method)
            yield carry["tokens"][:, step].numpy()
            if bool(tf.reduce_all(carry["done"])):
                break

    @staticmethod
    def _num_beams(config: GenerationConfig) -> int:
        return config.num_beams if config.method == "beam" else 1

    # The loops.
    def _decode_impl(self, prompt, settings, method, max_new_tokens, num_beams):
        if method == "beam":
            return self._beam(prompt, settings, max_new_tokens, num_beams)
        carry = self._start_impl(prompt, settings, max_new_tokens)
        limit = tf.minimum(settings["max_new_tokens"], max_new_tokens)
        carry = tf.while_loop(
            lambda c: (c["step"] < limit) & ~tf.reduce_all(c["done"]),
            lambda c: [self._step_impl(c, settings, method, limit)], [carry],
            maximum_iterations=max_new_tokens)[0]
        return {"token_ids": carry["tokens"], "lengths": carry["lengths"],
                "scores": carry["scores"]}

    def _decoder_prompt(self, prompt):
        if self.model.is_encoder_decoder:
            return prompt["decoder_token_ids"], prompt["decoder_padding_mask"]
        return prompt["token_ids"], prompt["padding_mask"]

    def _history(self, prompt, max_new_tokens):
        """int32 [B, P + N]: the decoder sequence so far, -1 on padding and unwritten slots."""
        ids, mask = self._decoder_prompt(prompt)
        ids = tf.where(tf.cast(mask, tf.bool), tf.cast(ids, tf.int32), -1)
        return tf.pad(ids, [[0, 0], [0, max_new_tokens]], constant_values=-1)

    def _start_impl(self, prompt, settings, max_new_tokens):
        prompt = {k: tf.cast(v, tf.int32) for k, v in prompt.items()}
        prompt_length = self._decoder_prompt(prompt)[0].shape[1]
        logits, state = self.model.start_decoding(prompt, prompt_length + max_new_tokens)
        history = self._history(prompt, max_new_tokens)
        batch = _batch_size(history)
        return {"step": tf.constant(0), "logits": tf.cast(logits, tf.float32), "state": state,
                "history": history, "match": _initial_match(history, prompt_length),
                "tokens": tf.fill([batch, max_new_tokens], self.pad_id),
                "done": tf.zeros([batch], tf.bool), "lengths": tf.zeros([batch], tf.int32),
                "scores": tf.zeros([batch], tf.float32)}

    def _step_impl(self, carry, settings, method, limit=None):
        """One new token per row (greedy or sample), then the model's step unless it was the
        last."""
        step, done = carry["step"], carry["done"]
        max_new_tokens = carry["tokens"].shape[1]
        prompt_length = carry["history"].shape[1] - max_new_tokens
        if limit is None:
            limit = tf.minimum(settings["max_new_tokens"], max_new_tokens)
        log_probs = _constrained_log_probs(carry["logits"], step, carry["history"],
                                           carry["match"], settings, self.eos_id)
        if method == "greedy":
            token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        else:
            token = _sample(log_probs, carry["logits"], step, settings)
        token_log_prob = tf.gather(log_probs, token, axis=1, batch_dims=1)
        token = tf.where(done, self.pad_id, token)
        position = prompt_length + step
        history = _write_column(carry["history"], position, tf.where(done, -1, token))
        match = _suffix_update(history, carry["match"], position)
        scores = carry["scores"] + tf.where(done, 0.0, token_log_prob)
        lengths = carry["lengths"] + tf.cast(~done, tf.int32)
        done = done | tf.equal(token, self.eos_id)
        more = (step + 1 < limit) & ~tf.reduce_all(done)
        logits, state = tf.cond(
            more, lambda: self._model_step(token, position, carry["state"]),
            lambda: (carry["logits"], carry["state"]))
        return {"step": step + 1, "logits": logits, "state": state, "history": history,
                "match": match, "tokens": _write_column(carry["tokens"], step, token),
                "done": done, "lengths": lengths, "scores": scores}

    def _model_step(self, token, position, state):
        logits, state = self.model.decode_step(token, position, state)
        return tf.cast(logits, tf.float32), state

    def _beam(self, prompt, settings, max_new_tokens, num_beams):
        """Beam search with alive and finished sets (module docstring). Beams live in rows
        b * num_beams + k of the model's state; the prompt is encoded once per row of the
        batch and then repeated."""
        k = num_beams
        start = self._start_impl(prompt, settings, max_new_tokens)
        batch = _batch_size(start["history"])
        prompt_length = start["history"].shape[1] - max_new_tokens
        widen = lambda t: tf.repeat(t, k, axis=0)
        limit = tf.minimum(settings["max_new_tokens"], max_new_tokens)
        # Only the first beam is live at the start, or the k copies would fill the beam.
        first = tf.constant([0.0] + [NEG_INF] * (k - 1))
        carry = {
            "step": tf.constant(0), "logits": widen(start["logits"]),
            "state": tf.nest.map_structure(widen, start["state"]),
            "history": widen(start["history"]), "match": widen(start["match"]),
            "alive_scores": tf.tile(first[None, :], [batch, 1]),
            "alive_tokens": tf.fill([batch, k, max_new_tokens], self.pad_id),
            "finished_scores": tf.fill([batch, k], NEG_INF),
            "finished_tokens": tf.fill([batch, k, max_new_tokens], self.pad_id),
            "finished_lengths": tf.zeros([batch, k], tf.int32),
            "done": tf.zeros([batch], tf.bool)}

        def body(c):
            step, done = c["step"], c["done"]
            log_probs = _constrained_log_probs(c["logits"], step, c["history"], c["match"],
                                               settings, self.eos_id)
            vocab_size = tf.shape(log_probs)[1]
            candidates = c["alive_scores"][:, :, None] + tf.reshape(log_probs, [batch, k, -1])
            scores, index = tf.math.top_k(tf.reshape(candidates, [batch, -1]), 2 * k)
            parent, token = index // vocab_size, index % vocab_size
            tokens = tf.gather(c["alive_tokens"], parent, batch_dims=1)  # [B, 2k, N]
            hit = tf.equal(tf.range(max_new_tokens), step)[None, None, :]
            tokens = tf.where(hit, token[:, :, None], tokens)
            last = step + 1 >= limit

            # Finished set: candidates in the first k ranks that end with EOS (all of them at
            # the last step) join the kept ones by penalised score; the best k stay.
            is_eos = tf.equal(token, self.eos_id)
            finishing = ((tf.range(2 * k) < k)[None, :] & (is_eos | last) & ~done[:, None])
            penalised = scores / _length_penalty(step + 1, settings)
            merged = tf.concat([c["finished_scores"], tf.where(finishing, penalised, NEG_INF)], 1)
            finished_scores, keep = tf.math.top_k(merged, k)
            finished_tokens = tf.gather(tf.concat([c["finished_tokens"], tokens], 1), keep,
                                        batch_dims=1)
            finished_lengths = tf.gather(
                tf.concat([c["finished_lengths"], tf.fill([batch, 2 * k], step + 1)], 1), keep,
                batch_dims=1)

            # Alive set: the best k candidates that did not end with EOS.
            alive_scores, pick = tf.math.top_k(tf.where(is_eos, NEG_INF, scores), k)
            rows = tf.reshape(tf.range(batch)[:, None] * k
                              + tf.gather(parent, pick, batch_dims=1), [-1])
            flat_token = tf.reshape(tf.gather(token, pick, batch_dims=1), [-1])
            position = prompt_length + step
            history = _write_column(tf.gather(c["history"], rows), position, flat_token)
            match = _suffix_update(history, tf.gather(c["match"], rows), position)

            # Done when the best alive hypothesis, at the most favourable length it can still
            # reach, cannot beat the worst kept finished one.
            best_penalty = tf.maximum(_length_penalty(step + 2, settings),
                                      _length_penalty(limit, settings))
            done = done | last | (alive_scores[:, 0] / best_penalty <= finished_scores[:, -1])
            state = _gather_rows(c["state"], rows)
            logits, state = tf.cond(
                ~tf.reduce_all(done), lambda: self._model_step(flat_token, position, state),
                lambda: (c["logits"], state))
            return {"step": step + 1, "logits": logits, "state": state, "history": history,
                    "match": match, "alive_scores": alive_scores,
                    "alive_tokens": tf.gather(tokens, pick, batch_dims=1),
                    "finished_scores": finished_scores, "finished_tokens": finished_tokens,
                    "finished_lengths": finished_lengths, "done": done}

        carry = tf.while_loop(lambda c: ~tf.reduce_all(c["done"]), lambda c: [body(c)], [carry],
                              maximum_iterations=max_new_tokens)[0]
        return {"token_ids": carry["finished_tokens"][:, 0],
                "lengths": carry["finished_lengths"][:, 0],
                "scores": carry["finished_scores"][:, 0]}
