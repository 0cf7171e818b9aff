"""The training step of `garden.train`, shared with benchmarks/train_step.py (what is measured
is what runs)."""

from __future__ import annotations

from typing import Optional


def _gradients_fn(task, model, opt, shares: int, loss_scaled: bool):
    """compute_gradients(micro_batches, weight_shares): summed gradients and mean metrics of
    one replica's micro-batches (XLA-able)."""
    import tensorflow as tf

    variables = model.trainable_variables

    def compute_gradients(micro_batches, weight_shares):
        grads_sum, metric_sums = None, {}
        for batch in micro_batches:
            with tf.GradientTape() as tape:
                metrics = task.compute_metrics(model, batch, training=True,
                                               weight_shares=weight_shares)
                loss = metrics["loss"] / shares
                if loss_scaled:
                    loss = opt.scale_loss(loss)
            grads = tape.gradient(loss, variables)
            # Embedding gradients arrive as IndexedSlices; dense ones can be summed and
            # all-reduced like the rest.
            grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, variables)]
            grads_sum = grads if grads_sum is None else [a + g for a, g in zip(grads_sum, grads)]
            for k, v in metrics.items():
                metric_sums[k] = metric_sums.get(k, 0.0) + v / len(micro_batches)
        return grads_sum, metric_sums

    return compute_gradients


def _global_weights(task, micro_batches, shares: int):
    """Weighted means (e.g. MLM over masked positions) divide by the weight of the whole
    global batch, so the loss does not depend on how the batch is split; None: plain means."""
    import tensorflow as tf

    local = {}
    for batch in micro_batches:
        for k, v in task.loss_weights(batch).items():
            local[k] = local.get(k, 0.0) + v
    if not local:
        return None
    context = tf.distribute.get_replica_context()
    return {k: v / shares for k, v in context.all_reduce(tf.distribute.ReduceOp.SUM, local).items()}


def _clip_factor(grad_norm, clip_norm: Optional[float], scale, replicas: int):
    """One multiplier per gradient for both the clipping (tf.clip_by_global_norm's factor, NaN
    for a non-finite norm) and the 1/replicas that the Keras optimizer expects (it sums the
    gradients over replicas again); None: nothing to multiply (one replica, no clipping)."""
    import tensorflow as tf

    factor = None
    if clip_norm:
        limit = clip_norm * scale
        factor = tf.where(tf.math.is_finite(grad_norm),
                          limit * tf.minimum(1.0 / grad_norm, 1.0 / limit), float("nan"))
    if replicas > 1:
        factor = 1.0 / replicas if factor is None else factor / replicas
    return factor


def _zero_frozen(opt, grads, variables):
    """Gradients of the variables that gradual unfreezing holds frozen at this step, as zeros:
    they count neither in the clipping norm nor in the logged grad_norm."""
    import tensorflow as tf

    trains_now = getattr(getattr(opt, "inner_optimizer", opt), "trains_now", None)
    if trains_now is None:
        return grads
    masks = [trains_now(v) for v in variables]
    return [g if m is None else tf.where(m, g, tf.zeros_like(g)) for g, m in zip(grads, masks)]


def make_train_step(strategy, task, model, opt, gradient_accumulation_steps: int = 1,
                    clip_norm: Optional[float] = 1.0, jit_compile: bool = False):
    """The training step of `garden.train` (also what benchmarks/train_step.py times).

    Returns (train_step, compute_gradients): train_step(iterator) is a tf.function that takes
    `gradient_accumulation_steps` micro-batches per replica from the distributed iterator,
    all-reduces the summed gradients, zeroes those of layers that gradual unfreezing holds
    frozen (optimization.unfreeze_steps), clips their global norm, applies `opt` and returns the
    replica-mean metrics (with "grad_norm"); compute_gradients(micro_batches, weight_shares)
    is its per-replica part (XLA-compiled with jit_compile).
    """
    import keras
    import tensorflow as tf

    variables = model.trainable_variables
    replicas = strategy.num_replicas_in_sync
    loss_scaled = isinstance(opt, keras.optimizers.LossScaleOptimizer)
    # Each step averages over `shares` micro-batches: one per replica and accumulation step.
    shares = replicas * gradient_accumulation_steps
    compute_gradients = _gradients_fn(task, model, opt, shares=shares, loss_scaled=loss_scaled)
    compiled_gradients = (tf.function(compute_gradients, jit_compile=True) if jit_compile
                          else compute_gradients)

    def step_fn(micro_batches):
        weight_shares = _global_weights(task, micro_batches, shares)
        grads, metrics = compiled_gradients(micro_batches, weight_shares)
        # Clip the global (all-replica) gradient, as a single device would.
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        grads = _zero_frozen(opt, grads, variables)
        scale = opt.dynamic_scale if loss_scaled else 1.0
        grad_norm = tf.linalg.global_norm(grads)
        factor = _clip_factor(grad_norm, clip_norm, scale=scale, replicas=replicas)
        if factor is not None:
            grads = [g * tf.cast(factor, g.dtype) for g in grads]
        opt.apply_gradients(zip(grads, variables))
        if loss_scaled:
            # The LossScaleOptimizer skips a step whose scaled gradient overflowed (and halves
            # the scale) without counting it; counted here, the iteration count stays the
            # number of steps taken, which resume, the data position and the checkpoint
            # numbers read.
            skipped = tf.logical_not(opt.check_finite(grads))
            opt.iterations.assign_add(tf.cast(skipped, opt.iterations.dtype))
        metrics = dict(metrics)
        metrics["grad_norm"] = grad_norm / scale
        return metrics

    @tf.function
    def train_step(iterator):
        micro_batches = [next(iterator) for _ in range(gradient_accumulation_steps)]
        per_replica = strategy.run(step_fn, args=(micro_batches,))
        return {k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
                for k, v in per_replica.items()}

    return train_step, compiled_gradients
