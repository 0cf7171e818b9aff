"""CoNLL-2003 fixtures shared by the reader and make_finetune tests: the shared task's own
first sentences (eng.train, IOB1: entities start with I-) and a WordPiece vocabulary that
covers them."""

ENG_TRAIN_HEAD = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
to TO B-VP O
boycott VB I-VP O
British JJ B-NP I-MISC
lamb NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER
"""

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "eu", "rejects", "german", "call", "to",
         "boy", "##cot", "##t", "british", "lamb", ".", "peter", "black", "##burn"]
