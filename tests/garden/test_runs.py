"""garden.runs: one way to open a model. A tiny random Hugging Face BERT is converted (a
garden.convert directory), fine-tuned 2 steps by garden.train in process (a run directory) and
exported (an export): each opens, reads text the same way, and gives what its kind can.

  * converted: the backbone, with hidden states, attention probabilities and a head mask
    switched on, is the source model's within 1e-4 (and a zeroed head's attention is 0);
  * model_dir: the backbone built from the factory (no task files read) equals the task
    model's, and differs from the converted one (the fine-tuned checkpoint was restored);
    the task model's logits equal its export's ids signature's;
  * the packers of the three kinds give the source tokenizer's ids;
  * one-line errors naming the path: none of the kinds, an export base, a run without a
    checkpoint, a kind that cannot give what is asked.
"""

from __future__ import annotations

import os
import random
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from convert_testing import (convert_hf_bert, max_abs_diff, task_files,  # noqa: E402
                             torch_forward, train_args, write_task_files)
from testing import train_in_process  # noqa: E402

TOL = 1e-4
TEXTS = ["the movie was GOOD, really!", "unknownword film", "i liked the plot ."]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{"hf": the source model, "hf_dir", "converted", "model_dir", "export"} paths."""
    root = tmp_path_factory.mktemp("runs")
    hf = convert_hf_bert(root, seed=3)
    out = hf["out"]
    data = write_task_files(root / "data", random.Random(0), ("classification",))
    model_dir = root / "run"
    summary = train_in_process(
        train_args("configs/finetune/classification_tiny.gin", out, model_dir, root / "exports",
                   *task_files(data, "classification"), steps=2),
        str(model_dir), "classification", 2)
    return dict(hf=hf["model"], hf_dir=hf["dir"], converted=str(out), model_dir=str(model_dir),
                export=summary["export_dir"], export_base=os.path.dirname(summary["export_dir"]))


def test_each_kind_opens_with_its_text_settings(made):
    from garden import runs

    converted = runs.open(made["converted"])
    model_dir = runs.open(made["model_dir"])
    # Opening a run directory binds its operative config without locking gin's config: a test,
    # a notebook or a second run in the same process can still bind (a locked config made a
    # later test fail with "Attempted to modify locked Gin config", CI 2026-12-07).
    import gin
    assert not gin.config_is_locked()
    export = runs.open(made["export"])
    assert (converted.kind, model_dir.kind, export.kind) == ("converted", "model_dir", "export")
    for run in (converted, model_dir, export):
        assert (run.tokenizer_kind, run.lower_case, run.layout) == ("wordpiece", True, "bert")
        assert os.path.basename(run.vocab) == "vocab.txt"
    assert converted.family == "bert" and converted.checkpoint.endswith("ckpt-0")
    assert os.path.basename(model_dir.checkpoint) == "ckpt-2"
    # The packers read text as the source tokenizer does, whichever kind holds the vocabulary.
    reference = transformers.BertTokenizer.from_pretrained(made["hf_dir"])
    expected = reference(TEXTS, max_length=16, padding="max_length", truncation=True)
    for run in (converted, model_dir, export):
        packed = run.packer(16).encode_numpy(TEXTS)
        np.testing.assert_array_equal(packed["token_ids"], expected["input_ids"])
        assert run.packer(16).vocab_path == run.vocab
    assert export.tokens()[101:103] == ["[CLS]", "[SEP]"]


def test_converted_backbone_is_the_source_model_with_its_switches_on(made):
    from garden import runs

    run = runs.open(made["converted"])
    backbone = run.backbone(output_hidden_states=True, output_attentions=True,
                            use_head_mask=True)
    inputs = run.packer(16).encode_numpy(TEXTS)
    made["hf"].config._attn_implementation = "eager"  # attention probabilities out
    ref = torch_forward(made["hf"], inputs, output_attentions=True)
    mask = np.ones((2, 4), "float32")
    out = backbone({**inputs, "head_mask": mask}, training=False)
    real = inputs["padding_mask"].astype(bool)
    for layer in range(3):
        assert max_abs_diff(np.asarray(out["hidden_states"][layer])[real],
                            ref.hidden_states[layer].numpy()[real]) <= TOL
    for layer in range(2):
        assert max_abs_diff(out["attention_probs"][layer], ref.attentions[layer].numpy()) <= TOL
    mask[0, 1] = 0.0  # the head mask input took effect: layer 0's head 1 attends nowhere
    masked = backbone({**inputs, "head_mask": mask}, training=False)["attention_probs"]
    assert float(np.abs(np.asarray(masked)[0, :, 1]).max()) == 0.0
    assert max_abs_diff(masked[1], out["attention_probs"][1]) > 0  # and changed what follows


def test_model_dir_backbone_and_task_model_agree_with_its_export(made):
    from garden import runs

    run = runs.open(made["model_dir"])
    inputs = run.packer(16).encode_numpy(TEXTS)
    from_factory = run.backbone(output_hidden_states=True)  # no task file read
    assert run.description.startswith("BertBackbone of ") and run.family == "bert"
    states = np.asarray(from_factory(inputs, training=False)["hidden_states"])
    converted = runs.open(made["converted"]).backbone()
    assert max_abs_diff(states[-1], converted(inputs, training=False)["sequence_output"]) > 1e-6

    logits = np.asarray(run.task_model()(inputs, training=False)["logits"])
    of_task = run.backbone()  # now the task model's own
    assert of_task is run.objects["backbone"]
    assert max_abs_diff(of_task(inputs, training=False)["sequence_output"], states[-1]) <= 1e-6
    served = runs.open(made["export"]).task_model()(inputs)
    assert max_abs_diff(served["logits"], logits) <= 1e-5


def test_one_line_errors_name_the_path(made, tmp_path):
    from garden import runs
    from garden.serving import export as exporter

    def refused(call, *parts):
        with pytest.raises(runs.RunError) as e:
            call()
        message = str(e.value)
        assert "\n" not in message and all(p in message for p in parts), message

    nothing = str(tmp_path / "nothing")
    refused(lambda: runs.open(nothing), f"{nothing} is neither a garden.train run directory "
            f"(no operative_config.gin) nor a garden.convert output directory (no "
            f"convert_info.json) nor an export version directory (no assets.extra/"
            f"garden_export.json) nor a garden.generate model directory (no generation.json)")
    refused(lambda: runs.open(made["export_base"]),
            f"it holds export versions [1]: pass {made['export_base']}/1")
    refused(lambda: runs.open(made["converted"], [runs.GENERATE], who="garden.generate"),
            f"{made['converted']} is a garden.convert output directory, but garden.generate "
            f"takes a garden.generate model directory")
    refused(lambda: runs.open(nothing, [runs.GENERATE]),
            f"{nothing} is not a garden.generate model directory ({nothing}/generation.json "
            f"does not exist)")
    refused(lambda: runs.open(made["export"]).backbone(), made["export"], "no Keras backbone",
            "open the garden.train run directory it was exported from")
    refused(lambda: runs.open(made["converted"]).task_model(), made["converted"],
            "without a task head")
    refused(lambda: runs.open(made["converted"]).lm(), made["converted"], "does not generate")
    bare = tmp_path / "bare_run"
    bare.mkdir()
    shutil.copy(os.path.join(made["model_dir"], "operative_config.gin"), bare)
    refused(lambda: runs.open(str(bare)), f"{bare} is a garden.train run directory without a "
                                          f"checkpoint")
    assert runs.EXPORT_METADATA == f"assets.extra/{exporter.METADATA_FILENAME}"
