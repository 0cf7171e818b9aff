"""`python -m garden.export EXPORT_DIR` (README, BUILD.md): inspects an export.

The exporter lives in garden.serving.export; this module keeps the documented command and the
old import path working.
"""

from garden.serving.export import (ExportError, check_serving_ops, export, graph_ops,  # noqa: F401
                                   main, min_tf_serving_version, read_warmup_requests)

if __name__ == "__main__":
    raise SystemExit(main())
