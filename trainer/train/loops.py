"""The per-replica steps and the inner loops that run them under a strategy.

`train_step` is a plain function of (model, optimizer, head, batch): put a breakpoint or a
print in it and run with `--run_eagerly`. `Loops` runs `steps_per_loop` of those steps per
call through `strategy.run`, compiled by `tf.function` (a `tf.range` loop, so one Python
call covers many steps) unless eager mode is asked for. Eager and compiled run the very
same Python code, and the same arithmetic (`trainer.model.arithmetic`); tests hold them
to the same bits.
"""

from __future__ import annotations

import logging

import keras
import tensorflow as tf

from trainer.evaluate import metrics
from trainer.model import arithmetic, heads
from trainer.train import collectives


# The steps are plain TensorFlow ops (no Python control flow on tensors), so autograph
# need not rewrite them nor what they call (heads, metrics, the optimizer): its rewriting
# was about 1 s of each default job's traces (docs/decisions.md). The loops below are
# still converted; eagerly, the decorator does nothing.
@tf.autograph.experimental.do_not_convert
def train_step(
    model: keras.Model,
    optimizer: keras.optimizers.Optimizer,
    head: heads.Head,
    batch: tuple,
    global_batch_size: int,
) -> tf.Tensor:
    """One optimisation step on one replica's share of the global batch.

    The loss is summed over this replica's examples (each times its weight, 1 without
    --weight) and divided by the *global* batch size; the gradients are then summed over
    replicas. Together that is the gradient of
    the mean loss over the global batch, whatever the number of replicas.

    Returns:
      This replica's share of the global mean loss.
    """
    features, labels, weights = batch
    with tf.GradientTape() as tape:
        logits = model(features, training=True)
        loss = tf.nn.compute_average_loss(
            head.training_loss(labels, logits),
            sample_weight=weights,
            global_batch_size=global_batch_size,
        )
    grads = tape.gradient(loss, model.trainable_variables)
    # Embedding gradients come as IndexedSlices whose length differs between replicas;
    # all-reducing those fails in TF 2.21's collectives. Dense sums always work and are
    # deterministic; for the vocabularies of tabular data they are cheap.
    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
    # `trainer.model.optimizers` knows the gradients are summed already, and updates all
    # variables at once.
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.autograph.experimental.do_not_convert
def eval_step(model: keras.Model, head: heads.Head, batch: tuple) -> dict[str, tf.Tensor]:
    """Metric sums for one replica's evaluation batch."""
    features, labels, weights = batch
    return metrics.batch_sums(head, labels, model(features, training=False), weights)


class Loops:
    """The compiled (or eager) inner loops of training and evaluation. Building them
    calls `arithmetic.compile_as_eager`: the process's graphs keep eager's arithmetic."""

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        head: heads.Head,
        global_batch_size: int,
        run_eagerly: bool = False,
    ):
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.head = head
        self.global_batch_size = global_batch_size
        self.run_eagerly = run_eagerly
        arithmetic.compile_as_eager()
        if run_eagerly:
            logging.warning(
                "running eagerly (--run_eagerly): every step is plain Python, "
                "breakpoints and prints in train_step work; expect it to be slow"
            )
        wrap = (lambda fn: fn) if run_eagerly else tf.function
        self.train = wrap(self._train)
        self.evaluate_steps = wrap(self._evaluate_steps)
        self.evaluate_all = wrap(self._evaluate_all)
        self._any_replica = tf.function(self._any)

    def with_model(self, model: keras.Model) -> Loops:
        """The same loops over another model (the final blend, evaluated only)."""
        return Loops(
            self.strategy,
            model,
            self.optimizer,
            self.head,
            self.global_batch_size,
            self.run_eagerly,
        )

    def any_replica(self, flag: bool) -> bool:
        """Whether `flag` is true on any replica of any worker (an all-reduce)."""
        return bool(self._any_replica(tf.constant(flag)))

    def _any(self, flag: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(lambda f: tf.cast(f, tf.int32), args=(flag,))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None) > 0

    def _step(self, batch):
        return train_step(self.model, self.optimizer, self.head, batch, self.global_batch_size)

    def _train(self, iterator, num_steps: tf.Tensor) -> tf.Tensor:
        """Runs `num_steps` training steps; returns their mean loss.

        Each replica sums its own losses and they are reduced once, after the loop:
        under MultiWorkerMirroredStrategy every reduce is a cross-worker collective, and
        a step should wait on one only, its gradients' all-reduce (trainer.train.collectives
        counts them; the tests keep the count).
        """
        totals = self.strategy.run(tf.zeros, args=((),))
        for _ in tf.range(num_steps):
            totals = self.strategy.run(self._accumulate, args=(next(iterator), totals))
        total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, totals, axis=None)
        return total / tf.cast(num_steps, tf.float32)

    def _accumulate(self, batch, total: tf.Tensor) -> tf.Tensor:
        return total + self._step(batch)

    def collectives_per_step(self, iterator, num_steps: int) -> tuple[float, float]:
        """(collectives each training step waits on, collectives once per loop), from
        the compiled loop's graph; tracing it here is the trace its first call reuses."""
        function = self.train.get_concrete_function(iterator, tf.constant(num_steps))
        # Each of this process's replica devices launches its own op of a collective.
        return collectives.count(
            function.graph.as_graph_def(), len(self.strategy.extended.worker_devices)
        )

    def _eval_batch(self, sums: dict, batch) -> dict:
        per_replica = self.strategy.run(eval_step, args=(self.model, self.head, batch))
        return {
            k: sums[k] + self.strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in per_replica.items()
        }

    @tf.autograph.experimental.do_not_convert
    def _zero_sums(self) -> dict:
        return metrics.zero_sums(self.head)

    def _evaluate_steps(self, iterator, num_steps: tf.Tensor) -> dict:
        sums = self._zero_sums()
        for _ in tf.range(num_steps):
            sums = self._eval_batch(sums, next(iterator))
        return sums

    def _evaluate_all(self, dataset) -> dict:
        # The distributed iterator's optional agrees on every worker whether any data is
        # left, and handles the uneven last batch. A loop of our own, not `for batch in
        # dataset`: autograph turns that into the dataset's own reduce loop, 3x the time
        # of an evaluation of 786 records (0.27 s against 0.08 s; docs/decisions.md).
        iterator = iter(dataset)
        sums = self._zero_sums()
        batch = iterator.get_next_as_optional()
        while batch.has_value():
            sums = self._eval_batch(sums, batch.get_value())
            batch = iterator.get_next_as_optional()
        return sums
