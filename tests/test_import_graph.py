"""The import graph of garden/, data_pipelines/ and text/ points one way (docs/design.md, "Layers
point one way"), and has no loop.

Every module is given a layer by LAYERS below: the rule that names it exactly, else the longest
`prefix.*` rule that covers it; a module no rule names fails the test (a new top-level module or
package is placed in the table on purpose, not by default). An import may name a module of its
own layer or of a layer below it (LAYERS' `over` chain); anything else fails with the file and
line of the import, and so does every import loop. Imports are read with `ast`, both those at the
top of a module and those inside functions (most imports here are deferred, and a deferred import
is an arrow all the same); `importlib.import_module` strings are not imports and are not read.

The rules, bottom first (each layer may import itself and the layers it is `over`, down the chain):

    text            text/ (tokenizers, vocabularies, casing, tag schemes, TFRecord features and
                    framing, fine-tuning readers, the oneDNN switch): imports neither package
    data_pipelines  the Beam jobs, over text: never imports garden
    base            over text: the garden package itself (its __init__ sets the oneDNN switch),
                    losses, metrics, optimization, distribute, data (the TFRecord input), plots
    layers          garden.layers, over base
    models          garden.models (backbones, heads, the GenerativeLM contract and its samplers
                    in models.decoding, the backbones' switches in models.instrument), over layers
    serving         garden.serving: the exporter and a ServingModule per task kind, over models
    tasks           garden.tasks and garden.pretrained (the converted directories tasks start
                    from), over serving
    training        garden.training: the pieces train() composes (step, checkpoints, progress,
                    report, setup, the magnitude pruning hook), over tasks
    trainer         garden.train, over training (garden.runs reads a run's operative config
                    through train's gin signature, so the trainer sits below the tools)
    runs            garden.runs and garden.generate_dir: the model directories the tools open
                    and write, over trainer
    analysis        garden.bertology, over runs
    server          garden.server (garden.serve's TF Serving re-implementation), over analysis
    tools           the command-line modules: garden.{analyze, convert, curves, demo, export,
                    export_features, extract_features, fewshot, generate, serve,
                    to_huggingface}; over server,
                    and no tool imports another

garden reaches data_pipelines by no import at all: it launches a Beam job as a command
(`python -m data_pipelines.make_pretrain`), as garden.demo does.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

from testing import REPO_ROOT

PACKAGES = ("text", "data_pipelines", "garden")

# (layer, the layer it is over, module rules), bottom first (module docstring).
LAYERS: Tuple[Tuple[str, Optional[str], Tuple[str, ...]], ...] = (
    ("text", None, ("text", "text.*")),
    ("data_pipelines", "text", ("data_pipelines", "data_pipelines.*")),
    ("base", "text", ("garden", "garden.data", "garden.distribute", "garden.losses",
                      "garden.metrics", "garden.metrics.*", "garden.optimization",
                      "garden.plots")),
    ("layers", "base", ("garden.layers", "garden.layers.*")),
    ("models", "layers", ("garden.models", "garden.models.*")),
    ("serving", "models", ("garden.serving", "garden.serving.*")),
    ("tasks", "serving", ("garden.tasks", "garden.tasks.*", "garden.pretrained")),
    ("training", "tasks", ("garden.training", "garden.training.*")),
    ("trainer", "training", ("garden.train",)),
    ("runs", "trainer", ("garden.runs", "garden.runs.*", "garden.generate_dir")),
    ("analysis", "runs", ("garden.bertology", "garden.bertology.*")),
    ("server", "analysis", ("garden.server", "garden.server.*")),
    ("tools", "server", ("garden.analyze", "garden.convert", "garden.curves", "garden.demo",
                         "garden.export", "garden.export_features", "garden.extract_features",
                         "garden.fewshot", "garden.generate", "garden.serve",
                         "garden.to_huggingface")),
)
# Layers whose modules import none of each other: each tool stands alone.
ISOLATED = {"tools"}


class Arrow(NamedTuple):
    source: str   # the importing module
    target: str   # the imported module (the deepest module of the tree the import names)
    path: str     # the importing file, relative to the repository
    line: int


def modules(root: str = REPO_ROOT) -> Dict[str, str]:
    """{dotted module name: file path relative to `root`} of every .py file of PACKAGES."""
    found = {}
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(root, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.relpath(os.path.join(folder, name), root)
                    parts = path[:-len(".py")].split(os.sep)
                    if parts[-1] == "__init__":
                        parts.pop()
                    found[".".join(parts)] = path
    return found


def _known(name: str, known: Dict[str, str]) -> Optional[str]:
    """The deepest module of the tree that `name` is or lies in (a.b.C -> a.b), or None."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@functools.lru_cache(maxsize=None)
def arrows(root: str = REPO_ROOT) -> Tuple[Arrow, ...]:
    """Every import (module level or deferred) from one module of the tree to another."""
    known = modules(root)
    out = []
    for module, path in known.items():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [_known(a.name, known) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..y import z
                    parts = package.split(".")
                    parts = parts[:len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                # `from a import b` names the module a.b when there is one, else a name in a.
                targets = [_known(f"{base}.{a.name}", known) if f"{base}.{a.name}" in known
                           else _known(base, known) for a in node.names]
            else:
                continue
            out.extend(Arrow(module, t, path, node.lineno)
                       for t in sorted(set(targets) - {None, module}))
    return tuple(sorted(out, key=lambda a: (a.path, a.line, a.target)))


def layer_of(module: str) -> Optional[str]:
    """The layer of `module` (module docstring), or None when no rule names it."""
    best, best_rule = None, ""
    for layer, _, rules in LAYERS:
        for rule in rules:
            if rule == module:
                return layer
            if rule.endswith(".*") and fnmatch.fnmatchcase(module, rule) and \
                    len(rule) > len(best_rule):
                best, best_rule = layer, rule
    return best


def reachable(layer: str) -> List[str]:
    """`layer` and every layer under it, down the `over` chain."""
    over = {name: below for name, below, _ in LAYERS}
    chain = []
    while layer is not None:
        chain.append(layer)
        layer = over[layer]
    return chain


def wrong_way(all_arrows: Tuple[Arrow, ...]) -> List[str]:
    """One line per import that points up or across, naming its file and line."""
    problems = []
    for a in all_arrows:
        source, target = layer_of(a.source), layer_of(a.target)
        if target not in reachable(source):
            problems.append(f"{a.path}:{a.line}: {a.source} ({source}) imports {a.target} "
                            f"({target}): {source} may import only "
                            f"{' / '.join(reachable(source))}")
        elif source == target and source in ISOLATED:
            problems.append(f"{a.path}:{a.line}: {a.source} imports {a.target}: both are "
                            f"{source}, which import none of each other (move what they share "
                            f"to a lower layer)")
    return problems


def loops(all_arrows: Tuple[Arrow, ...]) -> List[str]:
    """One line per import loop (strongly connected set of modules), with the file and line of
    each import inside it."""
    graph: Dict[str, List[str]] = {}
    for a in all_arrows:
        graph.setdefault(a.source, []).append(a.target)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack = set()
    components = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [f"import loop {' <-> '.join(sorted(c))}: " + "; ".join(
        f"{a.path}:{a.line} imports {a.target}" for a in all_arrows
        if a.source in c and a.target in c) for c in components]


def test_every_module_has_a_layer():
    unplaced = [f"{path}: {module} has no layer: add it to LAYERS in {__file__}"
                for module, path in modules().items() if layer_of(module) is None]
    assert not unplaced, "\n".join(unplaced)


def test_no_import_points_up_or_across():
    problems = wrong_way(arrows())
    assert not problems, "\n".join(problems)


def test_no_import_loop():
    problems = loops(arrows())
    assert not problems, "\n".join(problems)


def test_a_wrong_way_import_is_named_with_its_file_and_line(tmp_path):
    """The check itself: a model importing the trainer, a metric importing a task and a
    data_pipelines module importing garden are each refused by file and line, and a loop of
    two modules is found."""
    files = {
        "garden/__init__.py": "",
        "garden/train.py": "import garden.models.bert\n",
        "garden/models/__init__.py": "",
        "garden/models/bert.py": "import numpy\n\n\ndef f():\n    from garden import train\n",
        "garden/metrics/__init__.py": "from garden.tasks import base\n",
        "garden/tasks/__init__.py": "",
        "garden/tasks/base.py": "from ..metrics import classification\n",
        "garden/metrics/classification.py": "",
        "data_pipelines/__init__.py": "",
        "data_pipelines/jobs.py": "from garden.metrics.classification import x\n",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    found = arrows(str(tmp_path))
    assert wrong_way(found) == [
        "data_pipelines/jobs.py:1: data_pipelines.jobs (data_pipelines) imports "
        "garden.metrics.classification (base): data_pipelines may import only data_pipelines / "
        "text",
        "garden/metrics/__init__.py:1: garden.metrics (base) imports garden.tasks.base (tasks): "
        "base may import only base / text",
        "garden/models/bert.py:5: garden.models.bert (models) imports garden.train (trainer): "
        "models may import only models / layers / base / text"]
    assert loops(found) == ["import loop garden.models.bert <-> garden.train: "
                            "garden/models/bert.py:5 imports garden.train; "
                            "garden/train.py:1 imports garden.models.bert"]
