"""`garden.train --summary` builds shapes only: no weight of the configured model is drawn
(Keras defers every variable created in a stateless scope that does not initialize on exit),
so the largest configs print in seconds; and the subclassed XLNet pretrainer's summary states
its LM head's output shape (it raised before: the head was built with no input shape)."""

from __future__ import annotations

import re

import keras
import pytest

from garden import train as train_lib


@pytest.fixture(autouse=True)
def _cwd_repo(monkeypatch):
    monkeypatch.chdir(train_lib.REPO_ROOT)


def _drawn_during(monkeypatch, fn):
    """Runs fn(); returns (its result, the shapes of the variables initialized meanwhile)."""
    drawn = []
    # keras.Variable is the backend's class; every value it gets passes through _initialize.
    original = keras.Variable._initialize

    def counting(self, value):
        drawn.append(tuple(self.shape))
        return original(self, value)

    monkeypatch.setattr(keras.Variable, "_initialize", counting)
    result = fn()
    monkeypatch.undo()
    return result, drawn


def test_summary_of_a_large_config_draws_no_weights(monkeypatch, capsys):
    keras.backend.clear_session(free_memory=False)
    total, drawn = _drawn_during(
        monkeypatch, lambda: train_lib.build_summary(["configs/bert_large.gin"], []))
    out = capsys.readouterr().out
    assert drawn == [], drawn[:5]
    # The count is still the model's: BERT-large pretraining with the preset 30,522 vocabulary.
    assert total == 336_226_108
    assert "Total parameters: 336,226,108" in out
    # The control: a backbone built outside --summary draws its weights, so the counter
    # above would have seen any.
    from garden.models import factory
    _, drawn_real = _drawn_during(monkeypatch, lambda: factory.backbone(
        preset="bert_tiny", default_vocab_size=100))
    assert drawn_real


def test_xlnet_summary_prints_its_head(capsys):
    keras.backend.clear_session(free_memory=False)
    assert train_lib.main(["--summary", "--config=configs/xlnet_base.gin"]) == 0
    out = capsys.readouterr().out
    # XLNet-base: the published 116,718,336 in the backbone + the 32,000 LM bias.
    assert "Backbone parameters: 116,718,336" in out
    assert "Total parameters: 116,750,336" in out
    assert re.search(r"lm_head \(XLNetLMHead\)\s+│ \(None, None, 32000\)", out), out[-1500:]
