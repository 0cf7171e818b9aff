"""Magnitude pruning of a model's dense kernels during fine-tuning, with the gradual schedule
of Zhu & Gupta (2017, "To prune, or not to prune: exploring the efficacy of pruning for model
compression", arXiv:1710.01878), in Keras 3 (TF Model Optimization's pruning wraps tf_keras
layers only).

Every `frequency` (dt) steps from `begin_step` (t0) to `end_step` (t0 + n dt) each kernel's
smallest-magnitude weights are masked so that its sparsity is

    s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3

(keras.optimizers.schedules.PolynomialDecay from s_i to s_f over n dt steps, power 3; s_i
before t0, s_f after), and the masks are applied again after every optimizer step, so pruned
weights stay 0 while the others train. As in Zhu & Gupta and TF-MOT, each kernel is pruned to
the target on its own (round(s * size) of its weights), and a mask is recomputed from the
current weights at each update, the weights already at 0 being the smallest.

Example:
    schedule = PolynomialSchedule(final_sparsity=0.8, begin_step=0, end_step=300, frequency=30)
    result = magnitude_prune(model, train_step, batches, schedule, metric=dev_accuracy)
    plot_sparsity_curve(result, "sparsity.png")
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence

import keras
import numpy as np

from garden import plots


@dataclasses.dataclass(frozen=True)
class PolynomialSchedule:
    """Zhu & Gupta's sparsity schedule: s_i at begin_step (t0), s_f from end_step (t0 + n dt)
    on, masks recomputed every `frequency` (dt) steps in between (and at end_step)."""

    final_sparsity: float
    end_step: int
    initial_sparsity: float = 0.0
    begin_step: int = 0
    frequency: int = 100
    power: float = 3.0

    def __post_init__(self):
        if not 0 <= self.initial_sparsity <= self.final_sparsity < 1:
            raise ValueError(f"sparsities {self.initial_sparsity} -> {self.final_sparsity}: "
                             "need 0 <= initial <= final < 1")
        if self.end_step <= self.begin_step or self.frequency < 1:
            raise ValueError(f"steps {self.begin_step} -> {self.end_step} every "
                             f"{self.frequency}: need begin < end and frequency >= 1")

    def sparsity(self, step: int) -> float:
        """s_t at `step` (the formula; s_i before t0, s_f after end_step)."""
        decay = keras.optimizers.schedules.PolynomialDecay(
            self.initial_sparsity, self.end_step - self.begin_step, self.final_sparsity,
            power=self.power)
        return float(decay(max(step - self.begin_step, 0)))

    def updates_at(self, step: int) -> bool:
        """Whether the masks are recomputed at `step`: t0, t0 + dt, ... and end_step."""
        return (self.begin_step <= step <= self.end_step and
                ((step - self.begin_step) % self.frequency == 0 or step == self.end_step))


# The weight matrices a layer multiplies its inputs by, by attribute: Dense, EinsumDense and
# convolutions' `kernel`; an LSTM's `kernel` and `recurrent_kernel` (Zhu & Gupta prune LSTMs'
# too) and ProjectedLSTM's `projection_kernel`. A layer with other names lists them in its own
# `kernel_attributes` (XLNet's relative attention: q, k, v, o, r). With Dense and EinsumDense
# alone, the LSTM families (ULMFiT, CoVe, CVT: none of their backbone weights), ELMo's LSTMs and
# XLNet's attention were left dense while the run reported "magnitude pruning".
KERNEL_ATTRIBUTES = ("kernel", "recurrent_kernel", "projection_kernel")


def prunable_kernels(model: keras.Model) -> List[keras.Variable]:
    """The weight matrices of every layer in `model` (attention projections, feed-forward,
    pooler, LSTM input, recurrent and projection matrices, convolutions, task heads), each once:
    KERNEL_ATTRIBUTES or the layer's own `kernel_attributes`; embeddings, biases and norms are
    left."""
    seen, kernels = set(), []
    for layer in model._flatten_layers(include_self=False):
        for name in getattr(layer, "kernel_attributes", KERNEL_ATTRIBUTES):
            kernel = getattr(layer, name, None)
            if isinstance(kernel, keras.Variable) and id(kernel) not in seen:
                seen.add(id(kernel))
                kernels.append(kernel)
    return kernels


def magnitude_mask(weights: np.ndarray, sparsity: float) -> np.ndarray:
    """0/1 mask of `weights`' shape with the round(sparsity * size) smallest |w| at 0 (ties in
    flat index order)."""
    flat = np.abs(np.asarray(weights)).reshape(-1)
    pruned = np.argsort(flat, kind="stable")[:int(round(sparsity * flat.size))]
    mask = np.ones(flat.size, np.float32)
    mask[pruned] = 0
    return mask.reshape(np.shape(weights))


class MagnitudePruning:
    """Masks over `variables`, updated by a PolynomialSchedule and applied after each step.

    Example:
        pruning = MagnitudePruning(prunable_kernels(model), schedule)
        for step, batch in enumerate(batches):
            pruning.step(step)           # update the masks at the schedule's steps, apply
            train_step(batch)
            pruning.apply()              # pruned weights back to 0 after the optimizer step
    """

    def __init__(self, variables: Sequence[keras.Variable], schedule: PolynomialSchedule):
        self.variables = list(variables)
        self.schedule = schedule
        self.masks = [keras.ops.ones(tuple(v.shape), v.dtype) for v in self.variables]

    def step(self, step: int) -> bool:
        """Recomputes the masks when the schedule says so at `step`, then applies them;
        returns whether they were recomputed."""
        update = self.schedule.updates_at(step)
        if update:
            target = self.schedule.sparsity(step)
            self.masks = [keras.ops.convert_to_tensor(magnitude_mask(v.numpy(), target),
                                                      v.dtype) for v in self.variables]
        self.apply()
        return update

    def apply(self) -> None:
        for variable, mask in zip(self.variables, self.masks):
            variable.assign(variable * mask)

    def sparsity(self) -> float:
        """The share of exact zeros over all the variables' weights."""
        zeros = sum(int(np.sum(v.numpy() == 0)) for v in self.variables)
        return zeros / sum(int(np.prod(v.shape)) for v in self.variables)


def magnitude_prune(model: keras.Model, train_step: Callable[[Mapping], object],
                    batches: Iterable, schedule: PolynomialSchedule,
                    metric: Optional[Callable[[], float]] = None,
                    variables: Optional[Sequence[keras.Variable]] = None) -> Dict:
    """Fine-tunes with gradual magnitude pruning: for each batch, the masks are updated (at the
    schedule's steps) and applied, `train_step(batch)` runs, and the masks are applied again.

    Args:
        model: the Keras model whose kernels are pruned (prunable_kernels, or `variables`).
        train_step: batch -> anything; one optimizer step (e.g. a compiled model's
            `lambda b: model.train_on_batch(*b)` or the garden's make_train_step).
        batches: the training batches; give at least end_step + 1 of them to reach s_f.
        schedule: the PolynomialSchedule.
        metric: () -> float, the task metric (higher is better), run after each update step.

    Returns:
        {"curve": [{"step", "target_sparsity", "sparsity", "metric"}, ...] after each mask
         update (metric None without `metric`), "sparsity": the achieved share of zeros,
         "target_sparsity": s_t at the last step run, "steps": steps run,
         "variables": {path: achieved sparsity}}.
    """
    pruning = MagnitudePruning(prunable_kernels(model) if variables is None else variables,
                               schedule)
    curve, steps = [], 0
    for step, batch in enumerate(batches):
        updated = pruning.step(step)
        train_step(batch)
        pruning.apply()
        steps = step + 1
        if updated:
            curve.append({"step": step, "target_sparsity": schedule.sparsity(step),
                          "sparsity": pruning.sparsity(),
                          "metric": None if metric is None else float(metric())})
    return {"curve": curve, "sparsity": pruning.sparsity(), "steps": steps,
            "target_sparsity": schedule.sparsity(max(steps - 1, 0)),
            "variables": {v.path: float(np.mean(v.numpy() == 0)) for v in pruning.variables}}


class RunPruning:
    """Gradual magnitude pruning inside garden.train (`train.magnitude_pruning = {...}`): the
    trainer calls before_step(step) before and after_step() after each optimizer step, and
    record(step, eval) after each evaluation; summary() goes into summary.json.

    settings: PolynomialSchedule's fields (final_sparsity required); end_step defaults to two
    thirds of train_steps (the rest trains the pruned model, as Zhu & Gupta do), frequency to a
    tenth of begin_step..end_step; "metric": the eval number the curve plots (default
    eval_accuracy, else the first eval_* number). A resumed run takes each kernel's nonzero
    weights as its mask (pruned weights were saved as exact zeros), so it continues pruned.
    """

    def __init__(self, model: keras.Model, settings: Mapping, train_steps: int, step: int):
        settings = dict(settings)
        self.metric_name = settings.pop("metric", None)
        end = settings.setdefault("end_step", max(1, 2 * train_steps // 3))
        settings.setdefault("frequency", max(1, (end - settings.get("begin_step", 0)) // 10))
        try:
            self.schedule = PolynomialSchedule(**settings)
        except TypeError as e:
            raise ValueError(f"train.magnitude_pruning: {e} (fields: final_sparsity, end_step, "
                             f"initial_sparsity, begin_step, frequency, power, metric)") from None
        self.pruning = MagnitudePruning(prunable_kernels(model), self.schedule)
        if step > self.schedule.begin_step:
            self.pruning.masks = [keras.ops.convert_to_tensor((v.numpy() != 0), v.dtype)
                                  for v in self.pruning.variables]
        self.curve: List[Dict] = []
        print(f"[train] magnitude pruning of {len(self.pruning.variables)} kernels to "
              f"{self.schedule.final_sparsity:.0%} from step {self.schedule.begin_step} to "
              f"{self.schedule.end_step}, masks every {self.schedule.frequency} steps",
              flush=True)

    def before_step(self, step: int) -> None:
        if self.pruning.step(step):
            print(f"[train] pruning at step {step}: {self.pruning.sparsity():.1%} of the "
                  f"kernels' weights are 0 (target {self.schedule.sparsity(step):.1%})",
                  flush=True)

    def after_step(self) -> None:
        self.pruning.apply()

    def record(self, step: int, evaluation: Mapping) -> None:
        """A point of the sparsity curve: the sparsity now and the eval metric."""
        name = self.metric_name or ("eval_accuracy" if "eval_accuracy" in evaluation else next(
            (k for k in evaluation if k.startswith("eval_") and k != "eval_examples"), None))
        self.curve.append({"step": step, "sparsity": self.pruning.sparsity(),
                           "target_sparsity": self.schedule.sparsity(step),
                           "metric_name": name, "metric": evaluation.get(name)})

    def summary(self, model_dir: str) -> Dict:
        """{"magnitude_pruning": schedule, sparsity, curve, plot} for summary.json; the plot
        (model_dir/pruning.png) when the curve has metric points."""
        result = {"schedule": dataclasses.asdict(self.schedule),
                  "sparsity": self.pruning.sparsity(), "curve": self.curve}
        if any(p["metric"] is not None for p in self.curve):
            import posixpath

            result["plot"] = plot_sparsity_curve(result, posixpath.join(model_dir, "pruning.png"))
        return {"magnitude_pruning": result}


def plot_sparsity_curve(results: Mapping[str, Mapping] | Mapping, path: str) -> str:
    """The metric against the achieved sparsity at each mask update, one line per
    magnitude_prune result (a result, or {label: result}); writes a PNG at `path`."""
    if "curve" in results:
        results = {"": results}
    pyplot = plots.pyplot()
    figure, ax = pyplot.subplots(figsize=(5, 3.5))
    for label, result in results.items():
        points = [p for p in result["curve"] if p["metric"] is not None]
        ax.plot([100 * p["sparsity"] for p in points], [p["metric"] for p in points],
                marker="o", label=label or None)
    ax.set(xlabel="weights pruned (%)", ylabel="metric",
           title="gradual magnitude pruning (Zhu & Gupta 2017)")
    if any(results):
        ax.legend()
    return plots.save(figure, path)
