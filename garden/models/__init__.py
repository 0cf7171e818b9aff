"""The model families, one folder each, and the pieces they share.

A family folder's `__init__.py` holds its record `SPEC` (garden.models.family.FamilySpec);
`families()` finds the folders, `spec(name)` reads one. No other table lists the families.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Tuple


@functools.lru_cache(maxsize=None)
def families() -> Tuple["FamilySpec", ...]:  # noqa: F821 - garden.models.family
    """Every family's FamilySpec, by folder name: each package under garden/models is a family
    and holds SPEC (a folder without one is an error naming it)."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not hasattr(module, "SPEC"):
            raise ImportError(f"garden/models/{info.name}/__init__.py defines no SPEC (the "
                              f"family's garden.models.family.FamilySpec)")
        found.append(module.SPEC)
    return tuple(found)


def spec(name: str) -> "FamilySpec":  # noqa: F821
    """The FamilySpec of family `name`, or ValueError listing the families."""
    for s in families():
        if s.name == name:
            return s
    raise ValueError(f"unknown model family {name!r}; choose one of "
                     f"{sorted(s.name for s in families())}")
