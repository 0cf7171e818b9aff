"""Functional and subclassed pretrainers built in one process, in both orders.

Keras' Model.__init__ with inputs/outputs rewrites keras.Model to Functional in the bases of
every class above the model's class, for the rest of the process. A subclassed model sharing a
base with functional ones (XLNetPretrainer under Pretrainer, once) then fails to construct
after any functional one was built: under pytest-xdist's --dist loadfile that depends on which
files a worker ran before. garden.models.pretrainer.PretrainerConfig keeps them apart; this
test fails if a subclassed pretrainer goes back under the functional base."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testing import REPO_ROOT, python_env

BUILD = r"""
import sys
from garden.models import factory
from garden.models.bert.pretrainer import BertPretrainer
from garden.models.xlnet.pretrainer import XLNetPretrainer

def bert():
    return BertPretrainer(factory.backbone(100, preset="bert_tiny", num_layers=1))

def xlnet():
    return XLNetPretrainer(factory.backbone(100, preset="xlnet_tiny", num_layers=1))

for build in ([bert, xlnet] if sys.argv[1] == "bert-first" else [xlnet, bert]):
    build()
print("built", sys.argv[1])
"""


@pytest.mark.parametrize("order", ["bert-first", "xlnet-first"])
def test_functional_and_subclassed_pretrainers_build_in_either_order(order):
    # A fresh process each: the rewrite lasts for the process, so the order is only the
    # test's when nothing was built before.
    proc = subprocess.run([sys.executable, "-c", BUILD, order], cwd=REPO_ROOT, env=python_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"built {order}" in proc.stdout
