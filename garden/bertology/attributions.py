"""Integrated gradients per token of a fine-tuned classifier (Sundararajan et al. 2017,
"Axiomatic Attribution for Deep Networks"): what `garden.analyze attributions` reports.

F is the target class's logit (not its probability: the logit is what the classifier's dense
layer computes, and a saturated softmax would leave little to attribute). The input x is the
word-piece vectors of a sentence, the rows of the backbone's word table (before the position
and segment embeddings are added, which stay as in the input, and before the LayerNorm). The
baseline x' is the pad piece's vector at every position except the special tokens ([CLS],
[SEP], <s>, </s>, <sep>, <cls>, <|endoftext|>: the packer's cls, sep and pad ids), which keep
their own vectors, so that the baseline is still a well-formed packed sentence with the words
taken out.

    attribution_i = sum over the embedding width of
                    (x_i - x'_i) * mean over alpha of dF/dx_i at x' + alpha (x - x')

The path integral is taken by the trapezoid rule over `steps` intervals (steps + 1 points,
alpha = 0, 1/steps, ..., 1; error O(1/steps^2)), whose end points are F(x') and F(x).
Completeness: sum_i attribution_i = F(x) - F(x') up to that error; each sentence reports its
gap (the paper asks for steps enough to bring it within 5%; it suggests 20 to 300).

The classifier on word vectors reuses the backbone's own graph, cut where the word vectors
enter (`embeddings_node`): either its embeddings layer, called again with `token_vectors`
(garden.layers.embeddings.TransformerEmbeddings: BERT, RoBERTa, ALBERT, ELECTRA, DistilBERT,
SpanBERT, ERNIE; GPT's GPTEmbedding, whose one table also holds the positions), or, where the
word table is a layer of its own in the graph (GPT-2, GPT-3, XLNet; CoVe, CVT and ULMFiT's
embedding tables), that table's lookup of the token ids, whose output simply becomes the
vectors input. The layers after the cut are the
backbone's graph from there on (a Keras functional model cut at an intermediate tensor), then
the run's own head (garden.bertology.scoring.head_features and its classifier dense: the pooled
output, or the last real token for GPT's and GPT-2's LastTokenClassifier; XLNet's pooled output
is its last real token, <cls>).

Baselines by layout (garden.serving.text): "bert" keeps [CLS] [SEP]; "roberta" <s> </s>;
"xlnet" keeps <sep> <cls> and puts <pad> at the words, so the pooled <cls> still closes a
well-formed sentence; "gpt2" has no start token and its separator <|endoftext|> is also its
pad (when the vocabulary has no <pad>), so its baseline is every word replaced by
<|endoftext|>, positions kept: the last-token classifier then reads <|endoftext|>, the piece
GPT-2 saw between documents, at the last word's position (with a <pad> in the vocabulary the
words become <pad> and a pair's <|endoftext|> keeps its row).

ELMo, T5 and BART are refused by name, with the reason in REFUSED.

write_view: a self-contained HTML page per sentence (nothing fetched), tokens shaded by their
attribution (blue: for the target, red: against), its data as JSON in
<script type="application/json" id="attributions-data">.
"""

from __future__ import annotations

import html
import inspect
import json
import os
from typing import Callable, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

DATA_ID = "attributions-data"
CHUNK = 32  # interpolation points per forward and backward pass


def integrated_gradients(function: Callable, x: np.ndarray, baseline: np.ndarray,
                         steps: int) -> Dict[str, np.ndarray]:
    """Integrated gradients of `function` (float [S, T, E] -> float [S], differentiable by
    tf.GradientTape) at x [T, E] from `baseline` [T, E], by the trapezoid rule over `steps`
    intervals. Returns attributions [T] (summed over E), the per-element attributions [T, E],
    F(x), F(x') and the completeness gap sum(attributions) - (F(x) - F(x'))."""
    if steps < 1:
        raise ValueError(f"steps={steps}: integrated gradients needs at least 1 step")
    x, baseline = np.asarray(x, np.float32), np.asarray(baseline, np.float32)
    alphas = np.linspace(0.0, 1.0, steps + 1, dtype=np.float32)
    weights = np.full(steps + 1, 1.0 / steps)
    weights[[0, -1]] /= 2  # trapezoid: the end points count half
    total, values = np.zeros(x.shape, np.float64), []
    for start in range(0, steps + 1, CHUNK):
        a = alphas[start:start + CHUNK]
        path = tf.constant(baseline[None] + a[:, None, None] * (x - baseline)[None])
        with tf.GradientTape() as tape:
            tape.watch(path)
            out = function(path)
        grads = tape.gradient(out, path).numpy().astype(np.float64)
        total += np.tensordot(weights[start:start + CHUNK], grads, axes=1)
        values.extend(np.asarray(out, np.float64).tolist())
    per_element = (x - baseline).astype(np.float64) * total
    scores = per_element.sum(axis=-1)
    f_x, f_baseline = values[-1], values[0]
    return {"scores": scores, "per_element": per_element, "f_x": f_x,
            "f_baseline": f_baseline, "gap": float(scores.sum() - (f_x - f_baseline))}


# Families where integrated gradients over word vectors has no meaning here: the reason each.
REFUSED = {
    "elmo": "ELMo builds its token vectors from characters by a CNN: it has no word table whose "
            "rows integrated gradients could move along",
    "t5": "T5 classifies by generating the label's text: there is no classifier logit to "
          "attribute, only the decoder's next-piece scores",
    "bart": "BART classifies by generating the label's text here: there is no classifier "
            "logit to attribute, only the decoder's next-piece scores",
}


def _takes_vectors(layer) -> bool:
    call = getattr(layer, "call", None)
    return call is not None and "token_vectors" in inspect.signature(call).parameters


def embeddings_node(backbone: keras.Model, what: str = "attributions"):
    """The node of the backbone's graph where the word-piece vectors enter (module docstring):
    the call of its embeddings layer that takes `token_vectors`, or else its word table's lookup
    of the token ids; ValueError naming the family when it refuses (REFUSED) or has neither."""
    from garden.models import instrument

    family = instrument.family_name(backbone)
    if family.split()[0] in REFUSED:
        raise ValueError(f"{what}: the {family} backbone is refused: "
                         f"{REFUSED[family.split()[0]]}")
    layer = getattr(backbone, "embeddings", None)
    if not _takes_vectors(layer):
        # ELMo's property raises (no table): getattr's default covers it.
        layer = getattr(backbone, "token_embedding", None)
        if not isinstance(layer, keras.layers.Embedding):
            raise ValueError(f"{what}: the {family} backbone ({type(backbone).__name__}) "
                             f"has neither an embeddings layer that takes token_vectors nor a "
                             f"word table called on its token_ids, where integrated gradients "
                             f"put their word vectors")
    token_ids = backbone.input.get("token_ids") if isinstance(backbone.input, dict) else None
    # The call on this backbone's own token_ids input (ELECTRA's generator and discriminator
    # may share the layer, a tied softmax calls the table in reverse, and vectors_classifier
    # calls the embeddings layer again).
    nodes = [node for node in layer._inbound_nodes
             if token_ids is not None and node.arguments.args
             and node.arguments.args[0] is token_ids
             and "token_vectors" not in node.arguments.kwargs]
    if len(nodes) != 1:
        raise ValueError(f"{what}: {backbone.name} calls its {layer.name} layer on its "
                         f"token_ids {len(nodes)} times; integrated gradients needs the one call")
    return nodes[0]


def _token_rows(layer):
    """[V, E] (a tensor or variable) of the embeddings node's layer: the rows it reads for each
    token id."""
    if hasattr(layer, "token_rows"):  # GPT: tokens, special tokens, then the position rows
        return layer.token_rows()
    # TransformerEmbeddings' word table, or the node's layer is the table itself
    return getattr(layer, "token_embedding", layer).embeddings


def word_table(backbone: keras.Model) -> np.ndarray:
    """[V, E]: the rows the vectors model reads for each token id (x = table[token_ids])."""
    return keras.ops.convert_to_numpy(_token_rows(embeddings_node(backbone).operation))


def vectors_classifier(backbone: keras.Model, task_model, classifier) -> keras.Model:
    """A Keras model: the backbone's inputs plus `token_vectors` float [B, T, E] -> the class
    logits [B, C] of the run's classifier, with the word table's rows replaced by the vectors
    (at the table's rows it is the run's own classifier)."""
    from garden.bertology.scoring import head_features

    node = embeddings_node(backbone)
    inputs = dict(backbone.input)
    names = list(inputs)
    vectors = keras.Input((None, _token_rows(node.operation).shape[1]), name="token_vectors")
    if _takes_vectors(node.operation):
        embedded = node.operation(*node.arguments.args, **{**node.arguments.kwargs,
                                                            "token_vectors": vectors})
    else:  # the node is the word table's lookup: its output is the vectors themselves
        embedded = vectors
    # The backbone's graph after the node (Keras cuts the functional graph at an intermediate
    # tensor given as an input), fed with the new embeddings.
    after = keras.Model([node.outputs[0], *[inputs[n] for n in names]], backbone.output)
    outputs = after([embedded, *[inputs[n] for n in names]])
    logits = classifier(head_features(task_model, outputs, inputs["padding_mask"],
                                      "attributions"))
    return keras.Model({**inputs, "token_vectors": vectors}, logits)


def baseline_vectors(token_ids: np.ndarray, table: np.ndarray, keep: Sequence[int],
                     pad_id: int) -> np.ndarray:
    """x' [T, E] of one sentence's ids [T]: the pad piece's row, except at the ids of `keep`
    (the special tokens), which keep their own rows."""
    kept = np.isin(token_ids, list(keep))
    return np.where(kept[:, None], table[token_ids], table[pad_id][None, :])


def attribute(opened, sentences: List[str], steps: int, target: str = "predicted") -> Dict:
    """Integrated gradients per token of each sentence for the fine-tuned classification run
    `opened` (garden.analyze.Opened). target: "predicted" (each sentence's predicted label) or
    one of the run's labels. ValueError (one line) when the run is no fine-tuned sentence
    classifier, its family takes no word vectors, or `target` is not one of its labels."""
    labels = opened.labels
    if opened.classifier is None or not labels:
        raise ValueError(f"attributions needs a fine-tuned sentence-classification run as "
                         f"--model; {opened.path} is {opened.description}, which has no "
                         f"classifier")
    if target != "predicted" and target not in labels:
        raise ValueError(f"--target={target} is not one of the run's labels {list(labels)} "
                         f"(or 'predicted')")
    model = vectors_classifier(opened.backbone, opened.task_model, opened.classifier)
    table = word_table(opened.backbone)
    packer = opened.packer
    keep = [i for i in (packer.cls_id, packer.sep_id, packer.pad_id) if i is not None]
    batch = packer.encode_numpy(sentences)
    results = []
    for row, sentence in enumerate(sentences):
        n = int(batch["padding_mask"][row].sum())
        one = {k: v[row:row + 1, :n] for k, v in batch.items() if k in model.input}
        ids = one["token_ids"][0]
        x = table[ids]
        logits = np.asarray(model({**one, "token_vectors": x[None]}, training=False))[0]
        exp = np.exp(logits - logits.max())
        probs = exp / exp.sum()
        predicted = int(logits.argmax())
        index = predicted if target == "predicted" else list(labels).index(target)

        def f(path, one=one, index=index):
            tiled = {k: tf.repeat(v, tf.shape(path)[0], axis=0) for k, v in one.items()}
            return model({**tiled, "token_vectors": path}, training=False)[:, index]

        ig = integrated_gradients(f, x, baseline_vectors(ids, table, keep, packer.pad_id),
                                  steps)
        difference = ig["f_x"] - ig["f_baseline"]
        results.append({
            "sentence": sentence, "tokens": [opened.tokens[int(t)] for t in ids],
            "scores": np.round(ig["scores"], 6).tolist(), "target": labels[index],
            "predicted": labels[predicted], "probability": round(float(probs[predicted]), 6),
            "target_probability": round(float(probs[index]), 6),
            "f_x": ig["f_x"], "f_baseline": ig["f_baseline"], "sum": float(ig["scores"].sum()),
            "gap": ig["gap"],
            "relative_gap": abs(ig["gap"]) / abs(difference) if difference else None})
    return {"steps": steps, "target": target, "function": "the target class's logit",
            "baseline": "the pad piece's word vector at every position but the special "
                        "tokens' (kept); positions and segments as in the input",
            "rule": "trapezoid", "labels": list(labels), "sentences": results}


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
.tokens span {{ display: inline-block; padding: 0.2em 0.3em; margin: 0.1em;
                border-radius: 0.2em; font-size: 1.2em; }}
</style></head>
<body>
<h1>{title}</h1>
<p>{summary}</p>
<p class="tokens">{tokens}</p>
<p>Blue: for the target, red: against; the shade is |attribution| / the largest |attribution|
of the sentence (each token's value in its title).</p>
<script type="application/json" id="{data_id}">{data}</script>
</body></html>
"""


def write_view(path: str, sentence: Dict, title: str) -> str:
    """The page of one sentence of attribute()'s result (module docstring) at `path`."""
    scores = np.asarray(sentence["scores"], np.float64)
    if len(scores) != len(sentence["tokens"]):
        raise ValueError(f"{len(scores)} scores for {len(sentence['tokens'])} tokens")
    largest = float(np.abs(scores).max()) or 1.0
    spans = []
    for token, score in zip(sentence["tokens"], scores):
        color = "31, 119, 180" if score >= 0 else "214, 39, 40"
        spans.append(f'<span style="background: rgba({color}, {abs(score) / largest:.3f})" '
                     f'title="{score:+.4f}">{html.escape(token)}</span>')
    summary = (f"target {sentence['target']}; predicted {sentence['predicted']} "
               f"(p = {sentence['probability']:.3f}); F(x) - F(x') = "
               f"{sentence['f_x'] - sentence['f_baseline']:.4f}, sum of the attributions "
               f"{sentence['sum']:.4f}")
    data = {k: sentence[k] for k in ("tokens", "scores", "target", "predicted", "f_x",
                                     "f_baseline", "gap")}
    # "</" cannot close the script element early: JSON allows "<\/" for "</".
    text = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_PAGE.format(title=html.escape(title), summary=html.escape(summary),
                             tokens=" ".join(spans), data_id=DATA_ID, data=text))
    return path


def report(opened, sentences: List[str], out_dir: str, steps: int,
           target: str = "predicted", pages: Optional[int] = None) -> Dict:
    """attribute() on `sentences`, and a page per sentence (attributions_<i>.html; the first
    `pages` when given) in out_dir, created once the model has answered."""
    result = attribute(opened, sentences, steps, target)
    os.makedirs(out_dir, exist_ok=True)
    result["pages"] = [
        write_view(os.path.join(out_dir, f"attributions_{i}.html"), s,
                   f"{opened.description}: {s['sentence']}")
        for i, s in enumerate(result["sentences"][:pages])]
    return result
