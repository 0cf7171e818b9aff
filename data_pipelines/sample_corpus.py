"""A small real-English corpus from what ships with Python: `python -m data_pipelines.sample_corpus`.

Nothing is downloaded and no third-party text is committed: the text is the Python
installation's own documentation, i.e. the language-reference topics of ``pydoc_data.topics``
and the docstrings of standard-library modules (module, public classes, their methods, and
public functions). One document = one pydoc topic or one module's docstrings.

Output (``--output``): ``corpus-0000K-of-0000N.txt``, one sentence per line, a blank line
between documents; documents are dealt round-robin to the files in a fixed order (sorted topic
and module names), so the output is deterministic for a given Python installation.

With ``--task_output``: a labelled sentence classification task from the same sources,
``train.tsv`` / ``dev.tsv`` with header ``text_a<TAB>label``; label ``reference`` for sentences
of the language-reference topics, ``library`` for sentences of module docstrings. Rows go to
dev when sha256(sentence) % 10 == 0, to train otherwise (deterministic), balanced per label.

Sentence splitting (documented, simple): docstrings are dedented (inspect.cleandoc) and cut into
paragraphs at blank lines; code is dropped (lines starting with ``>>>``/``...``, indented lines,
and reST ``::`` / grammar ``::=`` lines); each paragraph's lines are joined and split after
``.``, ``!`` or ``?`` followed by whitespace and an upper-case letter, digit, quote or bracket.
Sentences of 20..400 characters that are mostly letters are kept.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import inspect
import io
import os
import pkgutil
import re
import sys
import warnings
from typing import Dict, Iterable, List, Tuple

# Modules never imported: side effects (browser, printing, GUI, sound), tests, or IDE code.
_NEVER_IMPORT = {
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "tests",
    "lib2to3", "ensurepip", "venv", "pydoc_data", "__main__", "__hello__", "__phello__",
    "xxsubtype", "msilib", "winreg", "winsound", "_winapi", "msvcrt", "nturl2path",
    "webbrowser", "pty", "tty", "curses", "readline", "rlcompleter", "sre_compile",
    "sre_constants", "sre_parse", "crypt", "nis", "ossaudiodev", "spwd", "audioop", "cgi",
    "cgitb", "imghdr", "mailcap", "nntplib", "pipes", "sndhdr", "sunau", "telnetlib", "uu",
    "xdrlib", "aifc", "chunk", "asynchat", "asyncore", "smtpd", "distutils", "imp",
}
_SKIP_PARTS = {"test", "tests", "idle_test", "__main__"}

MIN_CHARS, MAX_CHARS = 20, 400
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")
_BULLET = re.compile(r"^([*-]|\d+\.) +")
_CODE_LINE = re.compile(r"^(>>>|\.\.\.|\$ |%|#)")


def split_sentences(text: str) -> List[str]:
    """Prose sentences of a docstring/topic text (see module docstring for the rules)."""
    text = inspect.cleandoc(text)
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = []
        bullet = bool(_BULLET.match(paragraph))
        for line in paragraph.split("\n"):
            if not line.strip():
                continue
            # A list item's continuation lines are indented by a few spaces; code is indented
            # by more (or follows a prompt), grammar productions contain "::=".
            continuation = bullet and lines and re.match(r"^ {1,3}\S", line)
            if (line[:1].isspace() and not continuation) or _CODE_LINE.match(line) or "::=" in line:
                continue
            lines.append(_BULLET.sub("", line.strip()))
        if not lines:
            continue
        joined = re.sub(r"\s+", " ", " ".join(lines))
        for sentence in _SENTENCE_END.split(joined):
            sentence = sentence.strip().rstrip(":")
            if _is_prose(sentence):
                out.append(sentence)
    return out


def _is_prose(sentence: str) -> bool:
    if not MIN_CHARS <= len(sentence) <= MAX_CHARS:
        return False
    letters = sum(c.isalpha() for c in sentence)
    return letters >= 0.6 * len(sentence) and len(sentence.split()) >= 4


def topic_documents() -> List[Tuple[str, List[str]]]:
    """(name, sentences) of every pydoc language-reference topic, sorted by name."""
    from pydoc_data import topics

    docs = []
    for name in sorted(topics.topics):
        sentences = split_sentences(topics.topics[name])
        if sentences:
            docs.append((f"topic:{name}", sentences))
    return docs


def _module_names() -> List[str]:
    names = set()
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in _NEVER_IMPORT:
            continue
        names.add(name)
        spec = importlib.util.find_spec(name) if _safe_find(name) else None
        if spec is not None and spec.submodule_search_locations:
            for info in pkgutil.iter_modules(spec.submodule_search_locations):
                if info.name.startswith("_") or info.name in _SKIP_PARTS or info.name in _NEVER_IMPORT:
                    continue
                names.add(f"{name}.{info.name}")
    return sorted(names)


def _safe_find(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _docstrings(module) -> Iterable[str]:
    """Module docstring, then public classes (with their methods) and functions defined in it."""
    if module.__doc__:
        yield module.__doc__
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            if obj.__doc__:
                yield obj.__doc__
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_"):
                    continue
                if (inspect.isfunction(member) or inspect.ismethoddescriptor(member)) and member.__doc__:
                    yield member.__doc__
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            if obj.__doc__:
                yield obj.__doc__


def module_documents() -> List[Tuple[str, List[str]]]:
    """(name, sentences) per standard-library module that imports quietly, sorted by name."""
    docs = []
    for name in _module_names():
        try:
            with warnings.catch_warnings(), _quiet():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - any failure (even SystemExit) just skips the module
            continue
        sentences = []
        seen = set()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated attributes warn when touched
            for doc in _docstrings(module):
                for s in split_sentences(doc):
                    if s not in seen:  # inherited/shared docstrings repeat
                        seen.add(s)
                        sentences.append(s)
        if sentences:
            docs.append((f"module:{name}", sentences))
    return docs


class _quiet:
    """Swallows anything a module prints while being imported."""

    def __enter__(self):
        self._saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()

    def __exit__(self, *exc):
        sys.stdout, sys.stderr = self._saved
        return False


def write_corpus(docs: List[Tuple[str, List[str]]], output: str, num_files: int) -> List[str]:
    os.makedirs(output, exist_ok=True)
    parts: List[List[str]] = [[] for _ in range(num_files)]
    for i, (_, sentences) in enumerate(docs):
        parts[i % num_files].append("\n".join(sentences) + "\n")
    paths = []
    for k, texts in enumerate(parts):
        path = os.path.join(output, f"corpus-{k:05d}-of-{num_files:05d}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(texts))
        paths.append(path)
    return paths


def one_line(text: str) -> str:
    """The text on one line, TSV-safe: tabs, newlines and runs of spaces become one space."""
    return re.sub(r"\s+", " ", text.replace("\t", " ")).strip()


def task_rows(topic_docs, module_docs, max_train_per_label: int = 2000,
              max_dev_per_label: int = 300) -> Dict[str, List[Tuple[str, str]]]:
    """Balanced, deterministic train/dev rows (text, label); sentences seen in both sources dropped."""
    by_label = {"reference": {one_line(s) for _, ss in topic_docs for s in ss},
                "library": {one_line(s) for _, ss in module_docs for s in ss}}
    both = by_label["reference"] & by_label["library"]
    rows = {"train": [], "dev": []}
    for label in ("reference", "library"):
        keyed = sorted((hashlib.sha256(s.encode("utf-8")).hexdigest(), s) for s in by_label[label] - both)
        dev = [(s, label) for h, s in keyed if int(h, 16) % 10 == 0][:max_dev_per_label]
        train = [(s, label) for h, s in keyed if int(h, 16) % 10 != 0][:max_train_per_label]
        rows["dev"] += dev
        rows["train"] += train
    for split in rows:  # interleave labels in a fixed pseudo-random order
        rows[split].sort(key=lambda r: hashlib.sha256(("row" + r[0]).encode("utf-8")).hexdigest())
    return rows


def write_task(rows, output: str) -> List[str]:
    os.makedirs(output, exist_ok=True)
    paths = []
    for split in ("train", "dev"):
        path = os.path.join(output, f"{split}.tsv")
        with open(path, "w", encoding="utf-8") as f:
            f.write("text_a\tlabel\n")
            for text, label in rows[split]:
                f.write(f"{text}\t{label}\n")
        paths.append(path)
    return paths


@contextlib.contextmanager
def _writing(flag: str, path: str):
    """One line naming the flag when its directory cannot be written (e.g. it names a file)."""
    try:
        yield
    except OSError as e:
        raise SystemExit(f"error: {flag}={path}: cannot write there ({e.strerror}: "
                         f"{e.filename})") from None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m data_pipelines.sample_corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--output", required=True, help="directory for corpus-*-of-*.txt")
    p.add_argument("--task_output", default=None, help="directory for train.tsv / dev.tsv (optional)")
    p.add_argument("--num_files", type=int, default=4)
    args = p.parse_args(argv)
    if args.num_files < 1:
        p.error("--num_files must be >= 1")

    topics = topic_documents()
    modules = module_documents()
    docs = topics + modules
    with _writing("--output", args.output):
        paths = write_corpus(docs, args.output, args.num_files)
    n_sent = sum(len(s) for _, s in docs)
    n_bytes = sum(os.path.getsize(x) for x in paths)
    print(f"corpus: {len(paths)} files in {args.output}, {len(docs)} documents "
          f"({len(topics)} pydoc topics, {len(modules)} modules), {n_sent} sentences, {n_bytes} bytes")
    if args.task_output:
        rows = task_rows(topics, modules)
        with _writing("--task_output", args.task_output):
            tpaths = write_task(rows, args.task_output)
        counts = {k: len(v) for k, v in rows.items()}
        print(f"task: {tpaths[0]} ({counts['train']} rows), {tpaths[1]} ({counts['dev']} rows); "
              f"labels reference/library")


if __name__ == "__main__":
    main()
