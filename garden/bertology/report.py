"""What garden.analyze reads and writes: the sentences of --input, and the report directory:
each analysis's figures as <analysis>.json (its plots and pages beside it) and index.html, one
page showing every analysis written there so far."""

from __future__ import annotations

import glob
import html
import json
import os
from typing import Dict, List, Sequence

INDEX = "index.html"


def read_sentences(pattern: str, limit: int) -> List[str]:
    """The first `limit` non-blank lines of the files --input matches, in file order;
    ValueError naming the file when none matches, one is not UTF-8 text, or all are blank."""
    files = sorted(f for f in glob.glob(pattern) if os.path.isfile(f))  # not a directory
    if not files:
        raise ValueError(f"--input={pattern} matches no file")
    sentences = []
    for name in files:
        with open(name, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    raise ValueError(f"{name}:{number} is not UTF-8 text (--input: text "
                                     f"files, one sentence per line)") from None
                if line:
                    sentences.append(line)
                    if len(sentences) == limit:
                        return sentences
    if not sentences:
        where = (files[0] if len(files) == 1
                 else f"the {len(files)} files --input={pattern} matches")
        raise ValueError(f"no sentence in {where} (--input: text files, one sentence per "
                         f"line; blank lines are skipped)")
    return sentences


def write_result(out_dir: str, name: str, result: Dict) -> str:
    """OUT_DIR/<name>.json (OUT_DIR created); its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return path


def write_index(out_dir: str, analyses: Sequence[str]) -> str:
    """OUT_DIR/index.html: every analysis of `analyses` written there, its plots and JSON."""
    sections = []
    for name in analyses:
        path = os.path.join(out_dir, f"{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            result = json.load(f)
        images = "".join(f'<p><img src="{html.escape(os.path.basename(p))}" '
                         f'style="max-width:100%"></p>' for p in result.get("plots", []))
        images += "".join(f'<p><a href="{html.escape(os.path.basename(p))}">'
                          f'{html.escape(os.path.basename(p))}</a></p>'
                          for p in result.get("pages", []))
        sections.append(f"<h2>{name}</h2><p>{html.escape(result.get('model', ''))}</p>"
                        f'{images}<p><a href="{name}.json">{name}.json</a></p>')
    index = os.path.join(out_dir, INDEX)
    with open(index, "w") as f:
        f.write("<!doctype html><meta charset='utf-8'><title>garden.analyze</title>"
                "<h1>garden.analyze</h1>" + "".join(sections))
    return index
