"""Model selection on validation data: the model exported is the best one evaluated,
not the last (what Vertex's tabular workflows call the BEST measurement).

The best weights so far live in variables beside the model's and are saved in every
checkpoint with the best value, its step and the evaluations since, so a job killed and
resumed selects (and stops early) exactly as an uninterrupted one. Every worker of a
cluster sees the same metrics (their sums are all-reduced) and decides alike.
"""

from __future__ import annotations

import logging
import math

import keras
import tensorflow as tf

from trainer.base import contracts
from trainer.plan import defaults

MARGIN = defaults.STOP_MARGIN


class Selection(tf.Module):
    """The best model evaluated so far, by `metric`, and when to stop waiting for better:
    after `patience` evaluations in a row worse than the best by more than MARGIN of it.

    Create it outside `strategy.scope()`: its variables are plain copies on the host,
    assigned from (and to) the model's in cross-replica context between inner loops.
    """

    def __init__(self, model: keras.Model, metric: str, patience: int = 0):
        super().__init__(name="selection")
        self.metric, self.patience = metric, patience
        self._weights = list(model.weights)
        with tf.device("/cpu:0"):
            self.best = [
                tf.Variable(tf.zeros(w.shape, w.dtype), trainable=False) for w in self._weights
            ]
            self.value = tf.Variable(math.nan, dtype=tf.float64, trainable=False)
            self.step = tf.Variable(-1, dtype=tf.int64, trainable=False)  # -1: none yet
            # Evaluations in a row worse than the best by more than MARGIN.
            self.since = tf.Variable(0, dtype=tf.int64, trainable=False)

    @property
    def selected_step(self) -> int | None:
        step = int(self.step.numpy())
        return step if step >= 0 else None

    @property
    def best_value(self) -> float:
        return float(self.value.numpy())

    def consider(self, step: int, metrics: dict) -> bool:
        """Keeps the model if `metrics` (of the model now, at `step`) beat the best;
        returns whether they did. A non-finite figure never wins."""
        value = float(metrics[self.metric])
        best = self.best_value
        sign = 1.0 if contracts.minimized(self.metric) else -1.0  # as a loss: lower is better
        better = math.isfinite(value) and (math.isnan(best) or sign * value < sign * best)
        if better:
            for copy, weight in zip(self.best, self._weights):
                copy.assign(weight.value)
            self.value.assign(value)
            self.step.assign(step)
        worse = not better and not sign * (value - best) <= MARGIN * abs(best)  # NaN: worse
        if worse:
            self.since.assign_add(1)
        else:
            self.since.assign(0)
        return better

    @property
    def stopped(self) -> bool:
        """Whether the last `patience` evaluations were all worse than the best by more
        than MARGIN."""
        return bool(self.patience) and int(self.since.numpy()) >= self.patience

    def restore_best(self) -> int | None:
        """Puts the best weights into the model; returns their step (None: nothing was
        selected, the model keeps its last weights)."""
        step = self.selected_step
        if step is None:
            logging.warning("no evaluation gave a finite %s: exporting the last model", self.metric)
            return None
        for copy, weight in zip(self.best, self._weights):
            weight.assign(copy)
        return step
