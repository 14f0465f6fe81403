"""Benchmarks: the package against what users would write instead, side by side.

    scripts/benchmark.sh            # or: python -m benchmarks.bench --quick

Prints one table (absolute figures and ratios to each baseline) and writes it as JSON to
benchmarks/results/latest.json. Medians over --repeats runs after a warm-up. It measures;
it does not pass or fail (the targets are printed next to the figures).
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from trainer import config as config_lib  # noqa: E402
from trainer import heads  # noqa: E402
from trainer import inputs  # noqa: E402
from trainer import model as model_lib  # noqa: E402
from trainer import sample_data  # noqa: E402
from trainer import schema as schema_lib  # noqa: E402
from trainer import storage as storage_lib  # noqa: E402
from trainer import training  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("examples", 200_000, "Examples in the benchmark dataset.")
flags.DEFINE_integer("shards", 16, "TFRecord files.")
flags.DEFINE_integer("batch_size", 256, "Global batch size.")
flags.DEFINE_integer("repeats", 3, "Measured repetitions (after one warm-up).")
flags.DEFINE_string("data_dir", ".local/bench-data", "Where the dataset is cached.")
flags.DEFINE_string("output", "benchmarks/results/latest.json", "JSON results.")
flags.DEFINE_bool("quick", False, "Small sizes, to check the benchmark itself runs.")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN = (64, 32)


def median_rate(fn, repeats: int) -> float:
    """Runs fn() (which returns examples processed) once to warm up, then `repeats` times;
    returns the median examples per second."""
    fn()
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - start))
    return statistics.median(rates)


def dataset_files(storage: storage_lib.Storage) -> list[str]:
    prefix = f"{FLAGS.data_dir}/{FLAGS.examples}x{FLAGS.shards}"
    files = storage.matches(f"{prefix}/train-*.tfrecord")
    if len(files) != FLAGS.shards:
        print(f"writing {FLAGS.examples:,} examples to {prefix} (once)", flush=True)
        records = sample_data.make_examples(FLAGS.examples, "binary", seed=0)
        files = sample_data.write_tfrecords(storage, f"{prefix}/train", records, FLAGS.shards)
    return files


@tf.autograph.experimental.do_not_convert
def _add_batch(total, batch):
    first = batch[0] if isinstance(batch, tuple) else batch
    if isinstance(first, dict):
        first = next(iter(first.values()))
    return total + tf.shape(first, out_type=tf.int64)[0]


def count(ds: tf.data.Dataset) -> int:
    """Examples in a batched dataset, counted inside the graph (no Python per batch)."""
    return int(ds.reduce(tf.constant(0, tf.int64), _add_batch))


def input_pipeline(files, schema, n: int) -> list[dict]:
    spec = schema.parse_spec(with_label=True)
    batch = FLAGS.batch_size

    def package():
        return count(inputs.make_dataset(files, schema, batch_size=batch, training=True,
                                          seed=1, shuffle_buffer=10_000).take(n // batch))

    def naive():  # what a user often writes first: sequential, per-record parsing
        ds = tf.data.TFRecordDataset(files).map(
            lambda r: tf.io.parse_single_example(r, spec)).batch(batch)
        return count(ds.take(n // batch))

    def raw():  # the read ceiling: raw records, no parsing (sequential is fastest here;
        # num_parallel_reads=AUTOTUNE measured 17x slower on 2 cores)
        return count(tf.data.TFRecordDataset(files).batch(batch).take(n // batch))

    def raw_interleaved():  # the package's reading stage alone
        ds = tf.data.Dataset.from_tensor_slices(files).interleave(
            tf.data.TFRecordDataset, cycle_length=min(len(files), 16),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return count(ds.batch(batch).take(n // batch))

    rates = {name: median_rate(fn, FLAGS.repeats)
             for name, fn in (("package", package), ("naive", naive), ("raw read", raw),
                              ("raw interleaved", raw_interleaved))}
    return [
        row("input", "package pipeline", rates["package"], rates["naive"], "naive",
            "package >= 10x naive"),
        row("input", "naive (parse_single_example, sequential)", rates["naive"], rates["naive"],
            "naive"),
        row("input", "raw read (sequential, no parsing)", rates["raw read"], rates["raw read"],
            "raw", "package >= 0.5x raw"),
        row("input", "raw read (package's interleave, no parsing)", rates["raw interleaved"],
            rates["raw read"], "raw"),
        row("input", "package / raw read", rates["package"], rates["raw read"], "raw"),
    ]


def training_throughput(files, schema, steps: int) -> list[dict]:
    batch = FLAGS.batch_size
    head = heads.make_head("binary", schema)
    config = config_lib.make_config(env={}, train_data="x", label="label", task="binary",
                                    job_dir="/tmp/unused", hidden_units=HIDDEN)
    strategy = tf.distribute.get_strategy()

    def dataset():
        return inputs.make_dataset(files, schema, batch_size=batch, training=True, seed=1)

    def loop_rate(run_eagerly: bool, n_steps: int) -> float:
        keras.utils.set_random_seed(0)
        model = model_lib.build(schema, head.units, config)
        optimizer = training.make_optimizer(1e-3)
        optimizer.build(model.trainable_variables)
        loops = training.Loops(strategy, model, optimizer, head, batch, run_eagerly)
        iterator = iter(strategy.distribute_datasets_from_function(lambda ctx: dataset()))

        def run():
            loops.train(iterator, tf.constant(n_steps))
            return n_steps * batch
        return median_rate(run, FLAGS.repeats)

    def fit_rate() -> float:
        keras.utils.set_random_seed(0)
        model = model_lib.build(schema, head.units, config)
        model.compile(optimizer=keras.optimizers.Adam(1e-3),
                      loss=keras.losses.BinaryCrossentropy(from_logits=True))
        ds = dataset().map(lambda x, y: (x, tf.cast(y, tf.float32)[:, None]))

        def run():
            model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)
            return steps * batch
        return median_rate(run, FLAGS.repeats)

    compiled = loop_rate(False, steps)
    eager = loop_rate(True, max(steps // 10, 10))
    fit = fit_rate()
    return [
        row("training", "package loop, compiled (steps_per_loop)", compiled, fit, "fit",
            "compiled >= 1x fit"),
        row("training", "package loop, --run_eagerly", eager, compiled, "compiled"),
        row("training", "Keras model.fit", fit, fit, "fit"),
        row("training", "compiled / eager", compiled, eager, "eager", ">= 10x"),
    ]


def task_run(storage, files, extra: list[str], workers: int = 1) -> dict:
    """Runs `trainer.task` (or a local cluster) and reads its progress lines.

    Returns:
      examples/s (median over loops after the first), seconds from start to the first
      finished loop, and export seconds, from the chief.
    """
    job = f"{FLAGS.data_dir}/jobs/{time.time_ns()}"
    glob = files[0].rsplit("/", 1)[0] + "/train-*.tfrecord"
    steps = 200 if FLAGS.quick else 1500
    args = [sys.executable, "-m", "trainer.task", f"--train_data={glob}", "--label=label",
            "--task=binary", f"--job_dir={job}", f"--batch_size={FLAGS.batch_size}",
            f"--train_steps={steps}", "--steps_per_loop=100", "--seed=1",
            f"--hidden_units={','.join(map(str, HIDDEN))}", *extra]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env.update(PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    ports = _free_ports(workers)
    cluster = {"chief": [f"localhost:{ports[0]}"],
               "worker": [f"localhost:{p}" for p in ports[1:]]}
    procs = []
    start = time.perf_counter()
    for i in range(workers):
        task = {"type": "chief", "index": 0} if i == 0 else {"type": "worker", "index": i - 1}
        if workers > 1:
            env = {**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": task})}
        procs.append(subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    first_loop, rates, export = None, [], None
    for line in procs[0].stderr:
        if " step " in line and "examples/s=" in line:
            first_loop = first_loop or time.perf_counter() - start
            rates.append(float(re.search(r"examples/s=([\d,]+)", line)[1].replace(",", "")))
        m = re.search(r"exported the model to .* in ([\d.]+)s", line)
        if m:
            export = float(m[1])
    for p in procs:
        if p.wait(timeout=600):
            raise RuntimeError(f"trainer.task {extra} exited with {p.returncode}")
    storage.remove_tree(job)
    return {"rate": statistics.median(rates[1:]), "first_step_s": first_loop,
            "export_s": export}


def strategies(storage, files) -> list[dict]:
    configs = {
        "default strategy": (["--strategy=default"], 1),
        "MirroredStrategy, 1 device": (["--strategy=mirrored"], 1),
        "MirroredStrategy, 2 logical CPUs": (["--cpu_devices=2"], 1),
        "MultiWorkerMirrored, 2 local workers": ([], 2),
    }
    runs = {name: {} for name in configs}
    # Interleaved repetitions, so a slow moment of the machine does not hit one row only.
    samples = {name: [] for name in configs}
    for _ in range(FLAGS.repeats):
        for name, (extra, workers) in configs.items():
            samples[name].append(task_run(storage, files, extra, workers))
    for name, results in samples.items():
        runs[name] = {key: statistics.median(r[key] for r in results)
                      for key in ("rate", "first_step_s", "export_s")}
    base = runs["default strategy"]["rate"]
    rows = [row("strategy", name, r["rate"], base, "default",
                "<= 10% slower" if name == "MirroredStrategy, 1 device" else "")
            for name, r in runs.items()]
    first = runs["default strategy"]
    rows.append(row("start-up", "process start to first loop of 100 steps (s)",
                    first["first_step_s"], None, "", unit="s"))
    rows.append(row("start-up", "export (s)", first["export_s"], None, "", unit="s"))
    return rows


def row(section, name, value, baseline, baseline_name, target="", unit="examples/s"):
    return {"section": section, "name": name, "value": value, "unit": unit,
            "ratio": value / baseline if baseline else None, "baseline": baseline_name,
            "target": target}


def machine() -> str:
    return (f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), "
            f"TensorFlow {tf.__version__}, Keras {keras.__version__}, "
            f"Python {platform.python_version()}, GPUs: "
            f"{len(tf.config.list_physical_devices('GPU'))}")


def print_table(rows: list[dict]) -> None:
    print(f"\n{'section':<10} {'benchmark':<44} {'value':>14} {'ratio':>16}  target")
    for r in rows:
        value = f"{r['value']:,.2f} s" if r["unit"] == "s" else f"{r['value']:,.0f}/s"
        ratio = f"{r['ratio']:.2f}x {r['baseline']}" if r["ratio"] is not None else ""
        print(f"{r['section']:<10} {r['name']:<44} {value:>14} {ratio:>16}  {r['target']}")


def _free_ports(n: int) -> list[int]:
    import socket
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def main(argv):
    del argv
    if FLAGS.quick:
        FLAGS.examples, FLAGS.repeats = 20_000, 1
    storage = storage_lib.Storage()
    files = dataset_files(storage)
    schema = schema_lib.infer(inputs.sample_records(storage, files, 10_000), "label", "binary")
    n = FLAGS.examples
    print(f"machine: {machine()}\ndata: {n:,} examples in {len(files)} files, "
          f"global batch {FLAGS.batch_size}, medians of {FLAGS.repeats} after a warm-up",
          flush=True)
    rows = input_pipeline(files, schema, n)
    rows += training_throughput(files, schema, steps=100 if FLAGS.quick else 500)
    rows += strategies(storage, files)
    if tf.config.list_physical_devices("GPU"):
        print("GPU found: this benchmark has no GPU section yet (see README, Performance)")
    print_table(rows)
    storage.write_json(FLAGS.output, {"machine": machine(), "examples": n,
                                      "batch_size": FLAGS.batch_size, "rows": rows})
    print(f"\nwritten to {FLAGS.output}")


if __name__ == "__main__":
    app.run(main)
