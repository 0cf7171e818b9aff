"""The recurrent families in the garden's tasks: ULMFiT's AWD-LSTM, ELMo's biLM and CoVe's
encoder tag the sample CoNLL task through garden.train with their configs (from scratch, tiny) and their
exports answer raw sentences in a fresh process.

The taggers train 40 steps (80 until 2026-12-07; the configs log every 20 steps, so the loss
logged at step 40 is compared with step 20's). Measured at 40 steps, last / first logged loss:
ULMFiT 0.38, ELMo 0.01, CoVe 0.45, against the bar of 0.8. The CVT classifier keeps
its 60 steps: at 30 its dev accuracy only equalled the majority class (0.375)."""

import random

import pytest

from convert_testing import bert_vocab_tokens, tagger_answer, task_files, write_task_files
from testing import train_in_process



@pytest.mark.parametrize("config", ["tagging_ulmfit_tiny", "tagging_elmo_tiny",
                                    "tagging_cove_tiny"])
def test_the_recurrent_taggers_learn_and_serve(config, tmp_path):
    data = write_task_files(tmp_path / "data", random.Random(0), ("tagging",))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(bert_vocab_tokens()) + "\n")
    model_dir = tmp_path / "run"
    summary = train_in_process([
        f"--config=configs/finetune/{config}.gin", f"--model_dir={model_dir}",
        f"--gin_param=VOCAB='{vocab}'", "--gin_param=INIT_CHECKPOINT=None",
        f"--gin_param=EXPORT_BASE='{tmp_path / 'export'}'", "--gin_param=TRAIN_STEPS=40",
        "--gin_param=train.global_batch_size=8", *task_files(data, "tagging")],
        str(model_dir), "tagging", 40)
    first, last = summary["first_logged_metrics"], summary["last_logged_metrics"]
    assert last["loss"] < 0.8 * first["loss"], (first, last)
    answer = tagger_answer(summary["export_dir"])
    # Entities (possibly none) of the task's one type, each a span of the sentences.
    assert set(answer["entity_type"]) <= {"LOC", ""}, answer  # "" pads a sentence's row
    assert all(t in "i liked paris . we loved london ." for t in answer["entity_text"]), answer


def test_the_cvt_encoder_classifies_and_serves(tmp_path):
    from convert_testing import export_answers, train_scratch_classifier

    summary = train_scratch_classifier(tmp_path, "configs/finetune/classification_cvt_tiny.gin",
                                       60, "--gin_param=train.log_every=20")
    assert summary["eval_accuracy"] > summary["majority_baseline_accuracy"], summary
    assert set(export_answers(summary["export_dir"])) <= {"pos", "neg"}
