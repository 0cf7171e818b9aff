"""GLUE TSV and SWAG CSV readers on files in the official layouts (first rows of the real
files' shapes), malformed rows named by file:line, and the MNLI label-order guard."""

from __future__ import annotations

import pytest

from text.finetune import FinetuneDataError, multiple_choice
from text.finetune.classification import (check_label_order, label_names, order_of, read_examples,
                                          read_split, split_path)

T = "\t"


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return str(path)


MNLI_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
               "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
               "sentence2", "label1", "label2", "label3", "label4", "label5", "gold_label"]

# task -> (file name, lines, [(text_a, text_b, label)])
FILES = {
    "cola": ("train.tsv",
             ["gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.",
              "gj04\t0\t*\tOne more pseudo generalization and I'm giving up."],
             [("Our friends won't buy this analysis, let alone the next one we propose.", None,
               "1"), ("One more pseudo generalization and I'm giving up.", None, "0")]),
    "sst2": ("dev.tsv", ["sentence\tlabel", "it 's a charming and often affecting journey . \t1"],
             [("it 's a charming and often affecting journey . ", None, "1")]),
    "mrpc": ("train.tsv",
             ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
              "1\t702876\t702977\tAmrozi accused his brother.\tReferring to him, Amrozi said.",
              "0\t2108705\t2108831\tYucaipa owned \"Dominick's\".\tYucaipa bought it."],
             [("Amrozi accused his brother.", "Referring to him, Amrozi said.", "1"),
              ('Yucaipa owned "Dominick\'s".', "Yucaipa bought it.", "0")]),
    "qqp": ("dev.tsv", ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
                        "201359\t303345\t303346\tWhy are African-Americans so beautiful?\t"
                        "Why are hispanics so beautiful?\t0"],
            [("Why are African-Americans so beautiful?", "Why are hispanics so beautiful?", "0")]),
    "stsb": ("train.tsv",
             ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
              "\tscore",
              "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\t"
              "An air plane is taking off.\t5.000"],
             [("A plane is taking off.", "An air plane is taking off.", 5.0)]),
    "mnli": ("dev_matched.tsv",
             [T.join(MNLI_HEADER),
              T.join(["0", "63735", "63735n", "slate", "( ( The ...", "( ( The ...", "(ROOT",
                      "(ROOT", "The new rights are nice enough", "Everyone really likes the "
                      "newest benefits ", "neutral", "entailment", "neutral", "neutral",
                      "neutral", "neutral"])],
             [("The new rights are nice enough", "Everyone really likes the newest benefits ",
               "neutral")]),
    "qnli": ("dev.tsv", ["index\tquestion\tsentence\tlabel",
                         "0\tWhat came into force?\tThe law came into force.\tentailment",
                         "1\tWhat is it?\tNothing here.\tnot_entailment"],
             [("What came into force?", "The law came into force.", "entailment"),
              ("What is it?", "Nothing here.", "not_entailment")]),
    "rte": ("train.tsv", ["index\tsentence1\tsentence2\tlabel",
                          "0\tNo Weapons of Mass Destruction Found.\tWMD found.\tnot_entailment"],
            [("No Weapons of Mass Destruction Found.", "WMD found.", "not_entailment")]),
    "wnli": ("train.tsv", ["index\tsentence1\tsentence2\tlabel",
                           "0\tI stuck a pin through a carrot.\tThe carrot has a hole.\t1"],
             [("I stuck a pin through a carrot.", "The carrot has a hole.", "1")]),
}


@pytest.mark.parametrize("task", sorted(FILES))
def test_each_task_reads_its_official_layout(tmp_path, task):
    name, lines, expected = FILES[task]
    examples = read_examples(_write(tmp_path, name, lines), task)
    assert [(e.text_a, e.text_b, e.label) for e in examples] == expected
    assert len({e.guid for e in examples}) == len(examples)


def test_test_files_have_no_labels(tmp_path):
    cola = read_examples(_write(tmp_path, "test.tsv", ["index\tsentence",
                                                       "0\tBill whistled past the house."]),
                         "cola")
    assert [(e.text_a, e.label) for e in cola] == [("Bill whistled past the house.", None)]
    mrpc = read_examples(_write(tmp_path, "m.tsv", [
        "index\t#1 ID\t#2 ID\t#1 String\t#2 String", "0\t1089874\t1089925\tPCCW 's chief.\tThe"
        " chief."]), "mrpc")
    assert [(e.text_a, e.text_b, e.label) for e in mrpc] == [("PCCW 's chief.", "The chief.", None)]
    qqp = read_examples(_write(tmp_path, "q.tsv", ["id\tquestion1\tquestion2",
                                                   "0\tHow?\tWhy?"]), "qqp")
    assert [(e.text_a, e.text_b, e.label) for e in qqp] == [("How?", "Why?", None)]


def test_qnli_ids_are_unique_per_row(tmp_path):
    name, lines, _ = FILES["qnli"]
    examples = read_examples(_write(tmp_path, name, lines), "qnli")
    assert [e.guid for e in examples] == ["qnli-dev.tsv-2", "qnli-dev.tsv-3"]


def test_mnli_splits_by_name(tmp_path):
    for split in ("dev_matched", "dev_mismatched"):
        _write(tmp_path, f"{split}.tsv", FILES["mnli"][1])
        assert len(read_split(str(tmp_path), "mnli", split)) == 1
    with pytest.raises(ValueError, match="splits"):
        split_path(str(tmp_path), "mnli", "dev")


@pytest.mark.parametrize("task, lines, message", [
    ("rte", ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\tentailment",
             "1\ta\tb\tneutral"], r"x\.tsv:3: label 'neutral' is not one of rte"),
    ("rte", ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\tc\tentailment"],
     r"x\.tsv:2: row has 5 fields, rte files have 4"),
    ("cola", ["gj04\t1\t\tok", "gj04\t1\tshort"], r"x\.tsv:2: row has 3 fields"),
    ("stsb", ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
              "\tscore", "0\tg\tf\ty\to\ts\ts\ta\tb\thigh"],
     r"x\.tsv:2: STS-B score 'high' is not a number"),
    ("stsb", ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
              "\tscore", "0\tg\tf\ty\to\ts\ts\ta\tb\t5.5"], r"x\.tsv:2: .*outside \[0, 5\]"),
    ("mrpc", ["index\tsentence1\tsentence2\tlabel", "0\ta\tb\t1"],
     r"x\.tsv:1: header .* lacks the column '#1 String'"),
])
def test_malformed_rows_name_file_and_line(tmp_path, task, lines, message):
    with pytest.raises(FinetuneDataError, match=message):
        read_examples(_write(tmp_path, "x.tsv", lines), task)


def test_invalid_utf8_and_missing_file(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_bytes(b"sentence\tlabel\nok\t1\n\xff\t0\n")
    with pytest.raises(FinetuneDataError, match=r"bad\.tsv:3: invalid UTF-8"):
        read_examples(str(path), "sst2")
    with pytest.raises(FinetuneDataError, match="not found"):
        read_examples(str(tmp_path / "none.tsv"), "sst2")


def test_mnli_label_orders_and_the_guard():
    assert label_names("mnli") == ["contradiction", "entailment", "neutral"]
    assert label_names("mnli", "tfds") == ["entailment", "neutral", "contradiction"]
    assert order_of("mnli", label_names("mnli", "tfds")) == "tfds"
    assert label_names("stsb") is None
    check_label_order("mnli", label_names("mnli"), label_names("mnli"), "x")
    with pytest.raises(FinetuneDataError, match=r"eval: the model's mnli classes are .*BERT / "
                       r"Model Garden order.* follow .*TFDS / Hugging Face order"):
        check_label_order("mnli", label_names("mnli"), label_names("mnli", "tfds"),
                          "eval")


SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2," \
              "ending3,label"


def test_swag_reads_the_official_csv(tmp_path):
    path = _write(tmp_path, "val.csv", [
        SWAG_HEADER,
        '0,lsmdc3001_21_JUMP_STREET-422,17953,"Someone rides, then he","Someone rides, then '
        'he",he,gold,runs.,"jumps, high.",sits.,eats.,1'])
    (example,) = multiple_choice.read_examples(path)
    assert example.guid == "0" and example.label == 1
    assert example.context == "Someone rides, then he"
    assert example.pairs()[1] == ("Someone rides, then he", "he jumps, high.")
    test = _write(tmp_path, "test.csv", [SWAG_HEADER.rsplit(",", 1)[0],
                                         "0,v,1,s,A man.,He,gold,a,b,c,d"])
    assert multiple_choice.read_examples(test)[0].label is None


@pytest.mark.parametrize("row, message", [
    ("0,v,1,s,A man.,He,gold,a,b,c,d,4", r"val\.csv:3: label '4' is not one of 0\.\.3"),
    ("0,v,1,s,A man.,He,gold,a,b,c,1", r"val\.csv:3: row has 11 fields"),
    ("0,v,1,s,A man.,He,gold,a,,c,d,1", r"val\.csv:3: empty sent1 or ending"),
])
def test_swag_malformed_rows(tmp_path, row, message):
    good = "0,v,1,s,A man.,He,gold,a,b,c,d,0"
    with pytest.raises(FinetuneDataError, match=message):
        multiple_choice.read_examples(_write(tmp_path, "val.csv", [SWAG_HEADER, good, row]))
