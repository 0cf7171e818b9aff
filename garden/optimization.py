"""Optimizers and learning-rate schedules, built from Keras pieces.

BERT (Devlin et al., 2019) trains with Adam + decoupled weight decay 0.01, a linear warmup
over the first steps and a linear decay to zero; LayerNorm parameters and biases are not
decayed. Keras 3's AdamW implements the decoupled decay; `exclude_from_weight_decay`
matches variable names ("gamma"/"beta" of LayerNorm, "bias").
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import keras

# Keras 3 variable names are the short attribute names of their layer.
NO_DECAY_NAMES = ("bias", "gamma", "beta")


@keras.saving.register_keras_serializable(package="garden")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate` over `warmup_steps`, then polynomial decay
    (power 1 = linear, as BERT) to `end_learning_rate` at `decay_steps`.

    Args:
        peak_learning_rate: float, the rate reached at the end of warmup.
        decay_steps: int, total number of steps of the run (warmup included).
        warmup_steps: int, steps of linear warmup.
        end_learning_rate: float, rate at `decay_steps` and after.
        power: float, exponent of the decay.

    Example:
        schedule = WarmupPolynomialDecay(1e-4, decay_steps=1_000_000, warmup_steps=10_000)
        optimizer = keras.optimizers.AdamW(learning_rate=schedule)
    """

    def __init__(self, peak_learning_rate, decay_steps, warmup_steps=0, end_learning_rate=0.0,
                 power=1.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.decay_steps = int(decay_steps)
        self.warmup_steps = int(warmup_steps)
        self.end_learning_rate = float(end_learning_rate)
        self.power = float(power)

    def __call__(self, step):
        ops = keras.ops
        step = ops.cast(step, "float32")
        warmup = float(max(self.warmup_steps, 1))
        decay_span = float(max(self.decay_steps - self.warmup_steps, 1))
        warm = self.peak_learning_rate * step / warmup
        progress = ops.clip((step - self.warmup_steps) / decay_span, 0.0, 1.0)
        decayed = (self.peak_learning_rate - self.end_learning_rate) * (1.0 - progress) ** self.power
        decayed = decayed + self.end_learning_rate
        if self.warmup_steps <= 0:
            return decayed
        return ops.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
        }


@keras.saving.register_keras_serializable(package="garden")
class SlantedTriangular(keras.optimizers.schedules.LearningRateSchedule):
    """ULMFiT's slanted triangular rate (Howard & Ruder, 2018, eq. 3).

    Rises linearly for `cut_frac` of the steps, then falls linearly; the lowest rate is
    1/`ratio` of the peak. Defaults are the paper's (cut_frac 0.1, ratio 32).

    Example:
        schedule = SlantedTriangular(0.01, total_steps=1000)
        schedule(100)  # the peak, 0.01
    """

    def __init__(self, peak_learning_rate, total_steps, cut_frac=0.1, ratio=32.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.total_steps = int(total_steps)
        self.cut_frac = float(cut_frac)
        self.ratio = float(ratio)

    def __call__(self, step):
        ops = keras.ops
        t = ops.cast(step, "float32")
        cut = max(float(int(self.total_steps * self.cut_frac)), 1.0)
        rising = t / cut
        falling = 1.0 - (t - cut) / max(cut * (1.0 / self.cut_frac - 1.0), 1.0)
        p = ops.clip(ops.where(t < cut, rising, falling), 0.0, 1.0)
        return self.peak_learning_rate * (1.0 + p * (self.ratio - 1.0)) / self.ratio

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "total_steps": self.total_steps,
                "cut_frac": self.cut_frac, "ratio": self.ratio}


SCHEDULES = ("linear", "polynomial", "slanted_triangular")


def create_schedule(name, learning_rate, train_steps, warmup_steps, end_learning_rate=0.0,
                    power=1.0):
    """linear / polynomial: warmup then decay (BERT); slanted_triangular: ULMFiT, whose rise
    takes warmup_steps / train_steps of the run as its cut fraction."""
    if name == "linear":
        return WarmupPolynomialDecay(learning_rate, train_steps, warmup_steps,
                                     end_learning_rate=end_learning_rate, power=1.0)
    if name == "polynomial":
        return WarmupPolynomialDecay(learning_rate, train_steps, warmup_steps,
                                     end_learning_rate=end_learning_rate, power=power)
    if name == "slanted_triangular":
        cut_frac = warmup_steps / train_steps if warmup_steps else 0.1
        return SlantedTriangular(learning_rate, train_steps, cut_frac=cut_frac)
    raise ValueError(f"unknown learning-rate schedule {name!r}; expected one of {SCHEDULES}")


class _OneRatePerStep:
    """Mixin: the learning-rate schedule evaluated once per step for the decoupled weight decay.

    Keras' TensorFlow optimizer reads `self.learning_rate` (the schedule's whole graph at the
    current step) once for each decayed variable, and `update_step` gets it once more. Traced
    into a train step that is a copy of the schedule per variable: in a tiny BERT's train step
    (39 variables) the schedule's copies and the per-variable Adam constants were most of the
    step's tracing time (py-spy over tests/garden/test_train.py, 2026-12-08). The value is the
    same; the decay reads the rate computed here."""

    _rate_of_this_step = None

    def _apply_weight_decay(self, variables):
        if self.weight_decay is None:
            return
        self._rate_of_this_step = self.learning_rate
        try:
            super()._apply_weight_decay(variables)
        finally:
            self._rate_of_this_step = None

    def _get_current_learning_rate(self):
        if self._rate_of_this_step is not None:
            return self._rate_of_this_step
        return super()._get_current_learning_rate()


@keras.saving.register_keras_serializable(package="garden")
class Lamb(_OneRatePerStep, keras.optimizers.Lamb):
    """Keras' LAMB, its schedule evaluated once per step for the weight decay (_OneRatePerStep)."""


@keras.saving.register_keras_serializable(package="garden")
class AdamW(_OneRatePerStep, keras.optimizers.AdamW):
    """Keras' AdamW whose Adam update runs as TensorFlow's fused `ResourceApplyAdam` kernel.

    Same arithmetic as keras.optimizers.AdamW (m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2),
    w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps); the decoupled weight decay stays
    Keras' own step), same slots and checkpoints, but one pass over each variable instead of
    about ten element-wise ops: 310 -> 130 ms a step for BERT-base's 85M encoder weights on
    2 CPU cores (benchmarks/README.md, train_step). Falls back to Keras' update for amsgrad
    and for variables that have no TensorFlow resource handle.

    Example:
        opt = AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
        opt.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    """

    # The step's constants of the fused kernel (beta powers, rates, epsilon) by dtype, made once
    # per step while the update runs instead of once per variable (see _OneRatePerStep).
    _constants_of_this_step = None

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        self._constants_of_this_step = {}
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._constants_of_this_step = None

    def _step_constants(self, dtype, learning_rate) -> dict:
        import tensorflow as tf

        cache = self._constants_of_this_step
        # By graph too: a tensor made inside a branch (tf.cond of gradual unfreezing) is not
        # reachable from the step's graph or another branch.
        graph = tf.compat.v1.get_default_graph()
        key = (dtype, id(learning_rate), id(graph))
        if cache is not None and key in cache:
            return cache[key][-1]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        constants = dict(beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
                         lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
                         epsilon=tf.cast(self.epsilon, dtype))
        if cache is not None:
            cache[key] = (learning_rate, graph, constants)  # held: their ids stay theirs
        return constants

    def update_step(self, gradient, variable, learning_rate):
        handle = getattr(variable, "handle", None)
        if self.amsgrad or handle is None or keras.backend.backend() != "tensorflow":
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        dtype = variable.dtype
        index = self._get_variable_index(variable)
        m, v = self._momentums[index], self._velocities[index]
        tf.raw_ops.ResourceApplyAdam(
            var=handle, m=m.value.handle, v=v.value.handle,
            grad=tf.convert_to_tensor(gradient, dtype), **self._step_constants(dtype, learning_rate))


def group_depths(layer_groups: Sequence[Sequence], variables: Sequence) -> List[int]:
    """Depth of each of `variables` for the per-layer fine-tuning switches: the index of the
    group of `layer_groups` (a backbone's variable_groups(): embeddings, each layer in order,
    the top) that holds it, and len(layer_groups) for a variable in none (the task head). With
    BERT's groups this is ELECTRA's count: embeddings 0, Transformer layer i -> i + 1, pooler
    L + 1, the head L + 2."""
    depth_of = {id(v): depth for depth, group in enumerate(layer_groups) for v in group}
    return [depth_of.get(id(v), len(layer_groups)) for v in variables]


def layerwise_multipliers(depths: Sequence[int], num_groups: int, decay: float) -> List[float]:
    """decay ** (num_groups - depth) for each depth: the head (depth num_groups) learns at the
    full rate, each group below it at `decay` times the rate of the one above (ELECTRA
    fine-tuning: 0.8 for base/small, 0.9 for large; Clark et al. 2020, appendix). An empty
    group still counts, as in ELECTRA's own table (no pooler, the head still at L + 2)."""
    return [float(decay) ** (num_groups - depth) for depth in depths]


def unfreeze_steps(depths: Sequence[int], num_groups: int, every: int) -> List[int]:
    """The step from which each variable trains under gradual unfreezing (ULMFiT, Howard &
    Ruder 2018, section 3.3), from its depth: the groups that hold a variable, top first,
    join one every `every` steps: the task head from step 0, the group below it from `every`,
    ... With BERT's groups: head 0, pooler `every`, the top Transformer layer 2 x `every`, ...,
    the embeddings (L + 2) x `every`. A group with no variable (no pooler; a head tied to the
    word table) takes no turn, so that no stretch of steps unfreezes nothing."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"unfreeze_every must be a positive whole number of steps, got {every!r}")
    held = sorted(set(depths), reverse=True)  # the non-empty groups (and head), top first
    turn = {depth: rank for rank, depth in enumerate(held)}
    return [turn[depth] * every for depth in depths]


def _per_layer(cls, layer_groups: Sequence[Sequence], decay: Optional[float],
               every: Optional[int]):
    """`cls` (a Keras optimizer class) whose per-variable learning rate, and with it the
    decoupled weight decay, is scaled by layerwise_multipliers (decay None: 1), and which leaves
    a variable untouched (no update, no weight decay, no slot change) before its
    unfreeze_steps step (every None: from step 0). A variable's depth is that of the group of
    `layer_groups` holding it (the head's when none does), fixed when the optimizer is built."""
    num_groups = len(layer_groups)

    class PerLayer(cls):
        def build(self, variables):
            super().build(variables)
            depths = group_depths(layer_groups, variables)
            # Read by the optimizer's own variable index, which also finds a variable from the
            # backing tf.Variable (or a replica's component) that update_step is handed.
            # Tuples of numbers: not tracked, so the checkpoint's object graph is unchanged.
            self._depths = tuple(depths)
            self._rates = tuple(layerwise_multipliers(depths, num_groups, decay)
                                if decay is not None else [1.0] * len(depths))
            self._first_steps = tuple(unfreeze_steps(depths, num_groups, every)
                                      if every is not None else [0] * len(depths))

        def layer_depth(self, variable) -> int:
            """The depth of `variable` (group_depths)."""
            return self._depths[self._get_variable_index(variable)]

        def rate_multiplier(self, variable) -> float:
            """The factor of the learning rate (and weight decay) `variable` receives."""
            return self._rates[self._get_variable_index(variable)]

        def first_step(self, variable) -> int:
            """The step from which `variable` trains (0: from the start)."""
            return self._first_steps[self._get_variable_index(variable)]

        def trains_now(self, variable):
            """A boolean tensor: `variable` is unfrozen at the current step (None: always)."""
            first = self.first_step(variable)
            return None if first <= 0 else keras.ops.greater_equal(self.iterations, first)

        def update_step(self, gradient, variable, learning_rate):
            rate = self.rate_multiplier(variable)
            lr = learning_rate * rate if rate != 1.0 else learning_rate
            unfrozen = self.trains_now(variable)
            if unfrozen is None:
                return super().update_step(gradient, variable, lr)
            import tensorflow as tf

            parent = super().update_step

            def update():
                parent(gradient, variable, lr)
                return tf.constant(True)

            tf.cond(unfrozen, update, lambda: tf.constant(False))

        def _apply_weight_decay(self, variables):
            if self.weight_decay is None:
                return
            rate = self.learning_rate  # once per step (_OneRatePerStep)
            for variable in variables:
                if self._use_weight_decay(variable):
                    lr = keras.ops.cast(rate, variable.dtype) * self.rate_multiplier(variable)
                    wd = keras.ops.cast(self.weight_decay, variable.dtype)
                    unfrozen = self.trains_now(variable)
                    if unfrozen is not None:
                        # 0 before the group's first step: w - w x 0 leaves w bit-identical.
                        lr = lr * keras.ops.cast(unfrozen, variable.dtype)
                    variable.assign(variable - variable * wd * lr)

    PerLayer.__name__ = f"PerLayer{cls.__name__}"
    return PerLayer


def create_optimizer(name, learning_rate, train_steps, warmup_steps, weight_decay=0.01,
                     beta_1=0.9, beta_2=0.999, epsilon=1e-6, end_learning_rate=0.0, power=1.0,
                     schedule="linear", layer_decay: Optional[float] = None,
                     layer_groups: Optional[Sequence[Sequence]] = None,
                     unfreeze_every: Optional[int] = None):
    """AdamW (BERT) or LAMB with a learning-rate schedule and the weight-decay exclusions.

    layer_groups: the backbone's variables bottom to top, one list per group
        (garden.models.backbone.Backbone.variable_groups: embeddings, each layer, the top);
        every other variable is the task head, above them. Needed by:
    layer_decay: layer-wise learning-rate decay for fine-tuning (ELECTRA): see
        layerwise_multipliers; 1 / 2.6 gives ULMFiT's discriminative rates (each layer group
        at the rate of the one above divided by 2.6). None: one rate for every variable.
    unfreeze_every: gradual unfreezing (ULMFiT): see unfreeze_steps. None: every variable
        trains from step 0.
    The built optimizer tells each variable's layer_depth, rate_multiplier and first_step.
    """
    schedule = create_schedule(schedule, learning_rate, train_steps, warmup_steps,
                               end_learning_rate=end_learning_rate, power=power)
    classes = {"adamw": AdamW, "lamb": Lamb}
    if name not in classes:
        raise ValueError(f"unknown optimizer {name!r}; expected 'adamw' or 'lamb'")
    cls = classes[name]
    for switch, value in (("layer_decay", layer_decay), ("unfreeze_every", unfreeze_every)):
        if value is not None and not layer_groups:
            raise ValueError(f"{switch} needs the backbone's layer_groups")
    if layer_decay is not None and not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
    if unfreeze_every is not None:
        unfreeze_steps([0], 1, unfreeze_every)  # checks it
    if layer_decay is not None or unfreeze_every is not None:
        cls = _per_layer(cls, [list(g) for g in layer_groups], layer_decay, unfreeze_every)
    if name == "adamw":
        optimizer = cls(learning_rate=schedule, weight_decay=weight_decay,
                        beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
    else:
        optimizer = cls(learning_rate=schedule, beta_1=beta_1, beta_2=beta_2,
                        epsilon=epsilon, weight_decay=weight_decay or None)
    optimizer.exclude_from_weight_decay(var_names=list(NO_DECAY_NAMES))
    return optimizer
