"""garden.tasks.finetuning.EncoderFinetuning: what the five encoder tasks share."""

import ast
import pathlib

import pytest

from garden.tasks.finetuning import EncoderFinetuning
from garden.tasks.last_token_classification import LastTokenClassification
from garden.tasks.multiple_choice import MultipleChoice
from garden.tasks.question_answering import QuestionAnswering
from garden.tasks.classification import Classification
from garden.tasks.tagging import Tagging

TASKS_DIR = pathlib.Path(__file__).resolve().parents[3] / "garden" / "tasks"
# Modules of the task table's tasks; the others (base, shared, finetuning, text_files) are the
# shared homes they may import from.
TASK_MODULES = ("classification", "tagging", "question_answering", "multiple_choice",
                "last_token_classification", "distillation", "pretraining", "generation",
                "cvt_tagging")
# A task that IS its sibling with another head or objective subclasses it (and takes nothing
# else from it).
SUBCLASSES = {("last_token_classification", "classification"): ["Classification"],
              ("cvt_tagging", "tagging"): ["Tagging"]}


@pytest.fixture
def vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    return str(path)


def _tasks(vocab, tokenizer):
    common = dict(backbone=None, vocab=vocab, tokenizer=tokenizer)
    return [Classification(train_file="t", eval_file="e", **common),
            Tagging(train_data="t", eval_data="e", **common),
            QuestionAnswering(train_file="t", eval_file="e", **common),
            MultipleChoice(train_file="t", eval_file="e", **common),
            LastTokenClassification(train_file="t", eval_file="e", **common)]


def test_the_tokenizer_parameter_is_kept_as_tokenizer_kind(vocab):
    for task in _tasks(vocab, "wordpiece"):
        assert isinstance(task, EncoderFinetuning)
        assert task.tokenizer_kind == "wordpiece", type(task).__name__
        assert not hasattr(task, "tokenizer"), type(task).__name__
    # Unbound: from the vocabulary's name when packing (None here); GPT's task defaults to BPE.
    kinds = {type(t).__name__: t.tokenizer_kind for t in _tasks(vocab, None)}
    assert kinds == {"Classification": None, "Tagging": None,
                     "QuestionAnswering": None, "MultipleChoice": None,
                     "LastTokenClassification": None}
    assert LastTokenClassification(backbone=None, vocab=vocab, train_file="t",
                                   eval_file="e").tokenizer_kind == "bpe"


def test_the_packer_is_built_once_on_first_use_and_check_text_drops_it(vocab):
    task = Classification(backbone=None, vocab=vocab, train_file="t", eval_file="e",
                          max_seq_length=8)
    assert task._packer is None
    checked = task.check_text()  # builds one to check the vocabulary, then lets it go
    assert task._packer is None and checked.vocab_size == 7
    assert task.packer is task.packer is not checked
    encoded = task.packer.encode_numpy(["a b"])
    assert encoded["token_ids"].tolist() == [[2, 5, 6, 3, 0, 0, 0, 0]]


def test_recipe_defaults(vocab):
    sc, tagging, qa, mc, _ = _tasks(vocab, None)
    assert (sc.max_seq_length, sc.dropout, sc.init_checkpoint_object) == (128, 0.1, "backbone")
    assert (tagging.max_seq_length, mc.max_seq_length, qa.max_seq_length) == (128, 128, 384)
    assert (sc.model_name, tagging.model_name, qa.model_name, mc.model_name) == (
        "classifier", "tagger", "qa", "multiple_choice")
    assert (sc.lower_case, sc.converted) == (True, None)


def test_no_task_module_imports_from_a_sibling_task():
    for name in TASK_MODULES:
        path = TASKS_DIR / name / "__init__.py" if (TASKS_DIR / name).is_dir() else \
            TASKS_DIR / f"{name}.py"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported = node.module.rsplit(".", 1)[-1]
                if node.module.startswith("garden.tasks.") and imported in TASK_MODULES:
                    names = [a.name for a in node.names]
                    assert SUBCLASSES.get((name, imported)) == names, (name, node.module, names)
