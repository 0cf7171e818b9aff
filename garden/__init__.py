"""The BERT garden: models, tasks, the trainer, exports and the server.

`import data_pipelines` first: it turns TensorFlow's oneDNN CPU kernels on unless the user set
TF_ENABLE_ONEDNN_OPTS (data_pipelines/onednn.py), which must happen before TensorFlow loads.
"""

import data_pipelines as _data_pipelines  # noqa: F401  (sets TF_ENABLE_ONEDNN_OPTS, see above)
