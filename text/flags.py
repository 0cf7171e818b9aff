"""Command-line flags shared by the project's entry points, and flags generated from an
options dataclass so that a setting's default and help are written once.

* ``add_bool``: a boolean flag as absl spells them (--name, --name=true|false, --noname); used
  by the data jobs, ``garden.serve``, ``garden.fewshot`` and the corpus tools.
* ``option(default, help, choices=...)``: a dataclass field that is also the flag ``--<field>``
  (its help in the field's metadata); ``fixed(default)``: a field that is never a flag. A field
  made with neither is a flag the job itself defines under the same name (``max_seq_length``):
  the dataclass default becomes that flag's default for this options class.
* ``add_option_flags(group, cls)`` adds the flags of ``cls``; ``options_from_args(cls, args)``
  builds ``cls`` from the parsed flags; ``job_defaults(cls)`` gives the defaults it sets on the
  job's own flags.

Help texts are argparse's: ``%(default)s`` is replaced by the default and a literal percent
sign is written ``%%``.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Dict, Optional, Sequence

_HELP = "help"
_CHOICES = "choices"
_FIXED = "fixed"


def parse_bool(text: str) -> bool:
    """"true"/"false" (and 1/0, yes/no, t/f, y/n) as a bool; argparse's error otherwise."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "y", "t"):
        return True
    if value in ("0", "false", "no", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (true/false), got {text!r}")


def add_bool(parser, name: str, default: bool, help: str) -> None:
    """--name, --name=true|false and --noname, as absl flags allow."""
    parser.add_argument(f"--{name}", type=parse_bool, nargs="?", const=True, default=default,
                        help=f"{help} (default {default}; --{name}, --{name}=true|false, --no{name})")
    parser.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def option(default: Any, help: str, *, choices: Optional[Sequence] = None) -> Any:
    """A dataclass field that is also the flag --<field name> with this default and help."""
    return dataclasses.field(default=default, metadata={_HELP: help, _CHOICES: choices})


def fixed(default: Any) -> Any:
    """A dataclass field that no flag sets (e.g. ERNIE's whole-word masking, always on)."""
    return dataclasses.field(default=default, metadata={_FIXED: True})


def _flag_type(hint) -> type:
    """int for ``int`` and ``Optional[int]``, and so on."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


def add_option_flags(group, options_class) -> None:
    """The flags of ``options_class``'s ``option`` fields, in field order."""
    hints = typing.get_type_hints(options_class)
    for f in dataclasses.fields(options_class):
        if _HELP not in f.metadata:
            continue
        kind = _flag_type(hints[f.name])
        if kind is bool:
            add_bool(group, f.name, f.default, f.metadata[_HELP])
        else:
            group.add_argument(f"--{f.name}", type=kind, choices=f.metadata[_CHOICES], default=f.default,
                               help=f.metadata[_HELP])


def options_from_args(options_class, args: argparse.Namespace):
    """``options_class`` from the parsed flags: every field from the flag of its name except
    ``fixed`` ones. A field without its flag is an AttributeError, not a silent default; the
    class's own checks (``__post_init__``) raise ValueError for a bad combination."""
    return options_class(**{f.name: getattr(args, f.name) for f in dataclasses.fields(options_class)
                            if not f.metadata.get(_FIXED)})


def job_defaults(options_class) -> Dict[str, Any]:
    """The defaults ``options_class`` sets on the job's own flags: its fields that are neither
    ``option`` nor ``fixed`` (e.g. {"max_seq_length": 512})."""
    return {f.name: f.default for f in dataclasses.fields(options_class)
            if _HELP not in f.metadata and not f.metadata.get(_FIXED)
            and f.default is not dataclasses.MISSING}
