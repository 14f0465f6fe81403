"""The GPU check (issue 29): on this machine's accelerator, the default model's training
rate beside the device's own fp32 and bf16 matmul rates (measured in the same run), and
eager = compiled on it.

    bash scripts/gpu_check.sh          # its CPU fallback where there is no GPU (CI)

One device (OneDeviceStrategy), then all of them (MirroredStrategy) when there are two
or more. Prints one table; exits 1 when eager and compiled disagree beyond --tolerance.
"""

from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import step  # noqa: E402
from trainer import sample_data  # noqa: E402
from trainer.base import config as config_lib  # noqa: E402
from trainer.base import storage as storage_lib  # noqa: E402
from trainer.data import inference, inputs, scan  # noqa: E402
from trainer.model import heads, optimizers  # noqa: E402
from trainer.model import tabular as model_lib  # noqa: E402
from trainer.plan import defaults  # noqa: E402
from trainer.train import loops as training  # noqa: E402

FLAGS = flags.FLAGS
DEFAULT = config_lib.Config.model  # the job's default model
flags.DEFINE_integer("examples", 65_536, "Generated training examples.")
flags.DEFINE_list("batch_sizes", ["64", "1024"], "Global batch sizes to time.")
flags.DEFINE_list("precisions", ["float32", "bfloat16"], "--precision values to time.")
flags.DEFINE_integer("steps", 400, "Timed steps per batch size (after a warm-up loop).")
flags.DEFINE_integer("check_steps", 5, "Steps of the eager = compiled check.")
flags.DEFINE_float("tolerance", 1e-5, "Largest |eager - compiled| weight or moment allowed.")
flags.DEFINE_bool("cpu_fallback", False, "No GPU: small sizes, to show the check runs (CI).")


def built(
    strategy,
    schema,
    files,
    batch: int,
    steps: int,
    run_eagerly: bool = False,
    precision: str = "float32",
):
    """(Loops, iterator over the training data) for the default model under `strategy`,
    multiplying in `precision`, built from seed 0; `steps` sets the length of its
    learning-rate schedule."""
    head = heads.make_head("binary", schema)
    members, _ = defaults.ensemble_size(DEFAULT, FLAGS.examples)  # the default's, on this data
    config = step.model_config(DEFAULT, members, precision=precision)
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = model_lib.build(schema, head.units, config)
        optimizer = optimizers.make_optimizer(1e-3, config.model, train_steps=10 * steps)
        optimizer.build(model.trainable_variables)
    loops = training.Loops(strategy, model, optimizer, head, batch, run_eagerly)

    def dataset(context):
        per_replica = context.get_per_replica_batch_size(batch)
        return inputs.make_dataset(
            files, schema, batch_size=per_replica, training=True, seed=1, cache="memory"
        )

    iterator = iter(strategy.distribute_datasets_from_function(dataset))
    return loops, iterator


def rate(loops, iterator, batch: int, steps: int) -> float:
    """Examples/s of `steps` compiled steps, after one warm-up loop."""
    float(loops.train(iterator, tf.constant(max(steps // 10, 1))))
    start = time.perf_counter()
    float(loops.train(iterator, tf.constant(steps)))
    return steps * batch / (time.perf_counter() - start)


def state(loops) -> list[np.ndarray]:
    """The weights and Adam's moments (the gradients' scale shows in the moments)."""
    moments = [v for v in loops.optimizer.variables if "momentum" in v.path or "velocity" in v.path]
    return [w.numpy() for w in loops.model.weights] + [m.numpy() for m in moments]


def eager_equals_compiled(strategy, schema, files, batch: int, steps: int) -> float:
    """Largest |eager - compiled| over weights and moments after `steps` steps."""
    after = []
    for eager in (False, True):
        loops, iterator = built(strategy, schema, files, batch, steps, run_eagerly=eager)
        loops.train(iterator, tf.constant(steps))
        after.append(state(loops))
    return max(float(np.max(np.abs(a - b))) for a, b in zip(*after))


def main(argv):
    del argv
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and not FLAGS.cpu_fallback:
        raise SystemExit("no GPU found: run with --cpu_fallback (scripts/gpu_check.sh does)")
    if FLAGS.cpu_fallback:
        FLAGS.examples, FLAGS.steps, FLAGS.batch_sizes = 4096, 50, ["64"]
    device = "/gpu:0" if gpus else "/cpu:0"
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else ""
    print(f"device: {device} {name} ({len(gpus)} GPU(s)), TensorFlow {tf.__version__}")

    storage = storage_lib.Storage()
    with tempfile.TemporaryDirectory() as scratch:
        records = sample_data.make_examples(FLAGS.examples, "binary", seed=0)
        files = sample_data.write_tfrecords(storage, f"{scratch}/train", records, 4)
        schema = inference.infer(scan.sample_records(storage, files, 4096), "label", "binary")
        with tf.device(device):
            fp32 = step.matmul_gflops(tf.float32)
            bf16 = step.matmul_gflops(tf.bfloat16)
        print(f"matmul 2048x2048 on {device}: fp32 {fp32:,.0f} GFLOP/s, bf16 {bf16:,.0f}")

        strategies = {"OneDeviceStrategy": tf.distribute.OneDeviceStrategy(device)}
        if len(gpus) >= 2:  # one MirroredStrategy per process: two corrupt each other
            strategies[f"MirroredStrategy, {len(gpus)} GPUs"] = tf.distribute.MirroredStrategy()
        print(
            f"\n{'strategy':<28} {'precision':<9} {'batch':>6} {'examples/s':>12} "
            f"{'GFLOP/s':>9} fp32  bf16"
        )
        runs = [(b, p) for p in FLAGS.precisions for b in map(int, FLAGS.batch_sizes)]
        for label, strategy in strategies.items():
            for batch, precision in runs:
                loops, iterator = built(
                    strategy, schema, files, batch, FLAGS.steps, precision=precision
                )
                features = next(
                    iter(inputs.make_dataset(files, schema, batch_size=batch, training=False))
                )
                per_example = 3 * step.forward_flops(loops.model, features[0]) / batch
                examples = rate(loops, iterator, batch, FLAGS.steps)
                flops = examples * per_example / 1e9
                print(
                    f"{label:<28} {precision:<9} {batch:>6} {examples:>12,.0f} {flops:>9,.1f} "
                    f"{flops / fp32:.2f}x {flops / bf16:.2f}x"
                )

        one = strategies["OneDeviceStrategy"]
        diff = eager_equals_compiled(one, schema, files, 64, FLAGS.check_steps)
    verdict = "holds" if diff <= FLAGS.tolerance else "FAILS"
    print(
        f"\neager = compiled on {device}, {FLAGS.check_steps} steps: max |difference| "
        f"{diff:.2e} (tolerance {FLAGS.tolerance:g}): {verdict}"
    )
    if diff > FLAGS.tolerance:
        raise SystemExit(1)


if __name__ == "__main__":
    app.run(main)
