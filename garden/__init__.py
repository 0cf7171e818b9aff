"""The BERT garden: models, tasks, the trainer, exports and the server.

`import text` first: it turns TensorFlow's oneDNN CPU kernels on unless the user set
TF_ENABLE_ONEDNN_OPTS (text/onednn.py), which must happen before TensorFlow loads.
"""

import text as _text  # noqa: F401  (sets TF_ENABLE_ONEDNN_OPTS, see above)
