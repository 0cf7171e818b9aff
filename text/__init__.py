"""The text layer: what raw text becomes before any model or pipeline sees it.

Tokenizers of the three kinds (tokenizers.py; BERT's WordPiece rules in wordpiece.py), the
vocabulary record objectives and tasks read (vocab.py), casing checks, tag schemes, the TFRecord
schema (features.py) and framing (tfrecord.py), the fine-tuning readers of the official formats
(finetune/), training-time masking (dynamic.py), ELMo's character ids (char_ids.py), ROUGE and
its trivial baselines (rouge.py, shared by the seq2seq sample task and tasks), a flag helper and
the oneDNN switch. data_pipelines/ (the Beam jobs) and garden/ (models, training,
serving) both import it; it imports neither (tests/test_import_graph.py).

Importing the package turns TensorFlow's oneDNN CPU kernels on when the user has not chosen
(onednn.py): TensorFlow reads the variable once, when it loads, so every entry point imports
this package (through data_pipelines or garden) before TensorFlow.
"""

from text import onednn as _onednn

_onednn.enable()
