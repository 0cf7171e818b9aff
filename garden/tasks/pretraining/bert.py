"""BERT's pretraining (docs/objectives.md section 1): the `RECORD` garden.Pretraining reads for
`garden.Pretraining.family = 'bert'`, and for ERNIE (section 3) with `objective = 'ernie'`
(knowledge-unit masks in BERT's features, BERT's model).

Data: make_pretrain --objective=bert (text/features.py bert_pretrain_spec). Model: BertPretrainer
on the backbone factory's BertBackbone. Loss: masked LM + next sentence prediction
(garden.models.bert.pretrainer.bert_pretrain_loss), the MLM mean over the global count of real
masked slots. Checkpoint objects: "model" and "backbone".
"""

from __future__ import annotations

from garden.models.bert.pretrainer import bert_pretrain_loss
from garden.tasks.pretraining import sentence_pair_record

RECORD = sentence_pair_record(bert_pretrain_loss)
