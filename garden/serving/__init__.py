"""Serving: the one exporter (export.py), the task kinds' ServingModules (modules.py) and the
in-graph text packing for every tokenizer kind (text.py). See docs/design.md "Serving"."""
