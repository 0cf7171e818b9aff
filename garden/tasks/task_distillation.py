"""Task-specific distillation: a fine-tuned classifier (the teacher, a garden.train
classification run) taught to a smaller student on the same classification files.

    loss = "pkd"         BERT-PKD (Sun et al., 2019): gold CE, soft CE at temperature T and
                         the normalised [CLS] states of mapped intermediate layers
                         (layer_map "uniform" = PKD-Skip, "last" = PKD-Last); same width
    loss = "tinybert"    TinyBERT (Jiao et al., 2020): attention scores and hidden states
                         (through learned projections) of mapped layers and the embeddings,
                         then the soft CE of the logits; same number of heads
    loss = "logits_mse"  Tang et al. (2019): alpha gold CE + (1 - alpha) squared error of the
                         logits; any student, the BiLSTM (student="bilstm") included
The formulas: garden/models/classifier_distillation.py. TinyBERT's two stages are two Stages
of the trainer: the first `intermediate_fraction` of the steps trains the layers
(embedding + hidden + attention), the rest the prediction loss; intermediate_fraction=0 trains
one sum, 0.5 x (layers + prediction), every step. (The paper's data augmentation is not done.)

The teacher: a garden.train model_dir of garden.Classification (its summary.json says
"task": "classification" and names the classes; a regression, another task or an unfinished
run is refused). Its architecture is the `teacher_backbone` factory (gin: @teacher/backbone,
as garden.Distillation's teacher), its weights the run's newest checkpoint ("model"), restored
strictly: every variable found, and the checkpoint's model holds no more than the teacher built
here. It is frozen and reads the same packed text as the student: VOCAB must be the teacher's
vocabulary (its size is checked against the teacher's table), and the classes are the
teacher's, in its order.

The student: student="encoder", any backbone of the garden from `backbone` (gin:
@student/backbone) under the SequenceClassifier head; init_layers copies the teacher's
embeddings, the named teacher layers and the pooler into it first (PKD starts its student
from the teacher's bottom layers: init_layers=[1, 2, 3]). student="bilstm": Tang et al.'s
BiLSTM (garden/models/bilstm_classifier.py, sizes in `bilstm`), logits_mse only. Both export
and serve as classification runs (ClassificationServing: raw text in, labels out).

What cannot be honoured is refused before training, in one line naming it: a loss or student
kind not in the tables, PKD or TinyBERT with the BiLSTM, PKD across widths, TinyBERT across
head counts or on a backbone without one encoder block per layer, a student deeper than the
teacher, a hyperparameter the chosen loss does not read, a teacher that is no classification
run or does not fit `teacher_backbone`.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from garden import pretrained
from garden.models.bilstm_classifier import BiLstmClassifier
from garden.models.classification import SequenceClassifier
from garden.models.classifier_distillation import (
    LOSSES, ClassifierDistiller, Projections, attention_scores, classifier_forward,
    encoder_blocks, layer_map, logits_mse_loss, model_inputs, pkd_loss, tinybert_loss)
from garden.tasks.base import ConfigError, Stage
from garden.tasks.classification import Classification
from garden.tasks.shared import make_backbone

STUDENTS = ("encoder", "bilstm")
# The hyperparameters each loss reads, with their defaults (PKD: alpha 0.2-0.7, T in {5, 10,
# 20}, beta in {10, 100, 500, 1000} in the paper; TinyBERT: T = 1; Tang et al.: alpha 0).
HYPERPARAMETERS: Dict[str, Dict[str, float]] = {
    "pkd": {"alpha": 0.5, "temperature": 10.0, "beta": 100.0},
    "tinybert": {"temperature": 1.0, "intermediate_fraction": 0.5},
    "logits_mse": {"alpha": 0.0},
}


class ClassifierDistillation(Classification):
    """Distils a garden.train classification run into a smaller classifier (module docstring).

    Args (and Classification's: vocab, train_file, eval_file, max_seq_length, lower_case,
    text_b, glue_task, dropout, export_base, model_name, tokenizer, layout):
        teacher: the teacher's garden.train model_dir (a garden.Classification run).
        teacher_backbone: callable(default_vocab_size) -> the teacher's backbone architecture
            (gin: @teacher/backbone).
        backbone: the student's backbone factory (gin: @student/backbone); student="encoder".
        loss: "pkd" | "tinybert" | "logits_mse".
        student: "encoder" | "bilstm".
        bilstm: BiLstmClassifier sizes (embedding_dim, lstm_units, hidden_units).
        layer_map: "uniform" (default), "last" or the teacher layer (1-based) of each mapped
            student layer (PKD: 1..M-1, TinyBERT: 1..M).
        init_layers: teacher layers copied into student layers 1..M (with the embeddings and
            pooler) before training; None: the student starts from its initialisation.
        alpha, temperature, beta, intermediate_fraction: HYPERPARAMETERS (None: the loss's
            default; one the loss does not read is refused).
    """

    name = "classifier_distillation"

    def __init__(self, teacher: str, teacher_backbone: Optional[Callable], vocab: Optional[str],
                 train_file: str, eval_file: str, backbone: Optional[Callable] = None,
                 loss: str = "pkd", student: str = "encoder", bilstm: Optional[dict] = None,
                 layer_map: Union[str, Sequence[int]] = "uniform",
                 init_layers: Optional[Sequence[int]] = None, alpha: Optional[float] = None,
                 temperature: Optional[float] = None, beta: Optional[float] = None,
                 intermediate_fraction: Optional[float] = None, max_seq_length: int = 128,
                 lower_case: Optional[bool] = None, text_b: bool = False,
                 glue_task: Optional[str] = None, dropout: float = 0.1,
                 export_base: Optional[str] = None, model_name: str = "distilled_classifier",
                 tokenizer: Optional[str] = None, layout: Optional[str] = None):
        who = "garden.ClassifierDistillation"
        if loss not in LOSSES:
            raise ConfigError(f"{who}.loss = {loss!r}: choose one of {', '.join(LOSSES)}")
        if student not in STUDENTS:
            raise ConfigError(f"{who}.student = {student!r}: choose one of {', '.join(STUDENTS)}")
        if student == "bilstm" and loss != "logits_mse":
            raise ConfigError(f"{who}.loss = {loss!r} reads a student's intermediate layers; the "
                              f"BiLSTM student has none to map: use loss='logits_mse'")
        if student == "bilstm" and (backbone is not None or init_layers):
            raise ConfigError(f"{who}: the BiLSTM student takes no backbone or init_layers "
                              f"(its sizes are {who}.bilstm): unbind them")
        if student == "encoder" and backbone is None:
            raise ConfigError(f"{who}.backbone is unbound: bind the student's backbone "
                              f"(e.g. @student/backbone) or set student='bilstm'")
        if student == "encoder" and bilstm:
            raise ConfigError(f"{who}.bilstm sizes a BiLSTM student; student='encoder'")
        given = {"alpha": alpha, "temperature": temperature, "beta": beta,
                 "intermediate_fraction": intermediate_fraction}
        unread = sorted(k for k, v in given.items() if v is not None
                        and k not in HYPERPARAMETERS[loss])
        if unread:
            raise ConfigError(f"{who}: loss={loss!r} does not read {', '.join(unread)} (it reads "
                              f"{', '.join(HYPERPARAMETERS[loss])}): unbind them")
        self.hyper = {k: float(given[k] if given[k] is not None else v)
                      for k, v in HYPERPARAMETERS[loss].items()}
        if not 0.0 <= self.hyper.get("intermediate_fraction", 0.0) < 1.0:
            raise ConfigError(f"{who}.intermediate_fraction = {intermediate_fraction}: the share "
                              f"of steps of TinyBERT's first stage, in [0, 1)")
        if loss == "logits_mse" and layer_map != "uniform":
            raise ConfigError(f"{who}.layer_map: loss='logits_mse' maps no layers; unbind it")
        self.loss, self.student_kind, self.bilstm = loss, student, dict(bilstm or {})
        self.teacher_path, self.teacher_backbone_fn = teacher, teacher_backbone
        self.layer_map_spec = layer_map
        self.init_layers = [int(i) for i in init_layers] if init_layers else None
        super().__init__(backbone, vocab, train_file, eval_file, max_seq_length=max_seq_length,
                         lower_case=lower_case, text_b=text_b, glue_task=glue_task,
                         dropout=dropout, export_base=export_base, model_name=model_name,
                         tokenizer=tokenizer, layout=layout)

    # -- before anything is built ---------------------------------------------------------
    def prepare(self) -> None:
        summary = self._teacher_summary()
        names = list(summary["label_names"])
        if self.label_names is not None and list(self.label_names) != names:
            raise ConfigError(f"garden.ClassifierDistillation: the teacher {self.teacher_path} "
                              f"orders its classes {names}, this task {self.label_names}: a "
                              f"student of another order would learn swapped classes")
        self.label_names = names
        super().prepare()

    def _teacher_summary(self) -> dict:
        import json
        import posixpath

        who = f"garden.ClassifierDistillation.teacher = {self.teacher_path!r}"
        path = posixpath.join(self.teacher_path, "summary.json")
        if not tf.io.gfile.exists(path):
            raise ConfigError(f"{who}: no {path}; give the model_dir of a finished "
                              f"garden.Classification run")
        with tf.io.gfile.GFile(path) as f:
            summary = json.load(f)
        if summary.get("task") != Classification.name or not summary.get("label_names"):
            what = ("a regression" if summary.get("task") == Classification.name
                    else f"a {summary.get('task')!r} run")
            raise ConfigError(f"{who} is {what}, not a classification run with named classes: "
                              f"only a garden.Classification teacher is distilled")
        self.teacher_checkpoint = tf.train.latest_checkpoint(
            posixpath.join(self.teacher_path, "checkpoints"))
        if self.teacher_checkpoint is None:
            raise ConfigError(f"{who} has no checkpoint in its checkpoints/")
        return summary

    # -- the model -------------------------------------------------------------------------
    def _teacher(self, states: bool):
        """The teacher's SequenceClassifier, restored strictly from its run and frozen."""
        backbone = make_backbone(self.teacher_backbone_fn, self.packer, states)
        teacher = SequenceClassifier(backbone, num_classes=len(self.label_names), dropout=0.0)
        who = f"garden.ClassifierDistillation.teacher {self.teacher_checkpoint}"
        status = tf.train.Checkpoint(model=teacher).read(self.teacher_checkpoint)
        status.expect_partial()  # its optimizer, seed states and "backbone" path are not read
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ConfigError(f"{who} does not fit teacher_backbone {backbone.get_config()}: "
                              f"{str(e).splitlines()[0][:300]}") from None
        saved = pretrained.saved_variable_count(self.teacher_checkpoint, "model")
        if saved != len(teacher.weights):
            raise ConfigError(f"{who} holds {saved} model weights, the teacher built from "
                              f"teacher_backbone {len(teacher.weights)}: another architecture "
                              f"(bind teacher/backbone.* as the teacher run's backbone)")
        return teacher

    def _student(self, states: bool):
        if self.student_kind == "bilstm":
            try:
                return BiLstmClassifier(self.packer.vocab_size, len(self.label_names),
                                        dropout=self.dropout, **self.bilstm), None
            except TypeError as e:
                raise ConfigError(f"garden.ClassifierDistillation.bilstm = {self.bilstm}: {e}"
                                  ) from None
        backbone = make_backbone(self.backbone_fn, self.packer, states)
        return SequenceClassifier(backbone, len(self.label_names), dropout=self.dropout), backbone

    def build_model(self):
        states = self.loss != "logits_mse"
        teacher = self._teacher(states)
        student, backbone = self._student(states)
        projections = None
        if states:
            self._check_layers(student.backbone, teacher.backbone)
        if self.loss == "tinybert":
            projections = Projections(len(self.mapped) + 1,
                                      teacher.backbone.get_config()["hidden_size"],
                                      name="tinybert_projections")
        if self.init_layers:
            init_from_teacher(student.backbone, teacher.backbone, self.init_layers)
        model = ClassifierDistiller(student, teacher, projections)
        # Build every variable (the projections too) before the trainer counts and restores
        # them: one tiny batch through the model and the loss.
        ones = tf.ones([1, 2], tf.int32)
        dummy = {**{k: ones for k in self.packer.input_names}, "label_ids": ones[:, 0],
                 "intermediate": tf.ones([1])}
        self.compute_metrics(model, dummy, training=False)
        model({k: ones for k in self.packer.input_names})
        objects = {"model": student}
        if backbone is not None:
            objects["backbone"] = backbone
        if projections is not None:
            objects["projections"] = projections
        return model, objects

    def _check_layers(self, student_backbone, teacher_backbone) -> None:
        """The layer map, and the widths / heads / blocks the chosen loss compares."""
        who = f"garden.ClassifierDistillation (loss={self.loss!r})"
        s, t = student_backbone.get_config(), teacher_backbone.get_config()
        m, n = s.get("num_layers"), t.get("num_layers")
        if m is None or n is None:
            raise ConfigError(f"{who}: the student ({type(student_backbone).__name__}) and the "
                              f"teacher ({type(teacher_backbone).__name__}) must both be "
                              f"encoders with num_layers")
        mapped = m - 1 if self.loss == "pkd" else m
        try:
            self.mapped = layer_map(self.layer_map_spec, m, n, mapped)
        except ValueError as e:
            raise ConfigError(f"{who}: {e}") from None
        if self.loss == "pkd" and s.get("hidden_size") != t.get("hidden_size"):
            raise ConfigError(f"{who} compares normalised [CLS] states of one width: student "
                              f"hidden_size {s.get('hidden_size')}, teacher "
                              f"{t.get('hidden_size')}; use loss='tinybert' (learned "
                              f"projections) or a student of the teacher's width")
        if self.loss == "tinybert":
            if s.get("num_heads") != t.get("num_heads"):
                raise ConfigError(f"{who} compares attention scores head by head: student "
                                  f"num_heads {s.get('num_heads')}, teacher {t.get('num_heads')}; "
                                  f"give the student {t.get('num_heads')} heads")
            for what, b in (("student", student_backbone), ("teacher", teacher_backbone)):
                if encoder_blocks(b) is None:
                    raise ConfigError(f"{who}: the {what} ({type(b).__name__}) has no encoder "
                                      f"block per layer to read attention scores from")
        print(f"[{self.name}] {self.loss}: student layers 1..{mapped} <- teacher layers "
              f"{self.mapped}", flush=True)

    @staticmethod
    def summary_model(backbone):
        """The model `garden.train --summary` prints: the student (a two-class head)."""
        return SequenceClassifier(backbone, num_classes=2)

    @classmethod
    def summary_model_from(cls, backbone, bindings, vocab_size=None):
        """The encoder student, or the BiLSTM (student='bilstm', no backbone bound) sized by
        the `bilstm` binding and the bound vocabulary (which it needs: its table is sized by
        the teacher's vocabulary)."""
        if bindings.get("student", "encoder") != "bilstm":
            return cls.summary_model(backbone)
        if vocab_size is None:
            raise ConfigError("garden.ClassifierDistillation with student='bilstm': the summary "
                              "needs the vocabulary (bind VOCAB to the teacher's) to size the "
                              "BiLSTM's embedding table")
        return BiLstmClassifier(vocab_size, 2, **dict(bindings.get("bilstm") or {}))

    # -- the data ---------------------------------------------------------------------------
    def schedule(self, train_steps: int) -> List[Stage]:
        """One stage, or TinyBERT's two: intermediate layers first, then the prediction."""
        (stage,) = super().schedule(train_steps)
        fraction = self.hyper.get("intermediate_fraction", 0.0)
        if self.loss != "tinybert":
            return [stage]
        if fraction == 0:
            return [self._weighted(stage, 0.5, "one sum of layer and prediction losses")]
        first = max(1, min(train_steps - 1, int(round(fraction * train_steps))))
        return [self._weighted(Stage(0, first, *stage[2:]), 1.0, "intermediate layers"),
                self._weighted(Stage(first, train_steps, *stage[2:]), 0.0, "prediction layer")]

    @staticmethod
    def _weighted(stage: Stage, weight: float, what: str) -> Stage:
        """`stage` with `intermediate` = weight in every batch (tinybert_loss)."""
        def dataset_fn(input_context, batch_size, seed, skip_batches):
            ds = stage.dataset_fn(input_context, batch_size, seed, skip_batches)
            return ds.map(lambda b: {**b, "intermediate": tf.fill(tf.shape(b["label_ids"]),
                                                                  weight)})
        return stage._replace(dataset_fn=dataset_fn,
                              description=f"{stage.description} (TinyBERT: {what})")

    # -- the objective ----------------------------------------------------------------------
    def compute_metrics(self, model, batch, training: bool, weight_shares=None):
        inputs = {k: tf.cast(batch[k], tf.int32) for k in self.packer.input_names}
        labels = batch["label_ids"]
        teacher_logits, teacher_out = classifier_forward(model.teacher, inputs, training=False)
        teacher_logits = tf.stop_gradient(teacher_logits)
        if self.loss == "logits_mse":
            logits = tf.cast(model.student(model_inputs(model.student, inputs),
                                           training=training)["logits"], tf.float32)
            metrics = logits_mse_loss(logits, teacher_logits, labels, self.hyper["alpha"])
        else:
            logits, out = classifier_forward(model.student, inputs, training=training)
            s_states = out["hidden_states"]
            t_states = tf.stop_gradient(teacher_out["hidden_states"])
            if self.loss == "pkd":
                student_layers = list(range(1, len(self.mapped) + 1))
                metrics = pkd_loss(logits, teacher_logits, labels,
                                   tf.gather(s_states, student_layers)[:, :, 0, :],
                                   tf.gather(t_states, self.mapped)[:, :, 0, :],
                                   **self.hyper)
            else:
                metrics = self._tinybert(model, logits, teacher_logits, s_states, t_states,
                                         inputs["padding_mask"], batch)
        metrics["accuracy"] = tf.reduce_mean(tf.cast(
            tf.equal(tf.argmax(logits, -1), tf.cast(labels, tf.int64)), tf.float32))
        return metrics

    def _tinybert(self, model, logits, teacher_logits, s_states, t_states, padding_mask, batch):
        student_blocks = encoder_blocks(model.student.backbone)
        teacher_blocks = encoder_blocks(model.teacher.backbone)
        # Layer m's scores are computed from its input, hidden_states[m - 1].
        s_scores = tf.stack([attention_scores(student_blocks[m - 1], s_states[m - 1])
                             for m in range(1, len(self.mapped) + 1)])
        t_scores = tf.stop_gradient(tf.stack([attention_scores(teacher_blocks[g - 1],
                                                               t_states[g - 1])
                                              for g in self.mapped]))
        projected = model.projections(s_states[: len(self.mapped) + 1])
        weight = tf.reduce_mean(tf.cast(batch["intermediate"], tf.float32)) \
            if "intermediate" in batch else tf.constant(0.5)
        return tinybert_loss(logits, teacher_logits, s_scores, t_scores, projected,
                             tf.gather(t_states, [0] + self.mapped), padding_mask, weight,
                             self.hyper["temperature"])

    # -- after training ---------------------------------------------------------------------
    def finish(self, model, model_dir: str) -> dict:
        """Classification's scores of the student, and the teacher's beside them (accuracy on
        the same eval file, the share of labels the student agrees with, parameters)."""
        result = super().finish(model, model_dir)
        student = self.predict(model, self.eval_rows).argmax(-1)
        teacher = self.predict(model.teacher, self.eval_rows).argmax(-1)
        result.update(
            distillation_loss=self.loss, student_kind=self.student_kind,
            teacher=self.teacher_path,
            teacher_eval_accuracy=float(np.mean(teacher == self.eval_labels)),
            teacher_agreement=float(np.mean(teacher == student)),
            student_parameters=int(model.student.count_params()),
            teacher_parameters=int(model.teacher.count_params()))
        print(f"[{self.name}] teacher eval accuracy {result['teacher_eval_accuracy']:.4f}, "
              f"student {result.get('eval_accuracy', float('nan')):.4f}", flush=True)
        return result

    def serving_module(self, model):
        """The student's ClassificationServing: it serves as any classification run. `model`
        is the trainer's ClassifierDistiller, or the student itself (what the checkpoint saves
        as "model": garden.runs' task_model(), e.g. garden.bertology.int8)."""
        student = model.student if isinstance(model, ClassifierDistiller) else model
        return super().serving_module(student)


def init_from_teacher(student_backbone, teacher_backbone, layers: Sequence[int]) -> None:
    """Copies the teacher's embeddings, layers `layers` (1-based, one per student layer) and
    pooler into the student backbone, in place; ConfigError naming the first part whose
    weights do not fit."""
    s_blocks, t_blocks = encoder_blocks(student_backbone), encoder_blocks(teacher_backbone)
    who = "garden.ClassifierDistillation.init_layers"
    if s_blocks is None or t_blocks is None:
        raise ConfigError(f"{who}: both backbones need one encoder block per layer")
    if len(layers) != len(s_blocks) or not all(1 <= i <= len(t_blocks) for i in layers):
        raise ConfigError(f"{who} = {list(layers)}: give {len(s_blocks)} teacher layers in "
                          f"1..{len(t_blocks)}, one per student layer")
    pairs = [("embeddings", getattr(student_backbone, "embeddings", None),
              getattr(teacher_backbone, "embeddings", None))]
    pairs += [(f"layer {i}", s_blocks[j], t_blocks[i - 1]) for j, i in enumerate(layers)]
    if getattr(student_backbone, "pooler", None) is not None:
        pairs.append(("pooler", student_backbone.pooler, getattr(teacher_backbone, "pooler", None)))
    for what, s, t in pairs:
        shapes = [tuple(w.shape) for w in s.weights] if s is not None else None
        if t is None or shapes != [tuple(w.shape) for w in t.weights]:
            raise ConfigError(f"{who}: the teacher's {what} does not fit the student's (another "
                              f"width or family); unbind init_layers")
        s.set_weights(t.get_weights())

