"""How a generative family lays a prompt out in ids: one function per kind of family.

    causal  GPT, GPT-2, GPT-3: the prompt, after <|endoftext|> when the vocabulary has it
            (role "eod": the LM tasks train every text so; a Hugging Face config.json names
            no "eod", so a converted GPT-2 is prompted as transformers' generate prompts it,
            without one). EOS: "eod", else "eos"; pad: "pad", else EOS (OpenAI's GPT-2 has no
            <pad>: padding is <|endoftext|>, masked).
    t5      encoder: x </s>; the decoder starts from "decoder_start" (default <pad>, T5's 0).
    bart    encoder: <s> x </s>; the decoder starts from "decoder_start" (default </s>, BART's
            2), then <s>.

A FamilySpec names its kind (`framing`); the ids come from a mapping of roles, the names of
data_pipelines' Vocab.specials ("eos", "eod", "pad", "bos") plus "decoder_start": a
vocabulary's specials (the LM tasks, garden.fewshot) or a Hugging Face config.json
(`config_roles`, garden.convert). The result is what a garden.generate model directory
records (generation.json) and what garden.serving.generation's prompt layout takes.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Tuple


@dataclasses.dataclass(frozen=True)
class Framing:
    eos_id: int
    pad_id: int
    prompt_prefix_ids: Tuple[int, ...] = ()  # before a decoder-only prompt
    encoder_prefix_ids: Tuple[int, ...] = ()  # before an encoder prompt
    encoder_suffix_ids: Tuple[int, ...] = ()  # after it
    decoder_start_ids: Tuple[int, ...] = ()  # an encoder-decoder's first decoder ids

    def ids(self) -> Dict:
        """The fields as ints and lists (garden.generate_dir.save_model_dir's keywords)."""
        return {k: list(v) if isinstance(v, tuple) else int(v)
                for k, v in dataclasses.asdict(self).items()}


def _role(roles: Mapping[str, int], role: str, kind: str, who: str) -> int:
    if role not in roles:
        raise ValueError(f"{who or 'the vocabulary'} has no {role!r} token, which the {kind} "
                         f"prompt framing needs (it has {sorted(roles)})")
    return int(roles[role])


def causal(roles: Mapping[str, int], who: str = "") -> Framing:
    if "eod" in roles:
        eos = int(roles["eod"])
        return Framing(eos, int(roles.get("pad", eos)), prompt_prefix_ids=(eos,))
    eos = _role(roles, "eos", "causal", who)
    return Framing(eos, int(roles.get("pad", eos)))


def t5(roles: Mapping[str, int], who: str = "") -> Framing:
    eos, pad = _role(roles, "eos", "t5", who), _role(roles, "pad", "t5", who)
    return Framing(eos, pad, encoder_suffix_ids=(eos,),
                   decoder_start_ids=(int(roles.get("decoder_start", pad)),))


def bart(roles: Mapping[str, int], who: str = "") -> Framing:
    eos, pad = _role(roles, "eos", "bart", who), _role(roles, "pad", "bart", who)
    bos = _role(roles, "bos", "bart", who)
    return Framing(eos, pad, encoder_prefix_ids=(bos,), encoder_suffix_ids=(eos,),
                   decoder_start_ids=(int(roles.get("decoder_start", eos)), bos))


FRAMINGS = {"causal": causal, "t5": t5, "bart": bart}


def frame(kind: str, roles: Mapping[str, int], who: str = "") -> Framing:
    """The Framing of kind `kind` (FRAMINGS) from `roles`; ValueError names a missing role."""
    if kind not in FRAMINGS:
        raise ValueError(f"unknown prompt framing {kind!r}; choose one of {sorted(FRAMINGS)}")
    return FRAMINGS[kind](roles, who)


def vocabulary_framing(encoder_decoder: bool, tokenizer_kind: str, roles: Mapping[str, int],
                       who: str = "") -> Framing:
    """The framing of a model known only by its shape and vocabulary (an LM task's model
    factory, a Keras-saved LM): encoder-decoders with SentencePiece frame as T5, with
    byte-level BPE as BART; decoder-only models as causal."""
    if not encoder_decoder:
        return causal(roles, who)
    return t5(roles, who) if tokenizer_kind == "sentencepiece" else bart(roles, who)


def config_roles(config: Mapping) -> Dict[str, int]:
    """The roles of a Hugging Face config.json: eos, pad (EOS when the config has none, as
    GPT-2's), bos and decoder_start where it names them."""
    eos = int(config["eos_token_id"])
    names = {"pad": "pad_token_id", "bos": "bos_token_id",
             "decoder_start": "decoder_start_token_id"}
    roles = {role: int(config[key]) for role, key in names.items()
             if config.get(key) is not None}
    return {"eos": eos, "pad": eos, **roles}
