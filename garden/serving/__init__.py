"""The exporter side: the one exporter (export.py: versions, method names, op check, warmup
requests, metadata), the ServingModule base (base.py), a ServingModule per task kind named after
it (classification.py, tagging.py, question_answering.py, multiple_choice.py, generation.py) and
features.py, and the in-graph text packing for every tokenizer kind (text.py).
What it writes is what tensorflow_model_server loads; garden.server serves the same directories
locally (python -m garden.serve). See docs/design.md "Serving"."""
