"""Writes a synthetic tabular dataset with a learnable signal as sharded TFRecords.

    python -m trainer.sample_data --output=gs://sample-bucket/data --task=binary \
        --fake_gcs_root=.local/gcs

Features: numeric `age`, `income` (float, some missing), `visits` (int), `scores`
(3 floats), categorical `color` (6 values, some missing) and `city` (40 values). The
label `label` depends on all of them, so a model can learn it: a float for
regression, 0/1 for binary, 'low'/'mid'/'high' for multiclass.
"""

from __future__ import annotations

import sys

import numpy as np
import tensorflow as tf
from absl import app, flags

from trainer.base import storage as storage_lib

COLORS = ("red", "green", "blue", "yellow", "black", "white")
CITIES = tuple(f"city_{i:02d}" for i in range(40))


def _feature(values) -> tf.train.Feature:
    if isinstance(values[0], (bytes, str)):
        return tf.train.Feature(
            bytes_list=tf.train.BytesList(
                value=[v.encode() if isinstance(v, str) else v for v in values]
            )
        )
    if isinstance(values[0], (int, np.integer)):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))
    return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


def make_examples(num: int, task: str, seed: int) -> list[bytes]:
    """Returns `num` serialized Examples with a label for `task`."""
    rng = np.random.default_rng(seed)
    age = rng.normal(40, 12, num)
    income = rng.lognormal(10, 0.5, num)
    visits = rng.poisson(3, num)
    scores = rng.normal(0, 1, (num, 3))
    color = rng.integers(0, len(COLORS), num)
    city = rng.integers(0, len(CITIES), num)
    city_effect = np.sin(np.arange(len(CITIES)))
    signal = (
        0.04 * (age - 40)
        + 0.8 * (np.log(income) - 10)
        + 0.2 * (visits - 3)
        + scores @ np.array([0.5, -0.3, 0.2])
        + 0.6 * (color % 3 - 1)
        + city_effect[city]
        + rng.normal(0, 0.3, num)
    )
    if task == "regression":
        labels: list = [float(s) for s in signal]
    elif task == "binary":
        labels = [int(s > 0) for s in signal]
    else:
        cut = np.quantile(signal, [1 / 3, 2 / 3])
        labels = [("low", "mid", "high")[int(np.searchsorted(cut, s))] for s in signal]
    examples = []
    for i in range(num):
        features = {
            "visits": _feature([visits[i]]),
            "scores": _feature(scores[i]),
            "city": _feature([CITIES[city[i]]]),
            "label": _feature([labels[i]]),
        }
        # Missing values are absent keys, as in real exports.
        if rng.random() > 0.05:
            features["age"] = _feature([age[i]])
        if rng.random() > 0.1:
            features["income"] = _feature([income[i]])
        if rng.random() > 0.05:
            features["color"] = _feature([COLORS[color[i]]])
        examples.append(
            tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()
        )
    return examples


def write_tfrecords(
    storage: storage_lib.Storage, prefix: str, records: list[bytes], num_shards: int
) -> list[str]:
    """Writes `records` round-robin into `prefix-0000i-of-0000n.tfrecord` files.

    Each shard is written under a temporary name and renamed, so a reader never sees
    half a file.
    """
    uris = []
    for shard in range(num_shards):
        uri = f"{prefix}-{shard:05d}-of-{num_shards:05d}.tfrecord"
        parent = uri.rsplit("/", 1)[0]
        storage.makedirs(parent)
        with tf.io.TFRecordWriter(storage.path(uri + ".tmp")) as writer:
            for record in records[shard::num_shards]:
                writer.write(record)
        storage.rename(uri + ".tmp", uri)
        uris.append(uri)
    return uris


def write_dataset(
    storage: storage_lib.Storage,
    output: str,
    task: str,
    train_examples: int,
    eval_examples: int,
    num_shards: int,
    seed: int = 0,
) -> dict[str, list[str]]:
    """Writes `output/train-*.tfrecord` and `output/eval-*.tfrecord`."""
    records = make_examples(train_examples + eval_examples, task, seed)
    return {
        "train": write_tfrecords(
            storage, storage_lib.join(output, "train"), records[:train_examples], num_shards
        ),
        "eval": write_tfrecords(
            storage,
            storage_lib.join(output, "eval"),
            records[train_examples:],
            max(1, num_shards // 4),
        ),
    }


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Flags of the command line; not defined on import, so other tools can import this."""
    flags.DEFINE_string("output", None, "Folder (gs:// or local) for train-* and eval-* files.")
    flags.DEFINE_enum("task", "binary", ["regression", "binary", "multiclass"], "Label kind.")
    flags.DEFINE_integer("train_examples", 20_000, "Training examples.")
    flags.DEFINE_integer("eval_examples", 4_000, "Evaluation examples.")
    flags.DEFINE_integer("num_shards", 8, "Training files.")
    flags.DEFINE_integer("seed", 0, "Random seed.")
    flags.DEFINE_string(
        "fake_gcs_root",
        None,
        "Serve gs://BUCKET/PATH from DIR/BUCKET/PATH; the bucket folders are created.",
    )


def main(argv):
    del argv
    storage = storage_lib.Storage(FLAGS.fake_gcs_root)
    try:
        if FLAGS.fake_gcs_root and storage_lib.is_gcs(FLAGS.output):
            storage.create_bucket(storage_lib.split_gcs(FLAGS.output)[0])
        written = write_dataset(
            storage,
            FLAGS.output,
            FLAGS.task,
            FLAGS.train_examples,
            FLAGS.eval_examples,
            FLAGS.num_shards,
            FLAGS.seed,
        )
    except storage_lib.StorageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"wrote {len(written['train'])} training and {len(written['eval'])} evaluation "
        f"files under {FLAGS.output}"
    )
    return 0


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("output")
    app.run(main)
