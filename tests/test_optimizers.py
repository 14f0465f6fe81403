"""trainer.model.optimizers: the all-at-once update gives Keras' own update's weights, exactly,
under one device and under two mirrored replicas."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer.model import optimizers


class KerasAdam(optimizers._Summed, keras.optimizers.Adam):
    """Keras' per-variable update, as the package used it before."""


class KerasAdamW(optimizers._Summed, keras.optimizers.AdamW):
    pass


def adamw(cls):
    return cls(keras.optimizers.schedules.CosineDecay(0.05, 30), beta_2=0.95)


def train(strategy, make_optimizer, steps=30, dtype="float32"):
    """Weights and optimizer after `steps` summed-gradient steps of a small network with
    an embedding, on fixed data split over the strategy's replicas."""
    keras.utils.set_random_seed(3)
    with strategy.scope():
        ids = keras.Input((1,), dtype="int32")
        x = keras.Input((4,))
        embedded = keras.layers.Flatten()(keras.layers.Embedding(5, 3)(ids))
        h = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([x, embedded]))
        out = keras.layers.Dense(1, dtype=dtype)(h)
        model = keras.Model([ids, x], out)
        optimizer = make_optimizer()
        optimizer.build(model.trainable_variables)
    n = 32
    data = (
        tf.random.stateless_uniform([n, 1], [1, 2], maxval=5, dtype=tf.int32),
        tf.random.stateless_normal([n, 4], [3, 4]),
        tf.random.stateless_normal([n, 1], [5, 6]),
    )

    def replica_step(ids, x, y):
        with tf.GradientTape() as tape:
            pred = tf.cast(model([ids, x]), tf.float32)
            loss = tf.reduce_sum((pred - y) ** 2) / n
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]
        grads = tf.distribute.get_replica_context().all_reduce("sum", grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    replicas = strategy.num_replicas_in_sync
    batch = strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(t[ctx.replica_id_in_sync_group :: replicas] for t in data)
    )

    @tf.function
    def step():
        strategy.run(replica_step, args=batch)

    for _ in range(steps):
        step()
    return [v.numpy() for v in model.trainable_variables], optimizer


@pytest.mark.parametrize(
    "ours, keras_own",
    [
        (lambda: optimizers.Adam(0.05), lambda: KerasAdam(0.05)),
        (lambda: adamw(optimizers.AdamW), lambda: adamw(KerasAdamW)),
    ],
    ids=["adam", "adamw"],
)
def test_flat_update_equals_keras_update_on_one_device(ours, keras_own):
    strategy = tf.distribute.get_strategy()
    flat, optimizer = train(strategy, ours)
    reference, _ = train(strategy, keras_own)
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(flat, reference)) == 0.0
    # One moment vector of each kind for all variables: 5*3 + (7*8 + 8) + (8 + 1) values.
    moments = [v for v in optimizer.variables if v.path.split("/")[-1] in ("momentum", "velocity")]
    assert [tuple(v.shape) for v in moments] == [(88,), (88,)]


def test_flat_update_equals_keras_update_under_two_mirrored_replicas(mirrored_two_cpus):
    flat, _ = train(mirrored_two_cpus, lambda: adamw(optimizers.AdamW))
    reference, _ = train(mirrored_two_cpus, lambda: adamw(KerasAdamW))
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(flat, reference)) == 0.0


def test_variables_of_mixed_dtypes_take_keras_update():
    strategy = tf.distribute.get_strategy()
    flat, optimizer = train(strategy, lambda: optimizers.Adam(0.05), dtype="float64")
    reference, _ = train(strategy, lambda: KerasAdam(0.05), dtype="float64")
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(flat, reference)) == 0.0
    assert len([v for v in optimizer.variables if "momentum" in v.path]) == 5  # one per variable


def _cosines_per_update(optimizer) -> int:
    """How often one traced update evaluates the cosine schedule of `adamw`."""
    variables = [tf.Variable(tf.ones(shape)) for shape in [(3, 4), (4,), (4, 1), (1,)]]
    optimizer.build(variables)
    grads = [tf.ones_like(v) for v in variables]
    update = tf.function(lambda: optimizer.apply_gradients(zip(grads, variables)))
    graph = update.get_concrete_function().graph
    ops = [op for f in graph._functions.values() for op in f.graph.get_operations()]
    return sum(op.type == "Cos" for op in [*graph.get_operations(), *ops])


def test_weight_decay_evaluates_the_schedule_once_per_update():
    # Keras' AdamW decays each variable apart, each time evaluating the schedule anew:
    # for the default model that was 205 of its step's 568 ops.
    assert _cosines_per_update(adamw(KerasAdamW)) == 5  # 4 decays + the update
    assert _cosines_per_update(adamw(optimizers.AdamW)) == 1
