"""The optimizers `training.train_step` expects: Keras' Adam and AdamW, told that the
step has summed the gradients over replicas already, and updating every variable at once.

Keras' Adam updates each variable with ~30 small ops of its own; a tabular model's
variables are small, so a step's update was mostly per-op overhead. `_Flat` keeps the
moments of all variables in one vector each and runs Adam's arithmetic once, on the
concatenated gradients, then hands each variable its slice: the same formula in the same
order, element by element, so the weights are identical to Keras' own update
(tests/test_optimizers.py). Measured in turns with `trainer.task`, medians of 4,
2026-12-04: the default strategy 1.09x the examples/s of Keras' update, two local
workers 1.04x. (TensorFlow's fused `ResourceApplyAdam` kernel was tried before and taken
out: it splits even a 64-value update across the intra-op pool, which made the default
strategy 0.82x as fast.) AdamW's weight decay runs inside the same update, with the
rate's schedule evaluated once per step instead of once per variable (Keras' order and
arithmetic, so still identical weights).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


class _Summed:
    """An optimizer that applies the gradients it is given, already summed over replicas.

    Keras sums gradients over replicas inside `apply_gradients`, but not in every
    version: Keras 3.4 (in Vertex's TF 2.17 images) calls that sum in cross-replica
    context, where it does nothing, so each replica applied its own gradient. The step
    sums them itself (`train_step`), and this optimizer must not sum them again.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars


class _Flat:
    """Adam's update of all variables as one vector (with Keras' per-variable update
    when the variables' dtypes differ, which one vector cannot hold), AdamW's weight
    decay inside it."""

    def build(self, var_list):
        if self.built:
            return
        self._flat = len({v.dtype for v in var_list}) == 1
        self._fold_decay = False
        if not self._flat:
            super().build(var_list)
            return
        # Skip Adam's own build: its per-variable moments would only take memory.
        super(keras.optimizers.Adam, self).build(var_list)
        self._sizes = [int(np.prod(v.shape)) for v in var_list]
        dtype = var_list[0].dtype
        self._momentum = self.add_variable((sum(self._sizes),), dtype=dtype, name="momentum")
        self._velocity = self.add_variable((sum(self._sizes),), dtype=dtype, name="velocity")
        # Keras decays each variable before the update, evaluating the rate's schedule
        # for each: ~200 of the default model's 568 ops per step (2026-12-05).
        decays = {self._use_weight_decay(v) for v in var_list}
        self._fold_decay = self.weight_decay is not None and decays == {True}

    def _apply_weight_decay(self, variables):
        if not self._fold_decay:
            super()._apply_weight_decay(variables)

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        if not self._flat:
            return super()._distributed_tf_update_step(distribution, grads_and_vars, learning_rate)
        grads = [g for g, _ in grads_and_vars]
        variables = [v for _, v in grads_and_vars]
        velocity = self._velocity.value

        def update(m, lr, *grads):
            # Runs once per local replica; `m` and, inside this update, `velocity` and
            # `variables` are that replica's copies.
            g = tf.concat([tf.reshape(x, [-1]) for x in grads], 0)
            lr = tf.cast(lr, g.dtype)
            t = tf.cast(self.iterations + 1, g.dtype)
            alpha = (
                lr
                * tf.sqrt(1 - tf.pow(tf.cast(self.beta_2, g.dtype), t))
                / (1 - tf.pow(tf.cast(self.beta_1, g.dtype), t))
            )
            m.assign_add((g - m) * (1 - self.beta_1))
            velocity.assign_add((tf.square(g) - velocity) * (1 - self.beta_2))
            delta = (m * alpha) / (tf.sqrt(velocity) + self.epsilon)
            for var, part in zip(variables, tf.split(delta, self._sizes)):
                part = tf.reshape(part, var.shape)
                if self._fold_decay:  # Keras' order: decay (the rate computed once), update
                    w = var.read_value()
                    var.assign(w - w * tf.cast(self.weight_decay, g.dtype) * lr - part)
                else:
                    var.assign_sub(part)

        distribution.extended.update(
            self._momentum.value, update, args=(learning_rate, *grads), group=False
        )


class Adam(_Flat, _Summed, keras.optimizers.Adam):
    """Adam on gradients summed by `train_step`."""


class AdamW(_Flat, _Summed, keras.optimizers.AdamW):
    """AdamW on gradients summed by `train_step` (Keras applies its weight decay before
    the update, per variable)."""


def make_optimizer(
    learning_rate: float, model: str = "mlp", train_steps: int | None = None
) -> keras.optimizers.Optimizer:
    """The optimizer `train_step` expects, for the built-in `model` (config.MODELS):
    'mlp': Adam at a constant rate; 'ple_mlp': AdamW (beta2 0.95, Keras' weight decay)
    whose rate decays on a cosine to 0 over `train_steps` (RealMLP's ablations: beta2
    0.95 and a schedule each cut regression error by 13-23%). The schedule is a function
    of the optimizer's step, so a resumed job continues it exactly.

    Build it on the model's variables inside `strategy.scope()` before the first step
    (slot variables cannot be created while a strategy traces the step)."""
    for method in ("_all_reduce_sum_gradients", "_distributed_tf_update_step"):
        if not hasattr(keras.optimizers.Adam, method):
            raise RuntimeError(
                f"Keras {keras.__version__} has no optimizer method "
                f"{method}; trainer.model.optimizers must be updated"
            )
    if model == "mlp":
        return Adam(learning_rate)
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, max(train_steps or 1, 1))
    return AdamW(schedule, beta_2=0.95)
