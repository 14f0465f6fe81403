"""How fast the boosted trees run as TensorFlow ops (trainer.model.trees.Forest): walked
through XLA (the job's evaluation, importance and profile) against plain ops (the export).

LightGBM forests are fitted on generated tables at the default model's parameters
(trainer.train.forest.PARAMS), one per task, with a categorical column so the categorical
path runs. Each is timed on a batch of --records records and on one record, medians of
--repeats calls after a warm-up; the first call of each shape is XLA's compile. Both
ways are checked against LightGBM's own scores first.

    python -m benchmarks.trees
"""

from __future__ import annotations

import time

import lightgbm
import numpy as np
import tensorflow as tf
from absl import app, flags

from trainer.model import trees
from trainer.train import forest

FLAGS = flags.FLAGS
flags.DEFINE_integer("records", 2_000, "Records per batch (feature importance's sample).")
flags.DEFINE_integer("rounds", 300, "Boosting rounds of each forest (per class).")
flags.DEFINE_integer("repeats", 20, "Timed calls per figure, after a warm-up.")

COLUMNS = 30
CATEGORIES = 12


def table(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Generated columns (the first categorical) and a signal with interactions."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, COLUMNS))
    x[:, 0] = rng.integers(0, CATEGORIES, n)
    signal = np.sin(2 * x[:, 1]) * x[:, 2] + np.isin(x[:, 0], [1, 4, 7]) + x[:, 3] * x[:, 4]
    return x, signal


def fitted(task: str) -> lightgbm.Booster:
    x, signal = table(20_000, 0)
    params = {
        **forest.PARAMS["regression" if task == "regression" else "classification"],
        "objective": task,
        "verbose": -1,
        "num_threads": forest.THREADS,
    }
    y = signal
    if task == "multiclass":
        params["num_class"] = 3
        y = np.digitize(signal, np.quantile(signal, [1 / 3, 2 / 3]))
    data = lightgbm.Dataset(x, y, categorical_feature=[0])
    return lightgbm.train(params, data, num_boost_round=FLAGS.rounds)


def timed(fn, x: tf.Tensor) -> tuple[float, float]:
    """(seconds of the first call, median seconds of the next --repeats)."""
    start = time.perf_counter()
    fn(x)
    first = time.perf_counter() - start
    times = []
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def main(argv):
    del argv
    print(
        f"{'forest':<34} {'records':>7} {'plain ms':>9} {'XLA ms':>8} {'plain/XLA':>9} "
        f"{'XLA compile s':>13}"
    )
    for task in ("regression", "multiclass"):
        booster = fitted(task)
        arrays = trees.from_lightgbm(booster.dump_model())
        x, _ = table(FLAGS.records, 1)
        expected = booster.predict(x, raw_score=True).reshape(len(x), -1)
        name = f"{task}: {arrays.column.shape[0]} trees, depth {arrays.depth}"
        ways = {}
        for compiled in (False, True):
            layer = trees.Forest(arrays, compiled=compiled)
            # The plain ops as the exported model runs them: one graph, traced once.
            call = layer if compiled else tf.function(layer)
            # Checked on another batch shape: the timings below see XLA's compile.
            got = call(tf.constant(x[:-1])).numpy()
            assert np.abs(got - expected[:-1]).max() < 1e-9, (name, compiled)
            ways[compiled] = call
        for records in (FLAGS.records, 1):
            batch = tf.constant(x[:records])
            plain = timed(ways[False], batch)[1]
            compile_s, xla = timed(ways[True], batch)
            print(
                f"{name:<34} {records:>7,} {1e3 * plain:>9.2f} {1e3 * xla:>8.2f} "
                f"{plain / xla:>9.2f} {compile_s:>13.2f}"
            )


if __name__ == "__main__":
    app.run(main)
