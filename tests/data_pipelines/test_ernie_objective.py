"""docs/objectives.md section 5 (ERNIE 1.0: unit masking over words, phrases and entities + NSP),
checked on the objective's functions and on OBJECTIVE.create_instances as the job calls it.

Tolerances are binomial: |observed - expected| <= 5 * sqrt(p (1 - p) / n).
"""

import math
import re

import numpy as np
import pytest

from text import features
from data_pipelines.objectives import base, ernie
from objective_testing import objective_parser, originals, within
from text import vocab as text_vocab

CLS, SEP, MASK = 2, 3, 4
WORDS = range(5, 45)         # word-start pieces of ordinary words
CONT = range(45, 65)         # "##" pieces of ordinary words
UNIT_WORDS = range(65, 100)  # word-start pieces used only inside multi-word units
UNIT_CONT = range(100, 110)  # "##" pieces used only inside multi-word units


def _vocab():
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"##c{i}" if i in CONT or i in UNIT_CONT else f"w{i}" for i in range(5, 110)]
    return text_vocab.make_vocab(tokens, {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                                    "mask": "[MASK]"}, word_start=lambda t: not t.startswith("##"), name="test-wp")


def _docs(rng, num_docs, sentences, items):
    """Sentences of ordinary words (1-3 pieces) and, with prob 0.3 per item, a unit of 2-3
    words from the unit-only ranges (annotated in Doc.units); an ordinary word always follows
    a unit, so a maximal run of unit-range pieces in an instance is one unit (or the part of
    it that truncation left)."""
    docs = []
    for k in range(num_docs):
        segs, units = [], []
        for _ in range(sentences):
            seg, seg_units = [], []
            for _ in range(items):
                if rng.random() < 0.3:
                    start = len(seg)
                    for _ in range(int(rng.integers(2, 4))):
                        seg.append(int(rng.integers(UNIT_WORDS.start, UNIT_WORDS.stop)))
                        seg += [int(x) for x in rng.integers(UNIT_CONT.start, UNIT_CONT.stop, size=int(rng.integers(0, 2)))]
                    seg_units.append((start, len(seg)))
                seg.append(int(rng.integers(WORDS.start, WORDS.stop)))
                seg += [int(x) for x in rng.integers(CONT.start, CONT.stop, size=int(rng.integers(0, 3)))]
            segs.append(seg)
            units.append(seg_units)
        docs.append(base.Doc(f"doc{k:03d}", segs, units))
    return docs


def _run(docs, vocab, opts, dupes=(0,)):
    out, stats = [], {}
    for d in dupes:
        ctx = base.PoolContext(seed=7, dupe=d, vocab=vocab, options=opts)
        out += [f for _, f in ernie.OBJECTIVE.create_instances(docs, ctx)]
        for k, v in ctx.stats.items():
            stats[k] = stats.get(k, 0) + v
    return out, stats


def _groups(ids, vocab):
    """(multi-word unit runs, ordinary words) of an unmasked sequence, as position lists."""
    units, words = [], []
    prev_unit = False
    for i, t in enumerate(ids):
        if t in (CLS, SEP):
            prev_unit = False
            words.append(None)
            continue
        in_unit = t in UNIT_WORDS or t in UNIT_CONT
        if in_unit:
            if prev_unit:
                units[-1].append(i)
            else:
                units.append([i])
        elif vocab.is_word_start[t] or not words or words[-1] is None:
            words.append([i])
        else:
            words[-1].append(i)
        prev_unit = in_unit
    return units, [w for w in words if w]


@pytest.fixture(scope="module")
def unit_level():
    vocab = _vocab()
    docs = _docs(np.random.default_rng(0), 40, 25, 6)
    opts = ernie.ErnieOptions(max_seq_length=96, max_predictions_per_seq=14)
    instances, stats = _run(docs, vocab, opts)
    return vocab, opts, instances, stats


def test_masked_units_and_words_are_whole(unit_level):
    vocab, _, instances, stats = unit_level
    assert len(instances) > 150
    masked_units = mixed_fates = 0
    for inst in instances:
        ids = originals(inst)
        masked = set(inst["masked_lm_positions"])
        units, words = _groups(ids, vocab)
        for group in units + words:
            hit = masked.intersection(group)
            assert not hit or hit == set(group), f"partially masked unit/word {group}: {sorted(masked)}"
        for unit in units:
            if masked.issuperset(unit):
                masked_units += 1
                # 80/10/10 is decided per piece (as ERNIE 1.0's code), so a unit's pieces can differ.
                mixed_fates += len({inst["input_ids"][p] == MASK for p in unit}) > 1
    assert masked_units > 200 and mixed_fates > 10
    assert stats["masked_multiword_units"] >= masked_units * 0.9


def test_mask_rate_and_80_10_10(unit_level):
    vocab, _, instances, _ = unit_level
    total = budget_total = n = masked = kept = 0
    for inst in instances:
        # BERT's budget: 15% of 96 -> 14 predictions.
        budget = min(14, max(1, round(len(inst["input_ids"]) * 0.15)))
        got = len(inst["masked_lm_positions"])
        assert got <= budget
        total += got
        budget_total += budget
        for pos, label in zip(inst["masked_lm_positions"], inst["masked_lm_ids"]):
            n += 1
            masked += inst["input_ids"][pos] == MASK
            kept += inst["input_ids"][pos] == label
    # A unit larger than the remaining budget is skipped, but single-piece words fill the rest.
    assert total >= 0.97 * budget_total
    V = vocab.size
    assert within(masked, n, 0.8 + 0.1 / V) and within(kept, n, 0.1 + 0.1 / V)


def test_piece_level_instances_ignore_units():
    vocab = _vocab()
    docs = _docs(np.random.default_rng(1), 30, 25, 6)
    opts = ernie.ErnieOptions(max_seq_length=96, max_predictions_per_seq=14, unit_level_fraction=0.0)
    instances, stats = _run(docs, vocab, opts)
    partial = 0
    for inst in instances:
        masked = set(inst["masked_lm_positions"])
        units, _ = _groups(originals(inst), vocab)
        partial += sum(1 for u in units if masked.intersection(u) and not masked.issuperset(u))
    assert partial > 50 and "unit_level_instances" not in stats

    opts = ernie.ErnieOptions(max_seq_length=96, max_predictions_per_seq=14, unit_level_fraction=0.5)
    instances, stats = _run(docs, vocab, opts, dupes=range(3))
    assert within(stats["unit_level_instances"], len(instances), 0.5)


def test_nsp_labels(unit_level):
    _, _, instances, _ = unit_level
    random_next = sum(inst["next_sentence_labels"][0] for inst in instances)
    # BERT's NSP: 0.5 plus half the share of single-segment chunks (a few per document).
    assert 0.5 - 5 * math.sqrt(0.25 / len(instances)) <= random_next / len(instances) <= 0.75


# --- helpers -------------------------------------------------------------------------------


def test_units_from_char_spans_exact():
    # "new york city is big" as five pieces.
    starts, ends = [0, 4, 9, 14, 17], [3, 8, 13, 16, 20]
    f = ernie.units_from_char_spans
    assert f(starts, ends, [(0, 8)]) == [(0, 2)]
    assert f(starts, ends, [(1, 6)]) == [(0, 2)]                 # unaligned: widened to whole pieces
    assert f(starts, ends, [(8, 9), (5, 5), (30, 40)]) == []     # a space, an empty span, past the end
    assert f(starts, ends, [(14, 20), (0, 13), (4, 8)]) == [(0, 3), (3, 5)]  # sorted; nested merged
    assert f(starts, ends, []) == []
    # "playing" -> play ##ing: a span over "play" covers the first piece only.
    assert f([0, 4], [4, 7], [(0, 4)]) == [(0, 1)]


def _pieces(text):
    """Words and punctuation as pieces, with UTF-8 byte offsets."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", text)]
    to_byte = lambda k: len(text[:k].encode("utf-8"))  # noqa: E731
    return [to_byte(a) for a, _ in spans], [to_byte(b) for _, b in spans], [text[a:b] for a, b in spans]


@pytest.mark.parametrize("text, expected", [
    ("The United Nations met in New York, said John Smith (Jr.) on Monday.",
     [["United", "Nations"], ["New", "York"], ["John", "Smith"]]),
    ("Er besuchte Zürich Hauptbahnhof gestern.", [["Zürich", "Hauptbahnhof"]]),
    ("New York is big.", []),                                  # the first word never counts
    ("we met john smith in new york", []),                     # lower-cased text: no units
    ("I saw Mary Jones, Bob Lee and Ann.", [["Mary", "Jones"], ["Bob", "Lee"]]),
    ("We Saw A B C D E F G Today", []),                        # 9 capitalised words: a heading
])
def test_heuristic_units_exact(text, expected):
    starts, ends, pieces = _pieces(text)
    units = ernie.heuristic_units(text, starts, ends)
    assert [pieces[a:b] for a, b in units] == expected


def test_find_units_prefers_annotations():
    text = "The United Nations met."
    starts, ends, _ = _pieces(text)
    assert ernie.find_units(text, starts, ends, None) == [(1, 3)]
    assert ernie.find_units(text, starts, ends, []) == []
    assert ernie.find_units(text, starts, ends, [(19, 22)]) == [(3, 4)]


def test_segment_groups_widen_units_to_words():
    vocab = _vocab()
    w, c = 5, 45
    seg = [w, c, w + 1, w + 2, c + 1, w + 3]  # words: [0, 1] [2] [3, 4] [5]
    labels, multi = ernie.segment_groups(seg, [(1, 3)], vocab.is_word_start)
    assert labels == [0, 0, 0, 2, 2, 3] and multi[0] and not multi[2]
    labels, _ = ernie.segment_groups(seg, [(0, 3), (2, 4)], vocab.is_word_start)
    assert labels == [0, 0, 0, 0, 0, 3]
    bad = []
    labels, _ = ernie.segment_groups(seg, [(4, 9), (3, 3)], vocab.is_word_start, lambda: bad.append(1))
    assert labels == [0, 0, 1, 2, 2, 3] and len(bad) == 2
    assert ernie.pair_groups(["a", "a", "b"], ["b", "c"]) == [[1, 2], [3], [5], [6]]


# --- objective -----------------------------------------------------------------------------


def test_bad_input_gives_instances_or_counted_skips():
    vocab = _vocab()
    opts = ernie.ErnieOptions(max_seq_length=16, max_predictions_per_seq=3)
    assert _run([], vocab, opts) == ([], {})
    out, stats = _run([base.Doc("one", [[5, 6, 7]], [[(0, 2)]])], vocab, opts)
    assert len(out) == 1 and stats["random_next_same_document"] == 1
    docs = [base.Doc("no-units", [[5, 6], [7, 8]]),                       # units None: words only
            base.Doc("misaligned", [[5, 6], [7, 8]], [[(0, 2)]]),         # one list for two segments
            base.Doc("bad-unit", [[5, 6], [7, 8]], [[(1, 7)], []]),       # out of range
            base.Doc("long", [list(range(5, 45)) * 3], [[(0, 30)]]),      # longer than the sequence
            base.Doc("empty", [[]], [[]])]
    out, stats = _run(docs, vocab, opts)
    assert stats["dropped/units_misaligned"] >= 1 and stats["dropped/bad_unit"] >= 1
    assert stats["dropped/empty_document"] == 1
    spec = ernie.OBJECTIVE.feature_spec(opts)
    assert spec == features.bert_pretrain_spec(16, 3)
    for inst in out:
        assert len(inst["input_ids"]) <= 16
        features.serialize_example(spec, inst)


def test_flags_and_record():
    parser = objective_parser(ernie.OBJECTIVE)
    opts = ernie.OBJECTIVE.make_options(parser.parse_args([]))
    assert (opts.max_seq_length, opts.max_predictions_per_seq, opts.unit_level_fraction) == (128, 20, 1.0)
    assert ernie.OBJECTIVE.make_options(parser.parse_args(["--unit_level_fraction=0.25"])).unit_level_fraction == 0.25
    with pytest.raises(ValueError, match=r"unit_level_fraction must be in \[0, 1\], got 1.5"):
        ernie.OBJECTIVE.make_options(parser.parse_args(["--unit_level_fraction=1.5"]))
    assert ernie.OBJECTIVE.wants_units and ernie.OBJECTIVE.find_units is ernie.find_units
    assert ernie.OBJECTIVE.tokenizer == "wordpiece"


def test_summary(unit_level):
    _, _, instances, stats = unit_level
    summary = ernie.OBJECTIVE.summarize({**stats, "instances": len(instances)})
    assert summary["unit_level_fraction"] == 1.0
    assert 0.1 < summary["masked_token_rate"] < 0.2 and 0 < summary["multiword_unit_fraction"] < 1
