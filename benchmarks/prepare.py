"""trainer.prepare against converting row by row in Python, and against merely reading.

    python -m benchmarks.prepare [--rows=1000000] [--baseline_rows=100000]

One Parquet table of `--rows` rows like a typical tabular export (10 float columns with
missing values, 4 integer, 3 string categoricals, a timestamp, a list of tags, a label)
is written to a temporary folder, then, in one run:
  - read:      `pyarrow.parquet.read_table` of the file (the floor: no conversion at all);
  - prepare:   `trainer.prepare`'s in-process runner, random 80/10/10 split, TFRecords;
  - row by row: what most users write: `table.to_pylist()`, a `tf.train.Example` per row,
    `TFRecordWriter.write` (on the first `--baseline_rows` rows; its rate is per row).
Prints rows/s of each and the ratios prepare / row by row and read / prepare.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("rows", 1_000_000, "Rows of the table.")
flags.DEFINE_integer("baseline_rows", 100_000, "Rows converted row by row.")


def make_table(n: int, seed: int = 0):
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    cols = {}
    for k in range(10):
        x = rng.normal(size=n)
        x[rng.random(n) < 0.05] = np.nan
        cols[f"f{k}"] = pa.array(x, from_pandas=True)  # NaN -> null, as in a real export
    for k in range(4):
        cols[f"i{k}"] = rng.integers(0, 10 ** (k + 2), n)
    for k in range(3):
        cols[f"s{k}"] = pa.array(rng.choice([f"v{j}" for j in range(5 * (k + 1))], n))
    cols["when"] = pa.array(1_700_000_000 + rng.integers(0, 10**7, n), pa.timestamp("s"))
    lengths = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    cols["tags"] = pa.ListArray.from_arrays(
        offsets, pa.array(rng.choice(["a", "b", "c", "d"], offsets[-1]))
    )
    cols["label"] = rng.integers(0, 2, n)
    return pa.table(cols)


def row_by_row(table, path: str) -> None:
    """The converter most users write."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as w:
        for row in table.to_pylist():
            feature = {}
            for name, v in row.items():
                if v is None:
                    continue
                if isinstance(v, list):
                    if v and isinstance(v[0], str):
                        feature[name] = tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[s.encode() for s in v])
                        )
                    continue
                if isinstance(v, str):
                    feature[name] = tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[v.encode()])
                    )
                elif isinstance(v, float):
                    feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
                elif isinstance(v, int):
                    feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
                else:  # a datetime
                    feature[name] = tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[int(v.timestamp())])
                    )
            w.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


def main(argv):
    del argv
    import pyarrow.parquet as pq

    from trainer.base import storage as storage_lib
    from trainer.prep import local
    from trainer.prep.options import Options

    tmp = tempfile.mkdtemp(prefix="bench-prepare-")
    path = os.path.join(tmp, "table.parquet")
    pq.write_table(make_table(FLAGS.rows), path, row_group_size=128 * 1024)
    print(
        f"table: {FLAGS.rows:,} rows, {os.path.getsize(path) / 1e6:.0f} MB Parquet, "
        f"{os.cpu_count()} cores"
    )

    t = time.perf_counter()
    table = pq.read_table(path)
    read_s = time.perf_counter() - t

    t = time.perf_counter()
    report = local.run(
        Options(output=os.path.join(tmp, "out"), input=path, label="label"), storage_lib.Storage()
    )
    prepare_s = time.perf_counter() - t

    head = table.slice(0, FLAGS.baseline_rows)
    t = time.perf_counter()
    row_by_row(head, os.path.join(tmp, "rows.tfrecord"))
    rows_s = time.perf_counter() - t

    rates = {
        "read (Arrow, no conversion)": FLAGS.rows / read_s,
        "trainer.prepare (in process)": FLAGS.rows / prepare_s,
        "row by row (Python tf.train.Example)": FLAGS.baseline_rows / rows_s,
    }
    for name, rate in rates.items():
        print(f"  {name:40s} {rate:>12,.0f} rows/s")
    read, ours, theirs = rates.values()
    print(
        f"  prepare / row by row: {ours / theirs:.1f}x   "
        f"read / prepare: {read / ours:.1f}x   "
        f"(files: {sum(len(v) for v in report['files'].values())})"
    )


if __name__ == "__main__":
    app.run(main)
