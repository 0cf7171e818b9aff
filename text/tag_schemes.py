"""IOB tag schemes of token tagging (CoNLL-2003 NER): what a tag says and IOB1 -> IOB2, with no
reader or scorer behind them, so that the CoNLL reader (text/finetune/tagging.py), the
entity scorer (garden/metrics/tagging.py) and the serving graph share them without depending on
each other.
"""

from __future__ import annotations

from typing import List, Optional, Sequence


def tag_type(tag: str) -> Optional[str]:
    """None for "O", "PER" for "B-PER" / "I-PER"; ValueError for anything else."""
    if tag == "O":
        return None
    if len(tag) > 2 and tag[:2] in ("B-", "I-"):
        return tag[2:]
    raise ValueError(f"tag {tag!r} is not O, B-TYPE or I-TYPE")


def iob1_to_iob2(tags: Sequence[str]) -> List[str]:
    """IOB1 -> IOB2: an I-X that does not continue an X entity begins one (B-X). Identity on
    valid IOB2 tags."""
    out = []
    for i, tag in enumerate(tags):
        kind = tag_type(tag)
        if tag.startswith("I-") and (i == 0 or tag_type(tags[i - 1]) != kind):
            tag = "B-" + kind
        out.append(tag)
    return out
