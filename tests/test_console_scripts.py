"""Console scripts beside `python -m` (issue 35 item 3): every tool with a main() has one,
named garden-<tool> (the data jobs garden-make-<job>), and each resolves to that main.

The scripts exist once the package is installed (`pip install -e .`); the installed entry points
are read with importlib.metadata, so a setup.cfg edit without a reinstall fails here too.
"""

from __future__ import annotations

import ast
import configparser
import os
import pathlib
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DIST = "bertology-garden"
# Tools with a main() that get no console script, and why.
NOT_SCRIPTS = {
    "text.wordpiece": "maintainers' regeneration of text/wordpiece_tables.json.gz, not a user tool",
}


def declared() -> dict:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser["options.entry_points"]["console_scripts"].splitlines()
    return dict((k.strip(), v.strip()) for k, _, v in
                (l.partition("=") for l in lines if l.strip() and not l.strip().startswith("#")))


def installed() -> dict:
    return {ep.name: ep for ep in metadata.distribution(DIST).entry_points
            if ep.group == "console_scripts"}


def tools_with_main() -> set:
    """Dotted modules under garden/ and data_pipelines/ (and text/) that define main() and run
    it under `if __name__ == "__main__"` (python -m MODULE)."""
    found = set()
    for package in ("garden", "data_pipelines", "text"):
        for path in (ROOT / package).rglob("*.py"):
            source = path.read_text(encoding="utf-8")
            if "__main__" not in source:
                continue
            tree = ast.parse(source)
            if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                found.add(module)
    return found


def test_installed_scripts_are_the_declared_ones():
    want = declared()
    have = {name: ep.value for name, ep in installed().items()}
    assert have == want, ("the installed console scripts differ from setup.cfg: rerun "
                          "`pip install -c constraints.txt --no-deps -e .`", have, want)


def test_every_python_m_tool_has_a_script_named_after_it():
    targets = {value.split(":")[0]: name for name, value in declared().items()}
    missing = sorted(tools_with_main() - set(targets) - set(NOT_SCRIPTS))
    assert not missing, f"tools with a main() but no console script in setup.cfg: {missing}"
    for module, name in targets.items():
        assert module in tools_with_main(), f"{name} -> {module}, which has no main() run as __main__"
        tool = module.rsplit(".", 1)[-1] if module.rsplit(".", 1)[-1] != "__main__" else module.split(".")[-2]
        assert name.startswith("garden-") and name.endswith(tool.replace("_", "-")), (name, module)
    for name, value in declared().items():
        assert value.endswith(":main"), (name, value)


@pytest.mark.parametrize("name", sorted(declared()))
def test_each_script_resolves_to_a_callable(name):
    ep = installed()[name]
    target = ep.load()
    assert callable(target) and target.__name__ == "main", (name, target)


def script(name: str) -> str:
    path = pathlib.Path(sys.executable).parent / name
    assert path.exists(), f"{path} is missing: rerun `pip install -c constraints.txt --no-deps -e .`"
    return str(path)


@pytest.mark.parametrize("name,expected", [
    ("garden-train", "--config"),
    ("garden-make-pretrain", "--objective"),
])
def test_script_help_runs(name, expected, tmp_path):
    # From outside the repository: the script finds the installed package, not the cwd.
    proc = subprocess.run([script(name), "--help"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage:") and expected in proc.stdout, proc.stdout[:500]
