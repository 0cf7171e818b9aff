"""Side-by-side measurements against peer implementations (not run by CI by default).

Importing data_pipelines first turns oneDNN on as the garden's entry points do (unless
TF_ENABLE_ONEDNN_OPTS is set), for every contender of a run alike; each report records the CPU
and the oneDNN state (common.machine_info).
"""

import data_pipelines as _data_pipelines  # noqa: F401  (TF_ENABLE_ONEDNN_OPTS before TensorFlow)
