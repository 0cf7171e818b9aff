"""Sample SWAG task: four-way next-sentence choice from the sample corpus, as SWAG's CSV.

For a sentence i of a document (sent1), the next sentence i + 1 is cut after its first
START_WORDS words: the start is sent2, the rest the gold ending; the three distractors are the
rests of sentences (cut the same way) of the other source in the same split: a
language-reference context gets endings of module docstrings and vice versa, so that a small
model learns the choice from vocabulary and style in a few dozen steps (with distractors of the
same source a tiny BERT stayed near chance: 0.29 against 0.26 after 100 steps). The gold
ending's position (label 0..3) is drawn uniformly. Documents go to val (dev) when
sha256(name) % 5 == 0, to train otherwise (data_pipelines.sample_tasks.classification.split_of).
Files: train.csv, val.csv with SWAG's columns (an unnamed index column first, then video-id,
fold-ind, startphrase, sent1, sent2, gold-source, ending0..3, label).

Trivial baseline: always the train set's most frequent label position (about 0.25 on val).
"""

from __future__ import annotations

import collections
import csv
import os
import re

from data_pipelines.sample_tasks.classification import Documents, by_split, rng

START_WORDS = 2
MIN_ENDING_WORDS = 3
MAX_PER_SPLIT = {"train": 1200, "val": 400}


def _cut(sentence: str):
    words = re.findall(r"\S+", sentence)
    if len(words) < START_WORDS + MIN_ENDING_WORDS:
        return None
    return " ".join(words[:START_WORDS]), " ".join(words[START_WORDS:])


def write(documents: Documents, output_dir: str) -> dict:
    # Imported here: the SWAG reader's package imports TensorFlow (~7 s), which the other
    # sample tasks do not need.
    from text.finetune.multiple_choice import COLUMNS

    os.makedirs(output_dir, exist_ok=True)
    counts, labels = {}, {}
    for split, docs in by_split(documents).items():
        split = "val" if split == "dev" else split
        endings = [(name, _cut(s)) for name, ss in docs for s in ss]
        endings = [(name, cut[1]) for name, cut in endings if cut]
        # by source: True -> endings of language-reference topics, False -> of modules
        endings_of = {True: [e for e in endings if e[0].startswith("topic:")],
                      False: [e for e in endings if not e[0].startswith("topic:")]}
        contexts = [(name, i, ss[i], _cut(ss[i + 1])) for name, ss in docs
                    for i in range(len(ss) - 1)]
        contexts = [c for c in contexts if c[3]]
        order = rng("swag-order", split)
        order.shuffle(contexts)
        rows = []
        for k, (name, i, sent1, (start, gold)) in enumerate(contexts[:MAX_PER_SPLIT[split]]):
            pick = rng("swag", name, i)
            distractors = []
            pool = endings_of[not name.startswith("topic:")]
            while len(distractors) < 3:
                other_name, ending = pool[pick.randrange(len(pool))]
                if ending not in distractors and ending != gold:
                    distractors.append(ending)
            label = pick.randrange(4)
            choices = distractors[:label] + [gold] + distractors[label:]
            rows.append([str(k), name, str(i), f"{sent1} {start}", sent1, start, "gold",
                         *choices, str(label)])
        with open(os.path.join(output_dir, f"{split}.csv"), "w", encoding="utf-8",
                  newline="") as f:
            writer = csv.writer(f, dialect="excel", lineterminator="\n")
            writer.writerow(["", *COLUMNS])
            writer.writerows(rows)
        counts[split] = {"examples": len(rows)}
        labels[split] = [r[-1] for r in rows]
    position = collections.Counter(labels["train"]).most_common(1)[0][0]
    value = sum(y == position for y in labels["val"]) / len(labels["val"])
    return {"files": ["train.csv", "val.csv"], "format": "SWAG CSV", "counts": counts,
            "baseline": {"name": "most frequent train label position", "label": int(position),
                         "metric": "accuracy", "value": value}}
