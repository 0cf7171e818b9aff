"""Writes requirements-workers.txt: the runtime stack for Dataflow (or any Beam) workers.

    python tools/worker_requirements.py > requirements-workers.txt

Workers need setup.cfg's install_requires and what those pull in, nothing from the `test` or
`bench` extras (torch, transformers, tf-models-official and opencv would add gigabytes and
minutes to every worker's start). The closure is walked over the installed distributions'
metadata (importlib.metadata), so it runs offline; every package is pinned to its
constraints.txt version, so workers get the tested stack. Run it in a venv installed with
`pip install -c constraints.txt -e .` (any extras may be installed too: they are not followed).
tests/test_docs_and_installs.py fails when the committed file differs from this output.
"""
import configparser
import pathlib
import sys
from importlib import metadata
from typing import Dict, Iterable, List, Set

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).resolve().parent.parent

# `pip freeze` leaves these out of constraints.txt (they belong to the installer), so they are
# not pinned here either; pip still installs them where a dependency asks (tensorflow needs
# setuptools).
INSTALLER_PACKAGES = {"pip", "setuptools", "wheel", "distribute"}

HEADER = """\
# Runtime-only requirements for Dataflow / Beam workers (BUILD.md, "Running the data
# pipelines on Dataflow"): setup.cfg's install_requires and their dependencies, each pinned
# to its constraints.txt version; no test or bench extra (no torch, transformers,
# tf-models-official, opencv). Generated: python tools/worker_requirements.py > requirements-workers.txt
"""


def install_requires(setup_cfg: pathlib.Path = ROOT / "setup.cfg") -> List[Requirement]:
    """setup.cfg's [options] install_requires as parsed requirements (comments dropped)."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg)
    lines = parser["options"]["install_requires"].splitlines()
    return [Requirement(line) for line in (l.split("#")[0].strip() for l in lines) if line]


def extras_requires(setup_cfg: pathlib.Path = ROOT / "setup.cfg") -> Dict[str, List[Requirement]]:
    """setup.cfg's [options.extras_require]: {extra: [requirements]}."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg)
    section = parser["options.extras_require"]
    return {extra: [Requirement(l.strip()) for l in section[extra].splitlines() if l.strip()]
            for extra in section}


def constraints(path: pathlib.Path = ROOT / "constraints.txt") -> Dict[str, str]:
    """constraints.txt as {canonical name: exact version}; refuses a line that is not name==version."""
    pins = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{path}:{number}: {line!r} is not NAME==VERSION; "
                             "regenerate the file with pip freeze (BUILD.md)")
        pins[canonicalize_name(name)] = version.strip()
    return pins


def closure(roots: Iterable[Requirement]) -> Set[str]:
    """Canonical names of `roots` and every installed dependency they need on this platform
    (markers evaluated for this interpreter, extras followed only where a requirement names them)."""
    env = default_environment()
    seen: Dict[str, Set[str]] = {}
    stack = [(req, "") for req in roots]
    while stack:
        req, parent_extra = stack.pop()
        if req.marker and not req.marker.evaluate({**env, "extra": parent_extra}):
            continue
        name = canonicalize_name(req.name)
        extras = set(req.extras)
        if name in seen and extras <= seen[name]:
            continue
        first = name not in seen
        seen.setdefault(name, set()).update(extras)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{req.name} is not installed: run this in a venv made with "
                             "`pip install -c constraints.txt -e .` (BUILD.md)")
        for line in requires:
            dep = Requirement(line)
            if dep.marker is None:
                if first:
                    stack.append((dep, ""))
                continue
            # A requirement guarded by an extra is followed once per extra we asked for.
            for extra in extras | {""}:
                stack.append((dep, extra))
    return set(seen)


def render(setup_cfg: pathlib.Path = ROOT / "setup.cfg",
           constraints_txt: pathlib.Path = ROOT / "constraints.txt") -> str:
    roots = install_requires(setup_cfg)
    pins = constraints(constraints_txt)
    extras_of = {canonicalize_name(r.name): sorted(r.extras) for r in roots}
    lines = []
    for name in sorted(closure(roots) - INSTALLER_PACKAGES):
        if name not in pins:
            raise SystemExit(f"{constraints_txt}: no pin for {name}, a runtime dependency; "
                             "regenerate constraints.txt (BUILD.md)")
        extras = f"[{','.join(extras_of[name])}]" if extras_of.get(name) else ""
        lines.append(f"{name}{extras}=={pins[name]}")
    return HEADER + "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
