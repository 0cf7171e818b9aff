"""text.kinds: the kinds' module names in every layer, the one table of retired names, and the
hint that names what replaced one."""

import pathlib

from text import kinds

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_a_retired_gin_name_is_named_with_what_replaced_it():
    message = "No configurable matching reference '@garden.RobertaPretraining()'."
    assert kinds.hint(message) == ("garden.RobertaPretraining is now garden.Pretraining with "
                                   "garden.Pretraining.family = 'roberta'")
    # A binding without the module (RobertaPretraining.vocab = ...) names the same configurable.
    assert kinds.hint("No configurable matching 'RobertaPretraining'.") == kinds.hint(message)
    assert kinds.renamed("garden.RobertaPretraining") == kinds.hint(message)


def test_only_whole_names_are_matched():
    for message in ("No configurable matching 'garden.Pretraining'",
                    "No configurable matching 'garden.RobertaPretrainingX'",
                    "No configurable matching 'other.RobertaPretraining'",
                    "No configurable matching 'MyRobertaPretraining'"):
        assert kinds.hint(message) == "", message
    assert kinds.renamed("garden.Pretraining") is None


def test_every_retired_name_is_named_in_one_message_of_its_own():
    for old, new in kinds.RENAMED.items():
        assert kinds.hint(f"'{old}'") == f"{old} is now {new}"
        assert old not in new, old  # never renamed to itself


def test_the_table_is_the_one_documented_in_docs_tasks_md():
    """docs/tasks.md "Task kinds and retired names" lists every row, old and new as in the
    table (backticks and the escapes of | aside), and no other."""
    import re

    doc = (REPO / "docs" / "tasks.md").read_text()
    section = doc.split("## Task kinds and retired names", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1].replace("`", "")
    assert rows == kinds.RENAMED


# Each layer's modules named after a kind (text/kinds.py), and the other modules of the layers
# that hold nothing else (None: the layer holds other modules too, e.g. garden/models' families).
# A kind's module may have parts of its own, named <kind>_<part> (question_answering_windows).
KIND_MODULES = {
    "text/finetune": (("classification", "tagging", "question_answering", "multiple_choice"),
                      {"__init__", "base", "tfds_sources"}),
    "garden/metrics": (("classification", "tagging", "question_answering"), {"__init__"}),
    "garden/models": (("classification", "tagging", "question_answering", "multiple_choice"), None),
    "garden/serving": (kinds.KINDS, None),
    "garden/tasks": (kinds.KINDS, None),
}


def test_every_layer_names_its_kind_modules_after_the_kind():
    for folder, (names, others) in KIND_MODULES.items():
        found = {p.stem for p in (REPO / folder).glob("*.py")}
        assert set(names) <= set(kinds.KINDS), folder
        assert set(names) <= found, f"{folder} lacks {sorted(set(names) - found)}"
        if others is not None:
            parts = {m for m in found if any(m.startswith(n + "_") for n in names)}
            strays = sorted(found - set(names) - others - parts)
            assert not strays, f"{folder}: {strays} are neither a kind's module nor shared"
