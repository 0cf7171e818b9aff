"""generate: a garden.generate model directory (garden.generate_dir; garden.runs, the package
docstring)."""

from __future__ import annotations

import posixpath

from garden.generate_dir import CONFIG_FILE as GENERATE_CONFIG
from garden.generate_dir import FORMAT as GENERATE_FORMAT
from garden.generate_dir import MODEL_FILE as GENERATE_MODEL
from garden.runs.base import GENERATE, Run, RunError, TextSettings, family_of, read_json


class GenerateRun(Run):
    kind = GENERATE
    cannot = {"backbone": "a Keras-saved GenerativeLM; take run.lm().backbone",
              "task_model": "a GenerativeLM without a task head; use run.lm()",
              "masked_lm": "a GenerativeLM, which predicts the next token; use run.lm()"}

    def __init__(self, path: str, who: str):
        super().__init__(path, who)
        where = posixpath.join(path, GENERATE_CONFIG)
        self.config = read_json(where)
        if self.config.get("format") != GENERATE_FORMAT:
            raise RunError(f"{where}: format {self.config.get('format')!r}, expected "
                           f"{GENERATE_FORMAT!r}")
        missing = [k for k in ("model_module", "model_class", "tokenizer", "vocab", "eos_id",
                               "pad_id") if k not in self.config]
        if missing:
            raise RunError(f"{where} lacks {missing}")
        self.text = TextSettings(posixpath.join(path, self.config["vocab"]),
                                 self.config["tokenizer"],
                                 bool(self.config.get("lower_case", False)))

    def lm(self):
        import importlib

        import keras

        config, where = self.config, posixpath.join(self.path, GENERATE_CONFIG)
        try:
            cls = getattr(importlib.import_module(config["model_module"]), config["model_class"])
        except (ImportError, AttributeError) as e:
            raise RunError(f"{where}: cannot import the model class "
                           f"{config['model_module']}.{config['model_class']} ({e})") from None
        custom = {cls.__name__: cls, keras.saving.get_registered_name(cls): cls}
        model = keras.saving.load_model(posixpath.join(self.path, GENERATE_MODEL),
                                        custom_objects=custom, compile=False)
        self.family = self.family or family_of(getattr(model, "backbone", None))
        return model

    def generation(self):
        """garden.generate_dir.GenerationModel: the model, its tokenizer, the recorded ids."""
        from garden.generate_dir import GenerationModel

        ids = lambda key: [int(i) for i in self.config.get(key, [])]  # noqa: E731
        return GenerationModel(model=self.lm(), tokenizer=self.text.tokenizer(),
                               eos_id=int(self.config["eos_id"]),
                               pad_id=int(self.config["pad_id"]),
                               prompt_prefix_ids=ids("prompt_prefix_ids"),
                               encoder_prefix_ids=ids("encoder_prefix_ids"),
                               encoder_suffix_ids=ids("encoder_suffix_ids"),
                               decoder_start_ids=ids("decoder_start_ids"))
