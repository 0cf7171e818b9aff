"""Offline data jobs (Apache Beam) for the garden.

Importing the package turns TensorFlow's oneDNN CPU kernels on when the user has not chosen
(data_pipelines/onednn.py: TensorFlow reads the variable once, when it loads, so this must run
before it is imported; garden/__init__.py imports this package first).
"""

from data_pipelines import onednn as _onednn

_onednn.enable()
