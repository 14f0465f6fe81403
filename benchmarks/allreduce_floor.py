"""The floor of a multi-worker step: a compiled loop that does nothing but one all-reduce
per step of a tensor the size of the model's gradients, under MultiWorkerMirroredStrategy
(TF_CONFIG from the environment, as trainer.task reads it). The chief prints
{"steps_per_s": ...} as JSON. Run by benchmarks/bench.py beside the training job of the
same process layout.
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("elements", 10_000, "float32 values all-reduced per step.")
flags.DEFINE_integer("steps", 1000, "Steps timed (after a warm-up loop).")
flags.DEFINE_integer("steps_per_loop", 100, "Steps per compiled loop, as the job's.")


def main(argv: list[str]) -> None:
    del argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def step(i):
        values = tf.fill([FLAGS.elements], tf.cast(i, tf.float32))
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, values)[0]

    @tf.function
    def loop(n):
        total = tf.constant(0.0)
        for i in tf.range(n):
            total += strategy.experimental_local_results(strategy.run(step, args=(i,)))[0]
        return total

    n = tf.constant(FLAGS.steps_per_loop)
    loop(n)  # trace and warm up
    loops = max(1, FLAGS.steps // FLAGS.steps_per_loop)
    start = time.perf_counter()
    for _ in range(loops):
        float(loop(n))
    rate = loops * FLAGS.steps_per_loop / (time.perf_counter() - start)
    if json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("type") == "chief":
        print(json.dumps({"steps_per_s": rate}), flush=True)


if __name__ == "__main__":
    app.run(main)
