"""ALBERT's pretraining (docs/objectives.md section 2): the `RECORD` garden.Pretraining reads for
`garden.Pretraining.family = 'albert'`.

Data: make_pretrain --objective=albert (BERT's features; next_sentence_labels holds the sentence
order: 1 = swapped). Model: AlbertPretrainer on the backbone factory's AlbertBackbone. Loss:
masked LM (n-gram masks) + sentence order prediction
(garden.models.albert.pretrainer.albert_pretrain_loss). Checkpoint objects: "model" and
"backbone".
"""

from __future__ import annotations

from garden.models.albert.pretrainer import albert_pretrain_loss
from garden.tasks.pretraining import sentence_pair_record

RECORD = sentence_pair_record(albert_pretrain_loss)
