"""The exporter side: the one exporter (export.py: versions, method names, op check, warmup
requests, metadata), the task kinds' ServingModules (modules.py, choice.py, qa.py, tagging.py,
generation.py, features.py) and the in-graph text packing for every tokenizer kind (text.py).
What it writes is what tensorflow_model_server loads; garden.server serves the same directories
locally (python -m garden.serve). See docs/design.md "Serving"."""
