"""A layout can pack more inputs than a family reads (the "bert" layout's segment_ids for
DistilBERT and the recurrent families). Keras matches a functional model's dict inputs by
position when the dict has extra keys, so the tasks and exports pass only the model's own
inputs (garden.serving.text.model_inputs); without that, a tagger read segment ids as token
ids."""

import random

import numpy as np

from garden.models.distilbert.backbone import DistilBertBackbone
from garden.models.tagging import TokenTagger
from garden.serving.text import model_inputs


def _ids():
    ids = np.array([[2, 55, 66, 3, 0, 0]], "int32")
    return {"token_ids": ids, "segment_ids": np.ones_like(ids),
            "padding_mask": (ids > 0).astype("int32")}


def test_only_the_models_inputs_are_passed():
    tagger = TokenTagger(DistilBertBackbone(vocab_size=100, num_layers=1, hidden_size=16,
                                            num_heads=2, intermediate_size=32), 3)
    packed = _ids()
    assert set(model_inputs(tagger, packed)) == {"token_ids", "padding_mask"}
    want = tagger({k: packed[k] for k in ("token_ids", "padding_mask")})["logits"]
    np.testing.assert_allclose(tagger(model_inputs(tagger, packed))["logits"], want)


def test_a_tagging_task_without_segments_reads_its_tokens(tmp_path):
    from convert_testing import bert_vocab_tokens, write_task_files

    from garden.models import factory
    from garden.tasks.tagging import Tagging

    data = write_task_files(tmp_path / "data", random.Random(0), ("tagging",))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(bert_vocab_tokens()) + "\n")
    task = Tagging(backbone=lambda **kw: factory.backbone(preset="ulmfit_tiny", **kw),
                   vocab=str(vocab), train_data=str(data / "train.conll"),
                   eval_data=str(data / "dev.conll"), max_seq_length=16,
                   label_names=["O", "I-LOC"])
    task.prepare()
    assert "segment_ids" in task.packer.input_names  # the "bert" layout packs them
    model, _ = task.build_model()
    batch = {k: v[:4] for k, v in task.train_arrays.items()}
    got = task._logits(model, batch, False).numpy()
    want = model({k: batch[k].astype("int32") for k in ("token_ids", "padding_mask")},
                 training=False)["logits"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
