"""Offline data jobs (Apache Beam) for the garden: make_pretrain, make_finetune, make_vocab and
the sample corpora. Text handling (tokenizers, the TFRecord schema, readers) is the text package
below; importing it first turns TensorFlow's oneDNN kernels on (text/onednn.py)."""

import text  # noqa: F401  (sets TF_ENABLE_ONEDNN_OPTS before TensorFlow loads)
