"""One sentence's attention as a page to look at, and attention rollout.

rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers"): each layer's
attention averaged over its heads, the residual connection added as the identity
(0.5 A + 0.5 I, rows renormalised), multiplied through the layers from the first: row q of
layer l's rollout says how much of position q's representation after layer l comes from each
input token. The first layer's rollout is its own 0.5 A + 0.5 I.

write_view: a self-contained HTML page (no file, script or font fetched: it opens offline and
from a report directory anywhere) with the sentence's tokens, a layer and a head selector (each
head, the heads' mean, and the rollout up to that layer) and the query x key matrix drawn as a
table whose cells are shaded by weight (the weight in each cell's title). The data sits in the
page as JSON (<script type="application/json" id="attention-data">): {"tokens": [...],
"attention": [L][H][T][T], "rollout": [L][T][T]}, values rounded to 4 decimals.
"""

from __future__ import annotations

import html
import json
from typing import Sequence

import numpy as np

DATA_ID = "attention-data"

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-collapse: collapse; font-size: 11px; }}
td, th {{ border: 1px solid #ddd; min-width: 1.6em; height: 1.6em; text-align: center; }}
th {{ font-weight: normal; white-space: nowrap; }}
th.key {{ writing-mode: vertical-rl; }}
</style></head>
<body>
<h1>{title}</h1>
<p>Rows: queries, columns: keys. <label>Layer <select id="layer"></select></label>
<label>Head <select id="head"></select></label> <span id="what"></span></p>
<table id="matrix"></table>
<script type="application/json" id="{data_id}">{data}</script>
<script>
(function () {{
  var data = JSON.parse(document.getElementById("{data_id}").textContent);
  var layer = document.getElementById("layer"), head = document.getElementById("head");
  var layers = data.attention.length, heads = data.attention[0].length;
  function option(select, value, text) {{
    var o = document.createElement("option"); o.value = value; o.textContent = text;
    select.appendChild(o);
  }}
  for (var l = 0; l < layers; l++) option(layer, l, String(l + 1));
  for (var h = 0; h < heads; h++) option(head, h, "head " + (h + 1));
  option(head, "mean", "mean of the heads"); option(head, "rollout", "rollout");
  function matrix() {{
    var l = Number(layer.value), h = head.value;
    if (h === "rollout") return data.rollout[l];
    if (h !== "mean") return data.attention[l][Number(h)];
    return data.attention[l][0].map(function (row, q) {{
      return row.map(function (_, k) {{
        var s = 0; for (var i = 0; i < heads; i++) s += data.attention[l][i][q][k];
        return s / heads;
      }});
    }});
  }}
  function draw() {{
    var m = matrix(), table = document.getElementById("matrix");
    table.textContent = "";
    var header = table.insertRow(); header.appendChild(document.createElement("th"));
    data.tokens.forEach(function (t) {{
      var th = document.createElement("th"); th.className = "key"; th.textContent = t;
      header.appendChild(th);
    }});
    m.forEach(function (row, q) {{
      var tr = table.insertRow(), th = document.createElement("th");
      th.textContent = data.tokens[q]; tr.appendChild(th);
      row.forEach(function (w, k) {{
        var td = tr.insertCell();
        td.style.background = "rgba(31, 119, 180, " + w + ")";
        td.title = data.tokens[q] + " -> " + data.tokens[k] + ": " + w.toFixed(4);
      }});
    }});
    document.getElementById("what").textContent =
      "layer " + (Number(layer.value) + 1) + ", " + head.options[head.selectedIndex].text;
  }}
  layer.onchange = draw; head.onchange = draw; draw();
}})();
</script>
</body></html>
"""


def rollout(attention: np.ndarray) -> np.ndarray:
    """Attention rollout of one sentence: attention [L, H, T, T] (its real tokens only) ->
    [L, T, T], layer l's rows the flow from the input tokens through layers 0..l."""
    attention = np.asarray(attention, np.float64)
    size = attention.shape[-1]
    flow, layers = np.eye(size), []
    for layer in attention:
        mixed = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(size)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        flow = mixed @ flow
        layers.append(flow)
    return np.stack(layers)


def write_view(path: str, tokens: Sequence[str], attention: np.ndarray, title: str) -> str:
    """The page of one sentence (module docstring) at `path`: attention [L, H, T, T] over its
    len(tokens) real tokens; returns `path`."""
    attention = np.asarray(attention, np.float64)
    n = len(tokens)
    if attention.ndim != 4 or attention.shape[-2:] != (n, n):
        raise ValueError(f"attention of shape {attention.shape} for {n} tokens: expected "
                         f"[layers, heads, {n}, {n}]")
    data = {"tokens": list(tokens), "attention": np.round(attention, 4).tolist(),
            "rollout": np.round(rollout(attention), 4).tolist()}
    # "</" cannot close the script element early: JSON allows "<\/" for "</".
    text = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_PAGE.format(title=html.escape(title), data_id=DATA_ID, data=text))
    return path
