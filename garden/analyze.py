"""`python -m garden.analyze ANALYSIS --model=DIR --input=TEXT_GLOB --output=REPORT_DIR`: see
inside an encoder of the garden or a released checkpoint (garden.bertology does the work).

    python -m garden.analyze attention --model=OUT --input='corpus/*.txt' --output=report/
    python -m garden.analyze identifiability --model=OUT --input='corpus/*.txt' --output=report/
    python -m garden.analyze heads --model=FINETUNED_RUN --task_data=dev.tsv --output=report/
    python -m garden.analyze contextuality --model=OUT --model=RUN --input='corpus/*.txt' \
        --output=report/
    python -m garden.analyze prune --model=FINETUNED_RUN --task_data=dev.tsv --output=report/ \
        --pruned_output=pruned/
    python -m garden.analyze probe --model=OUT --probe_train=train.txt --probe_dev=dev.txt \
        --output=report/
    python -m garden.analyze wsd --model=OUT [--senses=senses.jsonl] --output=report/
    python -m garden.analyze perplexity --model=RUN_OR_OUT --input=held_out.txt --output=report/
    python -m garden.analyze fill_mask --model=RUN_OR_OUT --input=masked.txt [--top_k=5] \
        --output=report/
    python -m garden.analyze neighbours --model=RUN_OR_OUT --input=corpus.txt [--query=TEXT] \
        [--top_k=5] --output=report/
    python -m garden.analyze attributions --model=FINETUNED_RUN --input=sentences.txt \
        [--steps=50] [--target=predicted|LABEL] --output=report/

--model is a garden.convert output directory (a released checkpoint: Hugging Face, TF1, Model
Garden) or a garden.train run directory (pretraining or fine-tuning); `heads`, `prune` and
`attributions` need a fine-tuned sentence-classification run (its classifier scores the heads,
or is attributed). --input: text files, one sentence per line (blank lines skipped);
--max_sentences of them, in file order. The files probe and wsd read:
docs/bertology-formats.md. Families: the encoders, XLNet (its content stream), GPT, GPT-2
and GPT-3-style (causal: each query and word over what it sees, as the reports state; a
banded layer's query sees its band), ELMo (layer 0 its character CNN; no attention, so
attention, heads and prune are refused), T5 and BART one stack at a time (--stack; the
decoder reads the text, causal); the table of what runs on which family: docs/bertology.md.

Analyses (each writes <analysis>.json with its figures, PNG plots, and REPORT_DIR/index.html
showing every analysis written there so far):
  attention        per layer and head, the share of attention to [CLS], [SEP], punctuation,
                   self, previous and next token, and the entropy (Clark et al. 2019); the
                   head-to-head Jensen-Shannon divergences, clustered; the maps of one sentence
                   (--sentence, default the first) as a grid of heads, and attention_view.html:
                   that sentence's page, heads, layers and attention rollout selectable.
  identifiability  effective attention next to raw attention, token identifiability per layer
                   by a linear probe, hidden token attribution of a few sentences (Brunner et
                   al. 2020).
  heads            the task's accuracy with each head, and each whole layer, disabled: zeroed
                   (head mask 0) and uniform attention (Michel et al. 2019; Kovaleva et al.),
                   and with each head kept alone in its layer (the best single head per layer).
  contextuality    self-similarity, intra-sentence similarity and maximum explainable variance
                   per layer, raw and anisotropy-adjusted (Ethayarajh 2019), for words with
                   >= --min_contexts occurrences; --model may be repeated: one line per model
                   on each plot.
  prune            head importance |dL/d xi_h| per layer and head, and iterative pruning of
                   the least important heads while the task's accuracy stays at or above
                   --prune_threshold (0.9) of the unpruned accuracy: the curve of share pruned
                   -> accuracy (Michel et al. 2019); --pruned_output=DIR writes the model
                   without the pruned heads' weights as a garden.convert directory, which
                   garden.train fine-tunes (INIT_CHECKPOINT='DIR').
  probe            a probe per layer (0: the embeddings; --probe_kind linear or mlp) on the
                   CoNLL-2003 --probe_tasks (ner, pos, chunk) of --probe_train, scored on
                   --probe_dev (or a seeded 20% of --probe_train's sentences): accuracy and
                   macro-F1 beside the majority baseline, a control task's and the
                   selectivity (Hewitt & Liang 2019), and a scalar-mix probe's layer weights.
  perplexity       how well the model predicts --input's lines (garden.bertology.perplexity):
                   a causal LM's perplexity (GPT, GPT-2, GPT-3-style: a garden.train LM run,
                   a converted or garden.generate directory; ULMFiT: its LM run), ELMo's
                   forward, backward and mean (in log space) perplexities (its biLM run),
                   else a masked LM's pseudo-perplexity (Salazar et al. 2020: each piece
                   masked in turn; a garden.train masked-LM pretraining run, or a
                   garden.convert directory whose source had pretraining heads); nats per
                   piece of the model's own tokenizer.
  fill_mask        a masked LM's --top_k pieces and probabilities at each mask token ([MASK],
                   <mask>) of --input's lines.
  neighbours       each --query's (default: each line's) --top_k nearest lines of --input by
                   the cosine of their mean-pooled embeddings (garden.bertology.neighbours).
  attributions     integrated gradients per token (Sundararajan et al. 2017) of the run's
                   classifier: the --target class's logit (default each sentence's predicted
                   label) from a baseline of [PAD] word vectors ([CLS], [SEP] kept) to the
                   sentence's word-piece vectors over --steps trapezoid intervals; per sentence
                   the tokens' scores, F(x), F(x') and the completeness gap, and a page
                   attributions_<i>.html with the tokens shaded (garden.bertology.attributions;
                   the BERT-kind encoders, GPT, GPT-2, GPT-3-style, XLNet, CoVe, CVT and
                   ULMFiT; ELMo, T5 and BART are refused with the reason).
  wsd              word sense by the nearest sense centroid per layer, beside the most
                   frequent sense: the JSON Lines examples of --senses, or without it the
                   seeded sample of garden.bertology.wsd (bank, bat, spring, plant, crane); 30%
                   of each sense's examples to test (seeded by --seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from text import onednn  # noqa: F401 - oneDNN on before TensorFlow loads

PRUNE_BATCH = 32  # examples per gradient of the head importance


@dataclasses.dataclass
class Opened:
    """An encoder opened for analysis: its backbone (weights restored), text packer, tokens by
    id, and for a fine-tuned classification run its classifier's dense layer and labels."""

    backbone: object
    packer: object
    tokens: List[str]
    description: str
    classifier: Optional[object] = None
    labels: Optional[List[str]] = None
    text_b: bool = False  # the classification task reads sentence pairs
    family: Optional[str] = None  # garden.models' family name (prune writes it)
    path: str = ""
    task_model: Optional[object] = None  # the run's classifier (its head is put back on)


def open_model(path: str, max_seq_length: int, stack: str = "") -> Opened:
    """A garden.convert directory or a garden.train run directory, opened by garden.runs (a
    run's task model is built and restored: `heads` scores with its classifier); ValueError
    naming the path when it is neither. An encoder-decoder (T5, BART) is analysed one stack
    at a time: `stack` ("encoder" when not given) as a garden.models.stack_view.StackView."""
    from garden import runs
    from garden.models import instrument, stack_view

    try:
        run = runs.open(path, [runs.CONVERTED, runs.MODEL_DIR], who="garden.analyze")
    except runs.RunError as e:
        raise ValueError(f"--model={e}") from None
    model, labels, text_b = None, None, False
    if run.kind == runs.MODEL_DIR:
        model = run.task_model()
        labels = list(getattr(run.task, "label_names", None) or []) or None
        text_b = bool(getattr(run.task, "text_b", False))
    packer = run.packer(max_seq_length)
    backbone = reading_pieces(run.backbone(max_seq_length=max_seq_length),  # sets run.family
                              packer.vocab_path)
    description = run.description
    if instrument.readout(backbone).stacks or stack:
        backbone = stack_view.view(backbone, stack or "encoder")
        description += f", its {stack or 'encoder'}"
    return Opened(backbone, packer, run.tokens(), description,
                  classifier=getattr(model, "classifier_dense", None), labels=labels,
                  task_model=model,
                  text_b=text_b, family=run.family, path=path)


def reading_pieces(backbone, vocab: str):
    """The backbone, or where it reads characters (an ELMo LM run's: char_ids in) the same
    backbone built to look each piece's characters up in `vocab` (token_ids in, as ELMo's
    fine-tuning reads them), with the same weights: the analyses feed a text packer's pieces."""
    if getattr(backbone, "input_name", None) != "char_ids":
        return backbone
    looked_up = type(backbone).from_config({**backbone.get_config(), "vocab": vocab})
    looked_up.set_weights(backbone.get_weights())
    return looked_up


def run_attention(opened: Opened, sentences: List[str], out_dir: str, sentence: int) -> Dict:
    from garden.bertology import attention, attention_view
    from garden.models import instrument

    packer = opened.packer
    batch = packer.encode_numpy(sentences)
    punctuation = attention.punctuation_ids(opened.tokens)
    causal = instrument.require_attention(opened.backbone, "attention").causal
    model = instrument.instrumented(opened.backbone, output_attentions=True)
    probs = instrument.run(model, batch)["attention_probs"]
    shares = attention.attention_shares(probs, batch["token_ids"], batch["padding_mask"],
                                        packer.cls_id, packer.sep_id, punctuation, causal)
    distances = attention.head_distances(probs, batch["padding_mask"])
    n = int(batch["padding_mask"][sentence].sum())
    tokens = [opened.tokens[int(t)] for t in batch["token_ids"][sentence, :n]]
    os.makedirs(out_dir, exist_ok=True)  # only once the model answered: no empty report
    maps = probs[:, sentence, :, :n, :n]
    plots = [attention.plot_layer_shares(shares, os.path.join(out_dir, "attention_shares.png")),
             attention.plot_head_distances(distances,
                                           os.path.join(out_dir, "attention_js.png")),
             attention.plot_attention_maps(maps, tokens,
                                           os.path.join(out_dir, "attention_maps.png"))]
    page = attention_view.write_view(os.path.join(out_dir, "attention_view.html"), tokens, maps,
                                     f"{opened.description}: {sentences[sentence]}")
    return {"shares": shares, "distances": distances, "plots": plots, "pages": [page],
            "sentence": sentences[sentence], "tokens": tokens,
            "rollout_last_layer": attention_view.rollout(maps)[-1].round(4).tolist()}


def run_identifiability(opened: Opened, sentences: List[str], out_dir: str,
                        attribution_sentences: int) -> Dict:
    from garden.bertology import attention, identifiability

    packer = opened.packer
    return identifiability.report(opened.backbone, packer.encode_numpy(sentences),
                                  packer.cls_id, packer.sep_id,
                                  attention.punctuation_ids(opened.tokens),
                                  attribution_sentences, out_dir)


def run_heads(opened: Opened, task_data: str, out_dir: str) -> Dict:
    from garden.bertology import heads

    from garden.bertology.scoring import scored_classifier

    scored = scored_classifier(opened, task_data, "heads")
    result = heads.head_ablation(scored.model, scored.batch, scored.accuracy)
    result["metric"], result["examples"] = "accuracy", len(scored.gold)
    os.makedirs(out_dir, exist_ok=True)
    result["plots"] = [heads.plot_head_ablation(result, os.path.join(out_dir, "heads.png"))]
    return result


def run_prune(opened: Opened, args: argparse.Namespace) -> Dict:
    """Michel et al.'s iterative pruning scored by the run's classifier on --task_data (the
    curve starts at the unpruned accuracy); --pruned_output: the smaller model written."""
    import keras

    from garden.bertology import prune
    from garden.models import instrument

    from garden.bertology.scoring import scored_classifier

    if args.pruned_output:  # refused before the scoring, not after it
        prune.check_removable(opened.backbone)
    scored = scored_classifier(opened, args.task_data, "prune")
    batches = [{k: v[i:i + PRUNE_BATCH] for k, v in scored.batch.items()}
               for i in range(0, len(scored.gold), PRUNE_BATCH)]

    def loss(batch, logits):
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
            batch["label"], logits, from_logits=True))

    given = {"threshold": args.prune_threshold, "step": args.prune_step}
    result = prune.prune_heads(
        scored.model, batches, loss,
        lambda mask: scored.accuracy(instrument.run(scored.model, scored.batch, mask)),
        **{k: v for k, v in given.items() if v is not None})  # else prune_heads' defaults
    result.update(metric="accuracy", examples=len(scored.gold), task_data=args.task_data)
    os.makedirs(args.output, exist_ok=True)
    result["plots"] = [prune.plot_pruning_curve(result, os.path.join(args.output,
                                                                     "prune.png"))]
    if args.pruned_output:
        result["pruned_output"] = write_pruned(opened, result, args.pruned_output)
    return result


def write_pruned(opened: Opened, result: Dict, output: str) -> Dict:
    """The backbone without the heads result["head_mask"] prunes, as a garden.convert
    directory at `output` (its convert_info.json records the pruning)."""
    from garden.bertology import prune

    smaller = prune.pruned_backbone(opened.backbone, np.asarray(result["head_mask"]))
    info = {k: result[k] for k in ("metric", "baseline", "threshold", "step", "curve",
                                   "head_mask", "task_data")}
    prune.write_pruned(output, smaller, opened.family, opened.packer.vocab_path,
                       opened.packer.lower_case, pruned_from=opened.path, info=info)
    return {"dir": output, "num_heads_per_layer": smaller.get_config()["num_heads_per_layer"],
            "parameters": int(smaller.count_params()),
            "unpruned_parameters": int(opened.backbone.count_params())}


def run_attributions(opened: Opened, sentences: List[str], args: argparse.Namespace) -> Dict:
    from garden.bertology import attributions

    return attributions.report(opened, sentences, args.output, args.steps, args.target)


def _label(opened: Opened) -> str:
    return os.path.basename(os.path.normpath(opened.path)) or opened.path


def run_probe(opened: Opened, args: argparse.Namespace) -> Dict:
    from garden.bertology import probe

    result = probe.probe_conll(opened.backbone, opened.packer, args.probe_train, args.probe_dev,
                               seed=args.seed, tasks=args.probe_tasks, kind=args.probe_kind,
                               control=True, scalar_mix=True)
    lines = {name: value for task, r in result["tasks"].items() for name, value in
             ((f"{_label(opened)} {task}", r), (f"{task} control task", r["control"]))}
    result["plots"] = [probe.plot_probe(lines, os.path.join(args.output, "probe.png"))]
    return result


def run_wsd(opened: Opened, args: argparse.Namespace) -> Dict:
    from garden.bertology import wsd

    if args.senses:
        examples, source = wsd.read_senses(args.senses), args.senses
    else:
        examples = wsd.sample_senses(seed=args.seed)
        source = f"garden.bertology.wsd.sample_senses(seed={args.seed})"
    # wsd.wsd splits them with wsd.split_senses (30% of each sense to test, seeded)
    result = wsd.wsd(opened.backbone, opened.packer, examples, seed=args.seed,
                     plot_dir=args.output)
    result["senses"] = source
    result["plots"] = [wsd.plot_wsd({_label(opened): result}, os.path.join(
        args.output, "wsd.png")), result["sense_plot"]["path"]]
    return result


def run_contextuality(models: Sequence[str], sentences: List[str], out_dir: str,
                      max_seq_length: int, min_contexts: int, seed: int,
                      stack: str = "") -> Dict:
    from garden.bertology import contextuality

    from text.progress import Eta

    results = {}
    for path in Eta("[garden.analyze] contextuality: models", len(models)).wrap(models):
        opened = open_model(path, max_seq_length, stack)
        print(f"[garden.analyze] contextuality of {opened.description}", flush=True)
        results[path] = contextuality.contextuality(opened.backbone, opened.packer, sentences,
                                                    min_contexts, seed)
    os.makedirs(out_dir, exist_ok=True)
    return {"models": results, "min_contexts": min_contexts, "seed": seed,
            "plots": contextuality.plot_contextuality(results, out_dir)}


@dataclasses.dataclass(frozen=True)
class Analysis:
    """An analysis as main runs it: the flag it cannot run without (None: none) and
    (the opened --model, --input's sentences, the flags) -> its result, or `opens`: (the flags,
    the sentences) -> its result, for the analyses that open --model themselves; `attention`:
    it reads attention, so a backbone without any (ELMo) is refused, saying why."""

    needs: Optional[str]
    run: Optional[Callable[[Opened, List[str], argparse.Namespace], Dict]]
    opens: Optional[Callable[[argparse.Namespace, List[str]], Dict]] = None
    attention: bool = False


def _opens_its_model(args: argparse.Namespace, sentences: List[str]) -> Dict:
    from garden.bertology import perplexity

    if args.analysis == "fill_mask":
        return perplexity.fill_mask_model(args.model[0], sentences, args.max_seq_length, args.top_k)
    if args.analysis == "neighbours":
        from garden.bertology import neighbours

        return neighbours.search(args.model[0], sentences, args.query or [],
                                 args.max_seq_length, args.top_k)
    return perplexity.score_model(args.model[0], sentences, args.max_seq_length)


TABLE = {
    "attention": Analysis("input", lambda o, s, a: run_attention(o, s, a.output, a.sentence),
                          attention=True),
    "identifiability": Analysis("input", lambda o, s, a: run_identifiability(
        o, s, a.output, a.attribution_sentences)),
    "heads": Analysis("task_data", lambda o, s, a: run_heads(o, a.task_data, a.output),
                      attention=True),
    "contextuality": Analysis("input", None, lambda a, s: run_contextuality(
        a.model, s, a.output, a.max_seq_length, a.min_contexts, a.seed, a.stack)),
    "prune": Analysis("task_data", lambda o, s, a: run_prune(o, a), attention=True),
    "probe": Analysis("probe_train", lambda o, s, a: run_probe(o, a)),
    "wsd": Analysis(None, lambda o, s, a: run_wsd(o, a)),  # --senses, else the sample
    "perplexity": Analysis("input", None, _opens_its_model),
    "fill_mask": Analysis("input", None, _opens_its_model),
    "neighbours": Analysis("input", None, _opens_its_model),
    "attributions": Analysis("input", run_attributions),
}
ANALYSES = tuple(TABLE)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m garden.analyze",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("analysis", choices=ANALYSES)
    p.add_argument("--model", required=True, action="append",
                   help="a garden.convert output directory or a garden.train run directory "
                        "(contextuality: repeat it to compare models)")
    p.add_argument("--input", help="text files (glob), one sentence per line "
                                   "(attention, identifiability)")
    p.add_argument("--task_data", help="heads, prune: a classification file (.tsv / .csv "
                                       "with a header, or .jsonl) with text_a, (text_b), label")
    p.add_argument("--output", required=True, help="report directory (created)")
    p.add_argument("--stack", choices=("encoder", "decoder"),
                   help="T5, BART: the stack analysed (default: the encoder; the decoder reads "
                        "the text as its input, causal)")
    p.add_argument("--max_sentences", type=int, default=64)
    p.add_argument("--max_seq_length", type=int, default=64)
    p.add_argument("--top_k", type=int, default=5,
                   help="fill_mask: the pieces per mask; neighbours: the lines per query")
    p.add_argument("--query", action="append", help="neighbours: a text (repeated)")
    p.add_argument("--steps", type=int, default=50,
                   help="attributions: the trapezoid intervals of the path integral (the "
                        "paper: 20 to 300 bring the completeness gap within 5%%)")
    p.add_argument("--target", default="predicted",
                   help="attributions: the label whose logit is attributed, or 'predicted' "
                        "(each sentence's predicted label)")
    p.add_argument("--sentence", type=int, default=0, help="attention: the sentence whose "
                                                           "maps are drawn (index in --input)")
    p.add_argument("--attribution_sentences", type=int, default=2,
                   help="identifiability: sentences of the hidden token attribution (slow)")
    p.add_argument("--min_contexts", type=int, default=5,
                   help="contextuality: the fewest occurrences a word needs")
    p.add_argument("--seed", type=int, default=0,
                   help="contextuality: the baseline's sampling; probe: the sentences drawn and "
                        "the split without --probe_dev; wsd: the sample and the split")
    p.add_argument("--prune_threshold", type=float,
                   help="prune: stop at the first step whose accuracy is below this share of "
                        "the unpruned accuracy (default: prune_heads' 0.9)")
    p.add_argument("--prune_step", type=float,
                   help="prune: the share of all heads masked per step (default: prune_heads' "
                        "0.1)")
    p.add_argument("--pruned_output", help="prune: write the model without the pruned heads "
                                           "here, as a garden.convert directory (a new one)")
    p.add_argument("--probe_train", help="probe: a CoNLL-2003 file (word POS chunk NER)")
    p.add_argument("--probe_dev", help="probe: the CoNLL-2003 file to score on (default: 20%% "
                                       "of --probe_train's sentences, seeded)")
    p.add_argument("--probe_tasks", default="ner", help="probe: ner, pos, chunk (comma list)")
    p.add_argument("--probe_kind", choices=("linear", "mlp"), default="linear")
    p.add_argument("--senses", help="wsd: sense-labelled examples, JSON Lines or a Raganato "
                                    "et al. .data.xml (docs/bertology-formats.md); default: "
                                    "the seeded sample")
    return p


def _check_flags(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage errors: a flag the analysis cannot run without, or a value out of range."""
    needs = TABLE[args.analysis].needs
    if needs and not getattr(args, needs):
        p.error(f"{args.analysis} needs --{needs}")
    args.probe_tasks = [t for t in args.probe_tasks.split(",") if t]
    if not args.probe_tasks or set(args.probe_tasks) - {"ner", "pos", "chunk"}:
        p.error(f"--probe_tasks={','.join(args.probe_tasks)}: choose among ner, pos, chunk")
    if len(args.model) > 1 and args.analysis != "contextuality":
        p.error(f"{args.analysis} takes one --model")
    if args.prune_threshold is not None and not 0 <= args.prune_threshold <= 1:
        p.error(f"--prune_threshold={args.prune_threshold} must lie in [0, 1] (a share of the "
                f"unpruned accuracy)")
    if args.steps < 1:
        p.error(f"--steps={args.steps} must be at least 1 (attributions' path intervals)")
    if args.prune_step is not None and not 0 < args.prune_step < 1:
        p.error(f"--prune_step={args.prune_step} must lie in (0, 1) (a share of all heads)")


def _check_files(args: argparse.Namespace) -> None:
    """ValueError naming the flag, before a model is opened: a data file that is not there, or
    a --pruned_output that already holds a model."""
    from garden import pretrained

    for flag in ("probe_train", "probe_dev", "senses"):
        path = getattr(args, flag)
        if path and not (path.startswith("tfds:") or "://" in path or os.path.isfile(path)):
            raise ValueError(f"--{flag}={path} is not a file")
    out = args.pruned_output
    if out and (os.path.isfile(out) or os.path.exists(os.path.join(out, pretrained.INFO_FILE))):
        raise ValueError(f"--pruned_output={out} is a file or already holds a "
                         f"{pretrained.INFO_FILE}: give a new directory")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = _parser()
    args = p.parse_args(list(argv) if argv is not None else None)
    _check_flags(p, args)
    start = time.time()
    from garden.bertology import report

    try:
        _check_files(args)
        sentences = report.read_sentences(args.input, args.max_sentences) if args.input else []
        if args.analysis == "attention" and not 0 <= args.sentence < len(sentences):
            raise ValueError(f"--sentence={args.sentence} is not one of the {len(sentences)} "
                             f"sentences read")
        if TABLE[args.analysis].opens is not None:
            result = TABLE[args.analysis].opens(args, sentences)
            result["model"] = ", ".join(args.model)
            return _finish(args, result, start)
        opened = open_model(args.model[0], args.max_seq_length, args.stack)
        result = run_analysis(args, opened, sentences)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result["model"] = opened.description
    return _finish(args, result, start)


def run_analysis(args: argparse.Namespace, opened: Opened, sentences: List[str]) -> Dict:
    """TABLE[args.analysis] on the opened --model; ValueError (one line, naming the family and
    why) for an attention analysis of a backbone without attention."""
    from garden.models import instrument

    if TABLE[args.analysis].attention:
        instrument.require_attention(opened.backbone, args.analysis)
    print(f"[garden.analyze] {args.analysis}: {opened.description}"
          + (f"; {len(sentences)} sentences" if sentences else ""), flush=True)
    return TABLE[args.analysis].run(opened, sentences, args)


def _finish(args, result: Dict, start: float) -> int:
    from garden.bertology import report

    path = report.write_result(args.output, args.analysis, result)
    index = report.write_index(args.output, ANALYSES)
    print(f"[garden.analyze] wrote {path} and {index} in {time.time() - start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
