"""A synthetic corpus whose sentence order can be read from the text:
`python -m data_pipelines.ordered_corpus --output=DIR [--num_files=4] [--documents_per_file=600]
[--seed=0] [--no-markers]`.

Why: on the sample corpus (Python's documentation, `data_pipelines.sample_corpus`) the order of
two spans of a docstring is often not recoverable even by a reader (docstrings list facts in any
order and repeat sentences), so a short run of a tiny model cannot show whether sentence-order
prediction (ALBERT's SOP) learns at all. Here every document narrates a procedure whose order a
reader can always recover, so a model that learns SOP should beat 50% clearly.

A document is one procedure of 4..9 steps, one sentence per step. Step k (of n):

* opens with a marker saying where it stands (unless --no-markers): "first" for k = 0,
  "finally" for k = n - 1, and in between either the ordinal ("second", "third", ...; half the
  time) or a connective that never opens a procedure ("then", "next", "after that");
* introduces a new object and refers back to the previous step's object with "the", so the
  content chains even without markers: "first , take a red lamp from the shelf ." /
  "then , put the small cup next to the lamp ." / "finally , wrap the cup with the rope ."
  Objects are drawn without replacement within a document, so each is introduced once;
* may end with a short clause of words from the same fixed lists ("... so that the cup stays
  dry"), to vary the content.

Words come from the fixed lists below (about 100 nouns, 30 adjectives, 20 verbs, 12 places);
nothing is downloaded. Randomness is drawn per document from random.Random("seed:index"), so
the output depends only on (--seed, --num_files, --documents_per_file) and not on the Python
version's hash seed. The output format is sample_corpus's: ``corpus-0000K-of-0000N.txt``, one
sentence per line, a blank line between documents, documents dealt round-robin to the files.
Sentences are lower-case with spaced punctuation (the vocabularies lower-case anyway).
"""

from __future__ import annotations

import argparse
import random
from typing import List, Tuple

from text.flags import add_bool
from data_pipelines.sample_corpus import write_corpus

NOUNS = (
    "apple", "basket", "bell", "blanket", "board", "book", "bottle", "bowl", "box", "brush",
    "bucket", "button", "cable", "candle", "card", "carpet", "chain", "chair", "clock", "cloth",
    "coin", "comb", "cup", "curtain", "cushion", "dish", "drum", "envelope", "fan", "feather",
    "flag", "flower", "fork", "frame", "glass", "glove", "hammer", "hat", "hook", "jar",
    "jug", "kettle", "key", "knife", "ladder", "lamp", "leaf", "lid", "lock", "map",
    "mask", "mirror", "mug", "nail", "needle", "net", "note", "pan", "paper", "pen",
    "pencil", "pillow", "pin", "pipe", "plate", "pot", "ribbon", "ring", "rope", "ruler",
    "sack", "saucer", "scarf", "screw", "shell", "shoe", "sock", "spoon", "stamp", "stick",
    "stone", "string", "table", "tape", "teapot", "ticket", "tile", "towel", "tray", "tube",
    "umbrella", "vase", "wheel", "whistle", "wire", "brick", "bag", "pebble", "spring", "wallet",
)
ADJECTIVES = (
    "red", "blue", "green", "yellow", "white", "black", "small", "large", "old", "new",
    "heavy", "light", "round", "flat", "long", "short", "soft", "hard", "clean", "dusty",
    "wooden", "metal", "paper", "glass", "striped", "narrow", "wide", "bright", "dark", "warm",
)
# (verb, preposition) for "put the X <preposition> the Y"; the first step uses FIRST_VERBS.
VERBS = (
    ("put", "next to"), ("place", "on"), ("set", "beside"), ("move", "behind"),
    ("slide", "under"), ("hang", "above"), ("tie", "to"), ("attach", "to"), ("press", "against"),
    ("lean", "against"), ("stack", "on"), ("fold", "around"), ("wrap", "with"), ("fill", "with"),
    ("cover", "with"), ("join", "with"), ("line up", "with"), ("push", "toward"),
    ("drop", "into"), ("pack", "into"),
)
FIRST_VERBS = ("take", "pick up", "find", "bring", "fetch", "get")
PLACES = (
    "shelf", "drawer", "floor", "cupboard", "garden", "kitchen", "desk", "window", "corner",
    "cellar", "attic", "porch",
)
STATES = ("dry", "still", "warm", "clean", "safe", "straight", "steady", "cool", "visible", "tidy")
ORDINALS = ("second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")
CONNECTIVES = ("then", "next", "after that")
MIN_STEPS, MAX_STEPS = 4, 9  # MAX_STEPS - 2 middle steps at most: ORDINALS covers them


def _marker(rng: random.Random, k: int, n: int) -> str:
    if k == 0:
        return "first"
    if k == n - 1:
        return "finally"
    return ORDINALS[k - 1] if rng.random() < 0.5 else rng.choice(CONNECTIVES)


def procedure(rng: random.Random, markers: bool = True, min_steps: int = MIN_STEPS,
              max_steps: int = MAX_STEPS) -> List[str]:
    """One document: the sentences of a procedure of min_steps..max_steps steps, in order."""
    n = rng.randint(min_steps, max_steps)
    objects = rng.sample(NOUNS, n)
    sentences = []
    for k, obj in enumerate(objects):
        adjective = rng.choice(ADJECTIVES)
        if k == 0:
            body = f"{rng.choice(FIRST_VERBS)} a {adjective} {obj} from the {rng.choice(PLACES)}"
        else:
            verb, preposition = rng.choice(VERBS)
            body = f"{verb} the {adjective} {obj} {preposition} the {objects[k - 1]}"
        if rng.random() < 0.4:  # vary the content: a clause about this step's object
            body += f" so that the {obj} stays {rng.choice(STATES)}"
        sentence = f"{_marker(rng, k, n)} , {body} ." if markers else f"{body} ."
        sentences.append(sentence)
    return sentences


def documents(num_documents: int, seed: int = 0, markers: bool = True, min_steps: int = MIN_STEPS,
              max_steps: int = MAX_STEPS) -> List[Tuple[str, List[str]]]:
    """(name, sentences) of documents 0..num_documents-1; document i depends only on (seed, i)."""
    if not 2 <= min_steps <= max_steps <= MAX_STEPS:
        raise ValueError(f"need 2 <= min_steps <= max_steps <= {MAX_STEPS} (the ordinals end at "
                         f"{ORDINALS[-1]!r}), got {min_steps}..{max_steps}")
    return [(f"procedure:{i}", procedure(random.Random(f"{seed}:{i}"), markers, min_steps, max_steps))
            for i in range(num_documents)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m data_pipelines.ordered_corpus",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--output", required=True, help="directory for corpus-*-of-*.txt")
    p.add_argument("--num_files", type=int, default=4)
    p.add_argument("--documents_per_file", type=int, default=600,
                   help="procedures per file (default %(default)s: about 230 KB per file)")
    p.add_argument("--seed", type=int, default=0, help="the documents are a function of the seed")
    p.add_argument("--min_steps", type=int, default=MIN_STEPS, help="fewest steps (sentences) of a "
                   "procedure (default %(default)s)")
    p.add_argument("--max_steps", type=int, default=MAX_STEPS, help="most steps of a procedure "
                   "(default and at most %(default)s)")
    add_bool(p, "markers", True, "open each step with first / second / then / ... / finally; "
             "--no-markers leaves only the chained objects as the order cue")
    args = p.parse_args(argv)
    if args.num_files < 1 or args.documents_per_file < 1:
        p.error("--num_files and --documents_per_file must be >= 1")
    try:
        docs = documents(args.num_files * args.documents_per_file, args.seed, args.markers,
                         args.min_steps, args.max_steps)
    except ValueError as e:  # the --min_steps/--max_steps range
        p.error(str(e))
    paths = write_corpus(docs, args.output, args.num_files)
    n_sent = sum(len(s) for _, s in docs)
    print(f"ordered corpus: {len(paths)} files in {args.output}, {len(docs)} documents, "
          f"{n_sent} sentences (seed {args.seed}, markers {'on' if args.markers else 'off'})")


if __name__ == "__main__":
    main()
