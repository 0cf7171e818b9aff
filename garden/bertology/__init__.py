"""BERTology: analyses of trained encoders (attention statistics, head ablation, effective
attention and identifiability, contextuality, probes, word senses, pruning).

Each module is a library of functions over a backbone (a Keras model with the optional
outputs of garden.models.backbone.Backbone) and a packer-encoded batch; they return plain,
JSON-able dicts, and the plotting functions write PNG files. `python -m garden.analyze`
composes them.
"""
