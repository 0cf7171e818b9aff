"""Offline data jobs (Apache Beam) for the garden: make_pretrain, make_finetune, make_vocab and
the sample corpora. Text handling (tokenizers, the TFRecord schema, readers) is the text package
below; importing it first turns TensorFlow's oneDNN kernels on (text/onednn.py). Beam's
import-time notes about the absent dataflow extra are dropped here, before Beam loads
(data_pipelines/gcs.py)."""

import text  # noqa: F401  (sets TF_ENABLE_ONEDNN_OPTS before TensorFlow loads)
from data_pipelines import gcs as _gcs

_gcs.quiet_beam_without_the_extra()
