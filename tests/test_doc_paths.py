"""The documentation cites only repository paths that exist (issue 23 item 5).

README.md, BUILD.md, benchmarks/README.md and every docs/*.md are read line by line; a
path-like citation whose first component is a top-level directory of the repository
(`garden/tasks/pretraining/bart.py`, `data_pipelines/objectives/`,
`configs/finetune/question_answering_tiny.gin`, `tests/...`) must name a file or directory of the
tree. Skipped: templates and globs (a path holding `<`, `*`, `{` or `...`), and paths under
demo_out/ or .venv/ (outputs and the environment, never tracked). A failure names file:line and the
missing path.

tests/test_docs_and_installs.py checks the .md files cited anywhere and the doc sections cited
by number or title; this file checks the other paths the documents cite.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
from typing import Callable, Iterable, List

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = ("README.md", "BUILD.md", "benchmarks/README.md")
IGNORED_PREFIXES = ("demo_out/", ".venv/")
SKIP_MARKS = ("<", "*", "{", "...")


def tracked_files() -> List[str]:
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    assert proc.returncode == 0, f"git ls-files failed in {ROOT}: {proc.stderr.decode()[-500:]}"
    return [p for p in proc.stdout.decode().split("\0") if p]


def top_level_directories(files: Iterable[str]) -> List[str]:
    """The first components of the tracked paths that are directories (garden, tests, .ci)."""
    return sorted({f.split("/", 1)[0] for f in files if "/" in f})


def documents(files: Iterable[str]) -> List[str]:
    files = set(files)
    docs = sorted(f for f in files if f.startswith("docs/") and f.endswith(".md"))
    return [d for d in DOCUMENTS if d in files or (ROOT / d).exists()] + docs


def path_pattern(top_dirs: Iterable[str]) -> re.Pattern:
    """A citation: one of `top_dirs`, a slash, then path characters (and the template marks,
    so that a template is seen whole and skipped), not preceded by a path character (so
    /tmp/garden/x, ../tests/x and gs://b/configs/x are not citations of the repository)."""
    names = "|".join(re.escape(d) for d in sorted(top_dirs, key=len, reverse=True))
    return re.compile(r"(?<![\w./~$-])((?:%s)/[\w./<>*{}+=:@-]*)" % names)


def cited_paths(line: str, pattern: re.Pattern) -> List[str]:
    """The repository paths `line` cites, normalised (line numbers and pytest node ids cut,
    trailing punctuation dropped); templates, globs and ignored prefixes left out."""
    paths = []
    for raw in pattern.findall(line):
        if any(mark in raw for mark in SKIP_MARKS):
            continue
        path = raw.split(":", 1)[0].rstrip(".,;=+@-")
        if not path or path.startswith(IGNORED_PREFIXES):
            continue
        paths.append(path)
    return paths


def missing_citations(docs: Iterable[str], read: Callable[[str], List[str]],
                      exists: Callable[[str], bool], top_dirs: Iterable[str]) -> List[str]:
    """'file:line: cites PATH, which does not exist' for every dead citation."""
    pattern = path_pattern(top_dirs)
    problems = []
    for doc in docs:
        for number, line in enumerate(read(doc), 1):
            for path in cited_paths(line, pattern):
                if not exists(path):
                    problems.append(f"{doc}:{number}: cites {path}, which does not exist in the "
                                    f"repository: {line.strip()}")
    return problems


def _read(doc: str) -> List[str]:
    return (ROOT / doc).read_text(encoding="utf-8").splitlines()


def _exists(path: str) -> bool:
    return (ROOT / path).exists()


def test_documents_cite_only_paths_that_exist():
    files = tracked_files()
    docs = documents(files)
    assert {"README.md", "BUILD.md", "benchmarks/README.md", "docs/design.md",
            "docs/objectives.md", "docs/tasks.md"} <= set(docs)
    problems = missing_citations(docs, _read, _exists, top_level_directories(files))
    assert not problems, "\n".join(problems)


def test_a_dead_citation_is_flagged_with_file_and_line():
    # Negative control: the checker flags a fake document citing a file that is not there,
    # and passes the citations around it that exist or are templates, globs or outputs.
    top = top_level_directories(tracked_files())
    fake = {"FAKE_DOC": [
        "Code: `garden/models/bart/conversion.py`, `data_pipelines/objectives/` and",
        "`garden/tasks/bert_pretraining.py` (gone), `configs/*.gin`, `garden/models/<family>/`,",
        "`tests/...`, demo_out/vocab.txt, /tmp/garden/nothing.py, see",
        "tests/models/test_bart.py::test_import_is_strict and garden/convert.py:45.",
        "(configs/finetune/no_such_file.gin)",
    ]}
    problems = missing_citations(fake, fake.__getitem__, _exists, top)
    assert problems == [
        "FAKE_DOC:2: cites garden/tasks/bert_pretraining.py, which does not exist in the "
        "repository: " + fake["FAKE_DOC"][1],
        "FAKE_DOC:5: cites configs/finetune/no_such_file.gin, which does not exist in the "
        "repository: (configs/finetune/no_such_file.gin)",
    ]


def test_citation_forms():
    pattern = path_pattern(["garden", "tests", ".ci"])
    assert cited_paths("see garden/serving/export.py.", pattern) == ["garden/serving/export.py"]
    assert cited_paths("(`tests/garden/`, .ci/run)", pattern) == ["tests/garden/", ".ci/run"]
    assert cited_paths("../garden/x.py $OUT/garden/y gs://b/tests/z my_garden/w", pattern) == []
    assert cited_paths("garden/models/{bert,albert}/ tests/*.py", pattern) == []
