"""The exporter side: the one exporter (export.py: versions, method names, op check, warmup
requests, metadata) and the precision checks of what it saves (precision.py: float32 or
bfloat16 matmuls behind float32 signatures), the ServingModule base (base.py), a ServingModule per task kind named after
it (classification.py, tagging.py, question_answering.py, multiple_choice.py, generation.py) and
features.py, and the in-graph text packing for every tokenizer kind (text.py).
What it writes is what tensorflow_model_server loads; garden.server serves the same directories
locally (python -m garden.serve). See docs/design.md "Serving"."""
