"""How fast the boosted trees run inside the graph (trainer.model.trees.Forest): LightGBM's
predict (the job's evaluation, importance and profile) against the walk as plain ops (the
export) and the same walk compiled by XLA (the job's way until 2026-12-06).

LightGBM forests are fitted on generated tables at the default model's parameters
(trainer.train.forest.PARAMS), one per task, with a categorical column so the categorical
path runs. Each is timed on a batch of --records records and on one record, medians of
--repeats calls after a warm-up; the first call of each shape is XLA's compile. Every
way is checked against LightGBM's own scores first.

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
        f"{'forest':<34} {'records':>7} {'plain ms':>9} {'XLA ms':>8} {'LightGBM ms':>11} "
        f"{'XLA/LightGBM':>12} {'XLA compile s':>13}"
    )
    for task in ("regression", "multiclass"):
        booster = fitted(task)
        arrays = trees.from_lightgbm(booster.model_to_string())
        x, _ = table(FLAGS.records, 1)
        expected = booster.predict(x, raw_score=True).reshape(len(x), -1)
        name = f"{task}: {arrays.column.shape[0]} trees, depth {arrays.depth}"
        plain = trees.Forest(arrays)
        ways = {
            # The plain ops as the exported model runs them: one graph, traced once.
            "plain": tf.function(plain),
            "XLA": tf.function(plain._scores, jit_compile=True, autograph=False),
            "LightGBM": tf.function(trees.Forest(arrays, booster)),
        }
        for way, call in ways.items():
            # Checked on another batch shape: the timings below see XLA's compile.
            got = call(tf.constant(x[:-1])).numpy()
            assert np.abs(got - expected[:-1]).max() < 1e-9, (name, way)
        for records in (FLAGS.records, 1):
            batch = tf.constant(x[:records])
            seconds = {way: timed(call, batch) for way, call in ways.items()}
            print(
                f"{name:<34} {records:>7,} {1e3 * seconds['plain'][1]:>9.2f} "
                f"{1e3 * seconds['XLA'][1]:>8.2f} {1e3 * seconds['LightGBM'][1]:>11.2f} "
                f"{seconds['XLA'][1] / seconds['LightGBM'][1]:>12.2f} "
                f"{seconds['XLA'][0]:>13.2f}"
            )


if __name__ == "__main__":
    app.run(main)
