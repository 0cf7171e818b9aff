"""The attention page and attention rollout (garden.bertology.attention_view; issue 36 item 8).

rollout: identity attention keeps every token its own; a two-layer example equals the formula
of Abnar & Zuidema written out here; rows are distributions. The page: self-contained (no
script, style, image or font fetched), its embedded JSON is the attention it was given, tokens
that look like markup ("</script>", "<b>") stay text, and its script parses (`node --check`,
where Node.js is installed; where Chromium is, the page is rendered headless and its table has
a cell per query and key). Through `garden.analyze attention` on a converted tiny transformers
BERT, the page holds transformers' own attention probabilities of the sentence (1e-4) and
index.html links it.
"""

from __future__ import annotations

import html.parser
import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from garden.bertology import attention_view


def _softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_rollout_of_identity_attention_is_the_identity():
    attention = np.broadcast_to(np.eye(5), (3, 2, 5, 5))
    np.testing.assert_allclose(attention_view.rollout(attention), np.broadcast_to(np.eye(5),
                                                                                  (3, 5, 5)))


def test_rollout_multiplies_the_residual_mixed_layers():
    rng = np.random.default_rng(0)
    attention = _softmax_rows(rng.normal(size=(2, 3, 4, 4)))
    mixed = [0.5 * attention[l].mean(0) + 0.5 * np.eye(4) for l in range(2)]
    mixed = [m / m.sum(-1, keepdims=True) for m in mixed]
    got = attention_view.rollout(attention)
    np.testing.assert_allclose(got[0], mixed[0], atol=1e-12)
    np.testing.assert_allclose(got[1], mixed[1] @ mixed[0], atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12)


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self._script = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script = dict(attrs)
            self.scripts.append((self._script, ""))

    def handle_data(self, data):
        if self._script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag):
        if tag == "script":
            self._script = None


def _read(path):
    page = _Page()
    text = open(path, encoding="utf-8").read()
    page.feed(text)
    return page, text


def test_the_page_is_self_contained_and_carries_its_data(tmp_path):
    tokens = ["[CLS]", "</script>", "<b>x</b>", "café", "[SEP]"]
    attention = _softmax_rows(np.random.default_rng(1).normal(size=(2, 3, 5, 5)))
    path = attention_view.write_view(str(tmp_path / "view.html"), tokens, attention,
                                     "a <title> & more")
    page, text = _read(path)
    assert not any(tag in ("link", "img", "iframe") for tag, _ in page.tags)
    assert not any("src" in attrs or "href" in attrs for _, attrs in page.tags)
    assert not re.search(r"https?://", text)
    data = json.loads(next(body for attrs, body in page.scripts
                           if attrs.get("id") == attention_view.DATA_ID))
    assert data["tokens"] == tokens
    np.testing.assert_allclose(data["attention"], attention, atol=5e-5)
    np.testing.assert_allclose(data["rollout"], attention_view.rollout(attention), atol=5e-5)
    selects = [attrs.get("id") for tag, attrs in page.tags if tag == "select"]
    assert selects == ["layer", "head"]
    code = next(body for attrs, body in page.scripts if not attrs)
    if shutil.which("node"):  # the script parses
        script = tmp_path / "view.js"
        script.write_text(code)
        proc = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:  # rendered headless: a header row and a row per query, a cell per key
        proc = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                               "--disable-background-networking", "--dump-dom",
                               f"file://{path}"], capture_output=True, text=True, timeout=120)
        assert proc.stdout.count("<td") == 25, proc.stderr[-2000:]
    with pytest.raises(ValueError, match="expected \\[layers, heads, 4, 4\\]"):
        attention_view.write_view(str(tmp_path / "bad.html"), tokens[:4], attention, "t")


def test_analyze_attention_writes_the_page_of_transformers_attention(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from convert_testing import write_hf_bert

    from garden import analyze, convert, runs

    hf = write_hf_bert(str(tmp_path / "hf"), seed=7)
    out = tmp_path / "converted"
    assert convert.main(["--source=huggingface", "--model=bert", f"--input={hf['dir']}",
                         f"--output={out}"]) == 0
    text = tmp_path / "s.txt"
    text.write_text("the movie was good .\nthe plot was dull , very dull !\n")
    report = tmp_path / "report"
    assert analyze.main(["attention", f"--model={out}", f"--input={text}", "--sentence=1",
                         f"--output={report}", "--max_seq_length=16"]) == 0
    page, _ = _read(report / "attention_view.html")
    data = json.loads(next(body for attrs, body in page.scripts
                           if attrs.get("id") == attention_view.DATA_ID))
    inputs = runs.open(str(out), who="test").packer(16).encode_numpy(
        ["the plot was dull , very dull !"])
    n = int(inputs["padding_mask"].sum())
    hf["model"].set_attn_implementation("eager")  # sdpa gives no attention probabilities
    with torch.no_grad():
        theirs = hf["model"](input_ids=torch.tensor(inputs["token_ids"][:, :n], dtype=torch.long),
                             output_attentions=True).attentions
    expected = np.stack([a[0].numpy() for a in theirs])  # [L, H, n, n]
    assert len(data["tokens"]) == n and data["tokens"][0] == "[CLS]"
    np.testing.assert_allclose(data["attention"], expected, atol=1e-4)
    result = json.loads((report / "attention.json").read_text())
    np.testing.assert_allclose(result["rollout_last_layer"],
                               attention_view.rollout(expected)[-1], atol=1e-4)
    assert 'href="attention_view.html"' in (report / "index.html").read_text()
