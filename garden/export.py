"""`python -m garden.export EXPORT_DIR`: inspects an export (docs/serving.md, BUILD.md).

Prints, as JSON, the tensorflow-text ops the export's graphs use and whether the oldest TF
Serving release this stack promises has them (garden.serving.export.check_serving_ops), the
signatures and inputs of its warmup requests, min_tf_serving_version, and what the export
computes in as its garden_export.json records it: compute_dtype ('float32' or 'bfloat16') and
matmul_dtypes (its signatures' matmul nodes per dtype; null for an export written before they
were recorded). Exit status 0 when every op checks, 1 when one does not, 2 when EXPORT_DIR is
not a version directory (the model directory above it is named with the newest version to
pass).

Exports are written by the trainer (garden.train, through garden.serving.export.export); this
command only reads them.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from typing import Iterable, Optional


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m garden.export",
        description="Inspect an export: the tensorflow-text ops it uses, whether the oldest TF "
                    "Serving release the garden supports (garden.serving.export."
                    "MIN_TF_SERVING_FOR_TF_TEXT_OPS) has them, and its warmup requests. Exports "
                    "are written by the trainer (garden.train).")
    parser.add_argument("export_dir", help="a version directory <export_base>/<name>/<version>")
    # Parsed before TensorFlow loads, so that --help and usage errors answer at once.
    args = parser.parse_args(list(argv) if argv is not None else None)
    import tensorflow as tf

    from garden.serving import export
    if not tf.io.gfile.exists(posixpath.join(args.export_dir, "saved_model.pb")):
        versions = export.existing_versions(args.export_dir)
        newest = versions and posixpath.join(args.export_dir, str(versions[-1]))
        hint = f"; it holds versions {versions}: pass {newest}" if versions else ""
        print(f"error: {args.export_dir} is not a SavedModel version directory (no "
              f"saved_model.pb){hint}", file=sys.stderr)
        return 2
    report = export.check_serving_ops(args.export_dir)
    warmup = posixpath.join(args.export_dir, "assets.extra", export.WARMUP_FILENAME)
    if tf.io.gfile.exists(warmup):
        report["warmup_requests"] = [
            {"signature_name": r["signature_name"], "inputs": sorted(r["inputs"])}
            for r in export.read_warmup_requests(warmup)]
    report["min_tf_serving_version"] = export.min_tf_serving_version()
    metadata = posixpath.join(args.export_dir, "assets.extra", export.METADATA_FILENAME)
    recorded = json.loads(tf.io.gfile.GFile(metadata).read()) if tf.io.gfile.exists(metadata) \
        else {}
    report["compute_dtype"] = recorded.get("compute_dtype")
    report["matmul_dtypes"] = recorded.get("matmul_dtypes")
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
