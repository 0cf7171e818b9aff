"""ULMFiT's language-model stages (docs/objectives.md section 13): the `RECORD` garden.Pretraining
reads for `garden.Pretraining.family = 'ulmfit'` with `objective = 'bilm'`.

Data: make_pretrain --objective=bilm (<S> sentence </S> streams in full blocks: input_ids,
input_mask). Model: AwdLstmLM on the backbone factory's AwdLstmBackbone. Objective: GPT-2's
next-token cross-entropy (gpt2.py: position t scores token t + 1 where both are real), the
forward LM that ULMFiT trains; only the model differs from GPT-2's record. Checkpoint objects:
"model" (the LM) and "backbone", which the classifier stage restores (INIT_CHECKPOINT).
"""

from __future__ import annotations

import dataclasses

from garden.tasks.pretraining import gpt2, pretrainer_on_backbone, pretrainer_summary

RECORD = dataclasses.replace(gpt2.RECORD, build=pretrainer_on_backbone, summary=pretrainer_summary)
