"""`python -m garden.export_features`: a backbone exported as a TF Serving model that maps raw
text to its contextual features (ELMo's scalar-mixed layers, BERT's last layer, ...), for
models that put them under their own task head, and to one sentence embedding per text.

    python -m garden.export_features --model_dir=RUN_OR_OUT --export_base=DIR \
        [--model_name=features] [--max_seq_length=128] [--pooling=mean|cls]

RUN_OR_OUT is a garden.train run directory (e.g. ELMo's biLM pretraining, configs/elmo_tiny.gin)
or a garden.convert output directory (e.g. all-MiniLM-L6-v2): its backbone is restored and
packed with its vocabulary; a backbone that reads characters (ELMo) is rebuilt to take the
vocabulary's pieces, with the run's weights. The export's signatures are
garden.serving.features.FeatureServing's: serving_default (per-piece features), serving_ids
and embed (text -> one vector per text, --pooling: mean over the pieces as
sentence-transformers pools, or the first piece's). garden.serve serves it like any export.
garden.extract_features writes the features of chosen layers to files instead.
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable, Optional


def export_run(model_dir: str, export_base: str, model_name: str = "features",
               max_seq_length: int = 128, pooling: str = "mean") -> str:
    """The feature export of a garden.train run's or a garden.convert directory's backbone;
    returns the version directory."""
    from garden import runs
    from garden.serving.export import export
    from garden.serving.features import FeatureServing, text_backbone

    run = runs.open(model_dir, [runs.MODEL_DIR, runs.CONVERTED], who="garden.export_features")
    if not run.vocab:
        raise ValueError(f"{model_dir}: its task records no vocabulary to read text with")
    packer = run.packer(max_seq_length)
    backbone = text_backbone(run.backbone(max_seq_length=max_seq_length), run.vocab)
    return export(FeatureServing(backbone, packer, run.vocab, pooling=pooling), export_base,
                  model_name)


def main(argv: Optional[Iterable[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m garden.export_features",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", required=True,
                   help="a garden.train run directory or a garden.convert output directory")
    p.add_argument("--export_base", required=True, help="exports go to BASE/NAME/VERSION")
    p.add_argument("--model_name", default="features")
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--pooling", choices=("mean", "cls"), default="mean",
                   help="the embed signature's pooling: the mean over the pieces "
                        "(sentence-transformers') or the first piece's")
    args = p.parse_args(list(argv) if argv is not None else None)
    try:
        path = export_run(args.model_dir, args.export_base, args.model_name,
                          args.max_seq_length, args.pooling)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"[features] exported {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
