"""Command-line flags shared by the project's entry points, and flags generated from an
options dataclass so that a setting's default and help are written once.

* ``add_bool``: a boolean flag, spelled as every tool of the project spells them: ``--name`` /
  ``--no-name`` (argparse's BooleanOptionalAction). The older spellings (absl's ``--noname``,
  ``--no_name``, ``--name=true|false``) are refused with a usage error that names the new one;
  ``retired`` names of the same flag (``do_lower_case`` for ``lower_case``) likewise.
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


class RetiredFlag(argparse.Action):
    """A spelling the tools no longer accept: a usage error naming the one to write."""

    def __init__(self, option_strings, dest, *, replacement: str, **kwargs):
        super().__init__(option_strings, argparse.SUPPRESS, nargs="?", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is no longer accepted: write {self.replacement}")


def retired_spellings(name: str) -> Dict[str, str]:
    """{old spelling: new one} of the boolean flag ``name``: absl's --noname and --no_name."""
    return {f"--no{name}": f"--no-{name}", f"--no_{name}": f"--no-{name}"}


def add_bool(parser, name: str, default: Optional[bool], help: str, *,
             dest: Optional[str] = None, retired: Sequence[str] = ()) -> None:
    """``--name`` / ``--no-name`` (default ``default``; None: neither given, for flags whose
    absence means "infer it"). ``retired``: former names of the same flag, refused naming
    this one (``--do_lower_case`` -> ``--lower_case``)."""
    # --name=false is refused by argparse itself ("argument --name/--no-name: ignored explicit
    # argument 'false'"), which names both spellings.
    # BooleanOptionalAction adds --no-name itself (given it too, it would also add --no-no-name)
    parser.add_argument(f"--{name}", dest=dest or name, action=argparse.BooleanOptionalAction,
                        default=default, help=help)  # argparse adds "(default: ...)"
    old = retired_spellings(name)
    for former in retired:
        old.update({f"--{former}": f"--{name}", f"--no-{former}": f"--no-{name}",
                    **{k: f"--no-{name}" for k in retired_spellings(former)}})
    for spelling, replacement in old.items():
        parser.add_argument(spelling, action=RetiredFlag, replacement=replacement)


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
