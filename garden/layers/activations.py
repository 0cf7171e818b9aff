"""Activation functions by the names model configs use, in one place.

"gelu" is the exact erf form (BERT's TF2 code, RoBERTa, ELECTRA, Hugging Face "gelu");
"gelu_new" / "gelu_tanh" (also "gelu_approximate", "gelu_pytorch_tanh") is the tanh
approximation of Hendrycks & Gimpel (2016) that the original BERT/ALBERT TF1 code and GPT-2
compute. The two differ by up to ~1e-3, enough to break checkpoint parity, so the name
decides. Any other name ("relu", "tanh", ...) or a callable goes to `keras.activations.get`.
"""

from __future__ import annotations

import keras


def gelu(x):
    """Exact GELU, x * Phi(x) with the erf form of the normal CDF."""
    return keras.activations.gelu(x, approximate=False)


# Registered so that a layer's get_config / from_config round trip finds it by name.
@keras.saving.register_keras_serializable(package="garden")
def gelu_tanh(x):
    """tanh GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ("gelu_new")."""
    return keras.activations.gelu(x, approximate=True)


_TANH_NAMES = ("gelu_new", "gelu_tanh", "gelu_approximate", "gelu_pytorch_tanh")


def get(name_or_callable):
    """A config's activation (name, callable or None) -> a function of one tensor.

    "gelu" returns Keras' own `keras.activations.gelu` (exact by default), so blocks
    configured with "gelu" keep the function, numerics and serialized name ("gelu") they had.
    """
    if isinstance(name_or_callable, str) and name_or_callable in _TANH_NAMES:
        return gelu_tanh
    return keras.activations.get(name_or_callable)
