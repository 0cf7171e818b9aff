"""GPT-3-style decoder: GPT-2's pre-LN blocks, layers alternating dense and banded attention."""
