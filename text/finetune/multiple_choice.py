"""Multiple-choice data: SWAG (Zellers et al., 2018), four-way multiple choice of the next event,
as its CSV files.

`read_examples(path)` -> [SwagExample(guid, context, start, endings, label)] in file order.

Columns (the official train.csv / val.csv, RFC 4180 CSV with a header; the distributed files
start with an unnamed index column, which is kept as the guid when present):
    video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0, ending1, ending2,
    ending3, label
test.csv has no label column (label None). As Hugging Face's run_swag pairs them, choice i is
the pair (sent1, sent2 + " " + ending<i>): `SwagExample.pairs()`.

Malformed rows (a wrong number of fields, an empty sent1 or ending, a label that is not 0..3)
raise FinetuneDataError "file:line: what".
"""

from __future__ import annotations

import csv
import dataclasses
import io
from typing import List, Optional, Tuple

from text.finetune import FinetuneDataError
from text.finetune.base import read_text

NUM_CHOICES = 4
COLUMNS = ("video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
           "ending0", "ending1", "ending2", "ending3", "label")


@dataclasses.dataclass(frozen=True)
class SwagExample:
    guid: str
    context: str  # sent1
    start: str  # sent2: the first words of the next sentence
    endings: Tuple[str, ...]
    label: Optional[int]  # None in test.csv

    def pairs(self) -> List[Tuple[str, str]]:
        """(first segment, second segment) of each choice: (sent1, "sent2 ending_i")."""
        return [(self.context, f"{self.start} {ending}".strip()) for ending in self.endings]


def read_examples(path: str) -> List[SwagExample]:
    """The examples of a SWAG CSV (train, val or test), in file order."""
    text = read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""), dialect="excel", strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise FinetuneDataError(f"{path} is empty")
        index_column = bool(header) and header[0] == ""
        names = header[1:] if index_column else header
        required = [c for c in COLUMNS if c != "label"]
        missing = [c for c in required if c not in names]
        if missing:
            raise FinetuneDataError(f"{path}:1: header lacks the SWAG columns {missing}")
        has_label = "label" in names
        col = {name: header.index(name) for name in COLUMNS if name in header}
        examples = []
        for fields in reader:
            line = reader.line_num
            where = f"{path}:{line}"
            if not fields:
                continue
            if len(fields) != len(header):
                raise FinetuneDataError(f"{where}: row has {len(fields)} fields, the header "
                                        f"names {len(header)}")
            endings = tuple(fields[col[f"ending{i}"]] for i in range(NUM_CHOICES))
            context = fields[col["sent1"]]
            if not context.strip() or not all(e.strip() for e in endings):
                raise FinetuneDataError(f"{where}: empty sent1 or ending")
            label = None
            if has_label:
                value = fields[col["label"]]
                if value not in {str(i) for i in range(NUM_CHOICES)}:
                    raise FinetuneDataError(f"{where}: label {value!r} is not one of 0..3")
                label = int(value)
            guid = fields[0] if index_column and fields[0] else f"swag-{line}"
            examples.append(SwagExample(guid, context, fields[col["sent2"]], endings, label))
    except csv.Error as e:
        raise FinetuneDataError(f"{path}:{reader.line_num}: {e}") from None
    if not examples:
        raise FinetuneDataError(f"{path} has a header but no examples")
    return examples
