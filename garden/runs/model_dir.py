"""model_dir: a garden.train run directory, its task rebuilt from operative_config.gin and its
newest checkpoint restored (garden.runs, the package docstring)."""

from __future__ import annotations

import posixpath
from typing import Callable, Dict, Optional, Sequence

from garden.pretrained import CHECKPOINT_DIR
from garden.runs.base import (MODEL_DIR, OPERATIVE_CONFIG, Run, RunError, TextSettings, family_of,
                              masked_lm_of,
                              switched)


class ModelDirRun(Run):
    kind = MODEL_DIR

    def __init__(self, path: str, who: str, gin_params: Sequence[str] = ()):
        import gin
        import tensorflow as tf

        from garden import tasks, train  # noqa: F401 (registers train and the task table)

        super().__init__(path, who)
        tasks.register_with_gin()
        gin.clear_config()
        try:
            # gin's finalize hooks check the references (a retired name fails here); the
            # process's config is left unlocked for its caller (a notebook, a test, another run).
            with gin.unlock_config():
                gin.parse_config_files_and_bindings([posixpath.join(path, OPERATIVE_CONFIG)],
                                                    list(gin_params), skip_unknown=True)
        except ValueError as e:  # e.g. train.task = @garden.<a retired name>(): say its new one
            hint = tasks.renamed_hint(str(e))
            raise RunError(f"{posixpath.join(path, OPERATIVE_CONFIG)}: {str(e).splitlines()[0]}"
                           + (f" ({hint}: replace the name in that file)" if hint else "")
                           ) from None
        self.task = gin.query_parameter("train.task").scoped_configurable_fn()
        self.checkpoint = tf.train.latest_checkpoint(posixpath.join(path, CHECKPOINT_DIR))
        if self.checkpoint is None:
            raise RunError(f"{path} is a garden.train run directory without a checkpoint in "
                           f"{posixpath.join(path, CHECKPOINT_DIR)} (did the run save one?)")
        self.converted = getattr(self.task, "converted", None)  # its init_checkpoint's, or None
        vocab = getattr(self.task, "vocab", None)
        layout = getattr(self.task, "layout", None) or (
            self.converted.tokenizer.get("layout") if self.converted is not None else None)
        self.text = TextSettings(vocab, getattr(self.task, "tokenizer_kind", None),
                                 bool(getattr(self.task, "lower_case", True)), layout)
        self.objects: Dict[str, object] = {}
        self.family = self.converted.family if self.converted is not None else None
        self._built: Optional[str] = None  # the backbone's class name, once built

    @property
    def description(self) -> str:
        """"<backbone class> of PATH (ckpt-N)" once the backbone is built (the task's before)."""
        return f"{self._built or type(self.task).__name__} of {self.path} " \
               f"({posixpath.basename(self.checkpoint)})"

    def task_model(self):
        """The task's model, restored from the newest checkpoint (the task's prepare() reads
        its files first, as training did). run.objects holds every checkpointed object."""
        import tensorflow as tf

        if not self.objects:
            self.task.prepare()
            _, self.objects = self.task.build_model()
            status = tf.train.Checkpoint(**self.objects).read(self.checkpoint)
            status.expect_partial()
            status.assert_existing_objects_matched()
        return self.objects["model"]

    def backbone(self, output_hidden_states: bool = False, output_attentions: bool = False,
                 use_head_mask: bool = False, max_seq_length: Optional[int] = None):
        """The task's backbone: the task model's once task_model() has built it; else built
        from the task's backbone factory and vocabulary (no task files read) when it has one
        and the checkpoint a `backbone`; else the task model's."""
        from garden import pretrained

        factory = getattr(self.task, "backbone_fn", None)
        if self.objects or factory is None or \
                "backbone" not in pretrained.checkpoint_objects(self.checkpoint):
            model = self.task_model()
            # A task that checkpoints its GenerativeLM alone (T5 pretraining): the LM's backbone.
            backbone = self.objects.get("backbone", getattr(model, "backbone", None))
            if backbone is None:
                raise RunError(f"{self.path}: its task {type(self.task).__name__} has no "
                               f"backbone (it checkpoints {sorted(self.objects)})")
            if output_hidden_states:
                from garden.models.instrument import instrumented

                backbone = instrumented(backbone, output_hidden_states=True)
        else:
            backbone = self._backbone_from_factory(factory, output_hidden_states, max_seq_length)
        self.family = self.family or family_of(backbone)
        self._built = type(backbone).__name__
        return switched(backbone, output_attentions, use_head_mask)

    def _backbone_from_factory(self, factory: Callable, output_hidden_states: bool,
                               max_seq_length: Optional[int]):
        from garden import pretrained
        from garden.tasks.shared import make_backbone, restore_backbone

        packer = self.packer(max_seq_length or getattr(self.task, "max_seq_length", 128))
        if self.converted is not None:  # the converted architecture, not the factory's preset
            backbone = pretrained.build_backbone(
                self.converted, factory, self.who, output_hidden_states,
                vocab_size=packer.vocab_size, max_seq_length=max_seq_length)
        else:
            backbone = make_backbone(factory, packer, output_hidden_states=output_hidden_states)
        restore_backbone(backbone, self.checkpoint, "backbone", self.who)
        return backbone

    def lm(self):
        model = self.task_model()
        if not hasattr(model, "is_encoder_decoder"):
            raise RunError(f"{self.path}: its task {type(self.task).__name__} trains "
                           f"{type(model).__name__}, not a GenerativeLM (garden.generate and "
                           f"garden.fewshot take a run of {_generative_families()})")
        return model

    def masked_lm(self):
        """The task's model when it is a masked-LM pretrainer (BERT, RoBERTa, ALBERT, ...)."""
        return masked_lm_of(self.task_model(), f"{self.path} (task {type(self.task).__name__})")

    def generation(self):
        """garden.generate_dir.GenerationModel of an LM task's run: the restored GenerativeLM,
        the task's tokenizer, and the prompt ids as training laid a text out (generation_ids)."""
        from garden.generate_dir import GenerationModel

        model = self.lm()  # builds and restores the task model (the task's prepare() first)
        tokenizer = self.text.tokenizer()
        ids = generation_ids(self.task, model, self.text.tokenizer_kind or tokenizer.kind,
                             tokenizer.vocab.specials, f"{self.path} vocabulary {self.vocab}")
        return GenerationModel(model=model, tokenizer=tokenizer, **ids)


def _generative_families() -> str:
    from garden import models

    return ", ".join(f.name for f in models.families() if f.lm)


def generation_ids(task, model, tokenizer_kind: str, specials: Dict[str, int],
                   who: str) -> Dict:
    """GenerationModel's ids (eos_id, pad_id, prompt_prefix_ids, prompt_suffix_ids,
    encoder_prefix_ids, encoder_suffix_ids, decoder_start_ids) of a garden.train run's task:
      a generative fine-tuning task (TextToText, CausalLMFinetuning): its own ids and prompt
        layout, as its export encodes a prompt (its prefix, the causal separator, its decoder
        start);
      a pretraining task: the prompt framing of the model's family (garden/models/framing.py:
        GPT / GPT-2 / GPT-3 <|endoftext|> x, T5 x </s>, BART <s> x </s>) from the vocabulary's
        specials; a model of no known family: the framing of its shape and vocabulary."""
    from garden.models import framing
    from garden.tasks.generation import GenerativeFinetuning

    if isinstance(task, GenerativeFinetuning):  # prepare() set its ids (task_model ran it)
        layout = task.serving_layout()
        ids = {"eos_id": task.eos_id, "pad_id": task.pad_id,
               "decoder_start_ids": list(layout.get("decoder_start_ids", []))}
        prefix, suffix = (list(layout.get("prompt_prefix_ids", [])),
                          list(layout.get("prompt_suffix_ids", [])))
        if model.is_encoder_decoder:
            return {**ids, "encoder_prefix_ids": prefix, "encoder_suffix_ids": suffix}
        return {**ids, "prompt_prefix_ids": prefix, "prompt_suffix_ids": suffix}
    from garden import models

    family = family_of(getattr(model, "backbone", None))
    kind = models.spec(family).framing if family else ""
    framed = (framing.frame(kind, specials, who) if kind else
              framing.vocabulary_framing(model.is_encoder_decoder, tokenizer_kind, specials, who))
    return framed.ids()
