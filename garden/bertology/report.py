"""The report directory garden.analyze writes: each analysis's figures as <analysis>.json (its
plots beside it) and index.html, one page showing every analysis written there so far."""

from __future__ import annotations

import html
import json
import os
from typing import Dict, Sequence

INDEX = "index.html"


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
        sections.append(f"<h2>{name}</h2><p>{html.escape(result.get('model', ''))}</p>"
                        f'{images}<p><a href="{name}.json">{name}.json</a></p>')
    index = os.path.join(out_dir, INDEX)
    with open(index, "w") as f:
        f.write("<!doctype html><meta charset='utf-8'><title>garden.analyze</title>"
                "<h1>garden.analyze</h1>" + "".join(sections))
    return index
