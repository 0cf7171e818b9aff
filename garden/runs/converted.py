"""converted: a garden.convert output directory (garden.runs, the package docstring)."""

from __future__ import annotations

import posixpath
from typing import Optional

from garden.generate_dir import CONFIG_FILE as GENERATE_CONFIG
from garden.runs.base import (CONVERTED, CONVERTED_GENERATE_DIR, CONVERTED_PRETRAINER, Run,
                              TextSettings, masked_lm_of, switched)
from garden.runs.generate import GenerateRun


class ConvertedRun(Run):
    kind = CONVERTED
    cannot = {"task_model": "a pretrained backbone without a task head; fine-tune it with "
                            "garden.train (INIT_CHECKPOINT) and open that run directory",
              "generation": "it has no generate/ model directory (garden.convert writes one "
                            "when the source had a tokenizer garden.generate reads)",
              "lm": "an encoder, which does not generate; convert a GPT, GPT-2, T5 or BART "
                    "checkpoint",
              "masked_lm": f"it holds no {CONVERTED_PRETRAINER}: the checkpoint it was "
                           f"converted from had no pretraining heads"}

    def __init__(self, path: str, who: str):
        from garden import pretrained

        super().__init__(path, who)
        self.converted = pretrained.open_converted(path)
        tok = self.converted.tokenizer
        self.family, self.checkpoint = self.converted.family, self.converted.checkpoint
        lower_case = self.converted.lower_case
        if lower_case is None:  # unrecorded: encoders default to uncased, generative LMs not
            lower_case = "lm_class" not in self.converted.architecture
        self.text = TextSettings(self.converted.vocab, tok.get("tokenizer"), bool(lower_case),
                                 tok.get("layout"))

    @property
    def description(self) -> str:
        return self.converted.describe()

    def backbone(self, output_hidden_states: bool = False, output_attentions: bool = False,
                 use_head_mask: bool = False, max_seq_length: Optional[int] = None):
        from garden import pretrained

        backbone = pretrained.build_backbone(self.converted, None, self.who,
                                             output_hidden_states, max_seq_length=max_seq_length)
        pretrained.restore(backbone, self.checkpoint, "backbone", self.who)
        return switched(backbone, output_attentions, use_head_mask)

    def lm(self):
        from garden import pretrained

        if self.converted.lm_class() is None:
            raise self._refuse("lm")
        model = pretrained.build_lm(self.converted, None, self.who)
        pretrained.restore(model, self.checkpoint, "model", self.who)
        return model

    def masked_lm(self):
        """The source's pretrainer with its masked-LM head ({CONVERTED_PRETRAINER}, as
        garden.convert saved it), when it has one."""
        import keras
        import tensorflow as tf

        from garden import models

        path = posixpath.join(self.path, CONVERTED_PRETRAINER)
        if not tf.io.gfile.exists(path):
            raise self._refuse("masked_lm")
        models.spec(self.family)  # the family's classes, registered with Keras' loader
        return masked_lm_of(keras.saving.load_model(path), path)

    def generation(self):
        """The GenerationModel of its generate/ model directory (garden.convert's
        GENERATE_DIR: the LM with the ids of the source's config.json)."""
        import tensorflow as tf

        inner = posixpath.join(self.path, CONVERTED_GENERATE_DIR)
        if not tf.io.gfile.exists(posixpath.join(inner, GENERATE_CONFIG)):
            raise self._refuse("lm" if self.converted.lm_class() is None else "generation")
        return GenerateRun(inner, self.who).generation()
