"""Every third-party module that garden/ and data_pipelines/ import is declared (issue 23 item 1).

A runtime install (`pip install -e .`, what `make demo` does) holds install_requires only; the
test and bench extras arrive with `make test`. A module imported by garden/ or data_pipelines/
that only an extra brings (scipy, scikit-learn and seqeval did, through the bench extra) passes
every test and breaks the README's first command. So:

- each import in garden/ and data_pipelines/ (any depth, lazy ones included) is mapped to the
  distribution that installs it (read from the installed distributions' file lists);
- that distribution must be named in setup.cfg's install_requires, or be one of OPTIONAL below:
  an extra's package, which must then be imported lazily (inside a function) and be named in
  that extra, so that the runtime install never needs it (the bench extra's peers; the
  dataflow extra's google-auth, issue 35 item 5);
- psutil and the Google Cloud packages are not runtime requirements (issue 35 item 5);
- every install_requires package has an exact pin in constraints.txt.

The failure message names the file, the line and the module.
"""

from __future__ import annotations

import ast
import configparser
import functools
import importlib.metadata
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("text", "garden", "data_pipelines")

# Modules that only an extra installs: module -> (extra, distribution). Imported lazily by the
# code that needs them (checkpoint conversion from torch files and Model Garden), never at
# import time of a garden module.
OPTIONAL = {
    "torch": ("bench", "torch"),
    "transformers": ("bench", "transformers"),
    "official": ("bench", "tf-models-official"),
    # tf-models-official's Keras 2; not a direct requirement of the extra, so named by it
    "tf_keras": ("bench", "tf-models-official"),
    # the gs:// credentials check (data_pipelines/gcs.py), after gcs.require_dataflow_extra
    "google.auth": ("dataflow", "google-auth"),
}
# Namespace packages: the distribution is found from the first two components of the name.
NAMESPACES = {"google"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    return normalize(re.split(r"[\s\[<>=~!;]", line.strip(), maxsplit=1)[0])


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def requirement_lines(text: str) -> list:
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def declared() -> set:
    return {requirement_name(line) for line in
            requirement_lines(setup_cfg()["options"]["install_requires"])}


def extra(name: str) -> set:
    return {requirement_name(line) for line in
            requirement_lines(setup_cfg()["options.extras_require"][name])}


@functools.lru_cache(maxsize=None)
def module_owners() -> dict:
    """Importable top-level name (two components for namespace packages) -> distributions
    whose installed files hold it."""
    owners = {}
    for dist in importlib.metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        for file in dist.files or ():
            parts = file.parts
            if not parts or parts[0].endswith((".dist-info", ".egg-info", ".data")) or \
                    parts[0] in ("..", "bin"):
                continue
            top = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
            owners.setdefault(top, set()).add(name)
            if top in NAMESPACES and len(parts) > 1:
                sub = parts[1][:-3] if parts[1].endswith(".py") else parts[1]
                owners.setdefault(f"{top}.{sub}", set()).add(name)
    return owners


def imports(path: pathlib.Path):
    """(line, dotted module name, lazy) for each absolute import in a Python file; lazy means
    inside a function body."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            lazy = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                     ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((child.lineno, a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.extend((child.lineno, child.module, in_function) for _ in (0,))
            visit(child, lazy)

    visit(tree, False)
    return found


def distribution_key(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in NAMESPACES and len(parts) > 1 else parts[0]


def problems_in(files, root: pathlib.Path, declared_names: set, extras: dict) -> list:
    """file:line: module -> what is wrong, for every third-party import not declared
    (``extras``: extra name -> the distributions it names)."""
    owners = module_owners()
    problems = []
    for path in files:
        where = path.relative_to(root).as_posix()
        for line, module, lazy in imports(path):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
                continue
            optional = OPTIONAL.get(distribution_key(module)) or OPTIONAL.get(top)
            if optional:
                extra_name, dist = optional
                if not lazy:
                    problems.append(f"{where}:{line}: imports {module} at module level, but "
                                    f"it is optional ({extra_name} extra): import it inside the "
                                    f"function that needs it")
                elif dist not in extras.get(extra_name, ()):
                    problems.append(f"{where}:{line}: {module} is listed as optional, but its "
                                    f"distribution {dist} is not in the {extra_name} extra")
                continue
            key = distribution_key(module)
            dists = owners.get(key) or owners.get(top)
            if not dists:
                problems.append(f"{where}:{line}: imports {module}, which no installed "
                                f"distribution provides: declare it in setup.cfg "
                                f"install_requires (and pin it in constraints.txt)")
                continue
            if not dists & declared_names:
                problems.append(f"{where}:{line}: imports {module} (distribution "
                                f"{' / '.join(sorted(dists))}), which setup.cfg install_requires "
                                f"does not declare: a runtime install (make demo) lacks it")
    return problems


def source_files(root: pathlib.Path):
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))


def test_every_import_of_garden_and_data_pipelines_is_declared():
    problems = problems_in(source_files(ROOT), ROOT, declared(),
                           {name: extra(name) for name in ("bench", "dataflow")})
    assert not problems, "\n".join(problems)


def test_the_check_names_an_undeclared_module_and_a_module_level_optional_import(tmp_path):
    # Negative control: scipy and seqeval imported but not declared (the state issue 23 found),
    # torch imported at module level, a module no distribution provides, and google.auth
    # imported lazily while the dataflow extra lacks google-auth.
    package = tmp_path / "garden"
    package.mkdir()
    (package / "metrics.py").write_text(
        "import os\nimport numpy as np\nfrom scipy import stats\nimport torch\n\n"
        "def f():\n    import seqeval.metrics\n    import no_such_module_anywhere\n"
        "    from google.protobuf import text_format\n    import google.auth\n")
    problems = problems_in([package / "metrics.py"], tmp_path,
                           declared_names={"numpy", "protobuf"},
                           extras={"bench": {"torch"}, "dataflow": {"apache-beam"}})
    assert [p.split(": ", 1)[0] for p in problems] == [
        "garden/metrics.py:3", "garden/metrics.py:4", "garden/metrics.py:7",
        "garden/metrics.py:8", "garden/metrics.py:10"], problems
    assert "dataflow extra" in problems[4]
    assert "scipy" in problems[0] and "seqeval" in problems[2]
    assert "module level" in problems[1]


@pytest.mark.parametrize("module", sorted(OPTIONAL))
def test_optional_modules_belong_to_an_extra(module):
    extra_name, dist = OPTIONAL[module]
    assert dist in extra(extra_name), f"{module}: {dist} is not in the {extra_name} extra"


def test_every_requirement_is_pinned_in_constraints():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            pins[normalize(name)] = version.strip()
    missing = sorted(declared() - set(pins))
    assert not missing, f"install_requires packages without a constraints.txt pin: {missing}"


def test_runtime_install_leaves_benchmarks_and_google_cloud_to_extras():
    # issue 35 item 5: psutil only for benchmarks/common.py; the 21 Google Cloud packages of
    # apache-beam[gcp] only for gs:// and Dataflow.
    runtime = requirement_lines(setup_cfg()["options"]["install_requires"])
    assert "psutil" not in declared() and "psutil" in extra("bench")
    assert not [line for line in runtime if "[gcp]" in line or line.startswith(
        ("google-cloud", "google-auth", "google-api"))], runtime
    assert "apache-beam" in declared()
    dataflow = requirement_lines(setup_cfg()["options.extras_require"]["dataflow"])
    assert any(line.startswith("apache-beam[gcp]") for line in dataflow), dataflow
    # The test extra brings the dataflow extra's packages, so the gs:// and --dry_run tests run.
    assert extra("dataflow") <= extra("test")
