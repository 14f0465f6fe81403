"""Input pipeline: defaults for missing values, labels, sharding, order, bad records."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import data_globs
from test_schema import example
from trainer import inputs
from trainer import schema as schema_lib


def write(store, uri, serialized):
    store.makedirs(uri.rsplit("/", 1)[0])
    with tf.io.TFRecordWriter(store.path(uri)) as w:
        for s in serialized:
            w.write(s)
    return uri


def infer(store, glob, task):
    files = store.glob(glob)
    return files, schema_lib.infer(inputs.sample_records(store, files, 1000), "label", task)


def test_missing_features_get_schema_defaults(store):
    schema = schema_lib.Schema(
        label=schema_lib.Label("label", "string", ("no", "yes")),
        features=(schema_lib.Feature("x", "float", "numeric", mean=5.0, std=2.0),
                  schema_lib.Feature("c", "string", "categorical", vocabulary=("a",))))
    uri = write(store, "gs://test-bucket/missing/a.tfrecord",
                [example(x=1.0, c="a", label="yes"), example(label="no")])
    features, labels = next(iter(inputs.make_dataset([store.path(uri)], schema, batch_size=2,
                                                     training=False)))
    np.testing.assert_allclose(features["x"].numpy(), [[1.0], [5.0]])
    assert features["c"].numpy().tolist() == [[b"a"], [b""]]
    assert labels.numpy().tolist() == [1, 0]  # class indices in the schema's order


def test_batches_have_the_requested_shape(store):
    files, schema = infer(store, data_globs("multiclass")[0], "multiclass")
    ds = inputs.make_dataset([store.path(f) for f in files], schema, batch_size=16,
                             training=True, seed=1)
    features, labels = next(iter(ds))
    assert features["scores"].shape == (16, 3) and features["age"].shape == (16, 1)
    assert labels.dtype == tf.int32 and set(labels.numpy()) <= {0, 1, 2}


def rows(batch):
    """Identifies each example of a batch by its 'scores' vector (unique per example)."""
    return sorted(map(tuple, np.round(batch[0]["scores"].numpy(), 6)))


def test_record_shards_together_form_the_single_pipeline_batches(store):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    common = dict(training=True, seed=3, shuffle_buffer=64, shard_by="record")
    single = list(inputs.make_dataset(paths, schema, batch_size=12, **common).take(5))
    shards = [list(inputs.make_dataset(paths, schema, batch_size=4, num_shards=3,
                                       shard_index=i, **common).take(5)) for i in range(3)]
    for step in range(5):
        union = sorted(sum((rows(shards[i][step]) for i in range(3)), []))
        assert union == rows(single[step])


def test_file_shards_split_the_files(store):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    seen = []
    for i in range(2):
        ds = inputs.make_dataset(paths, schema, batch_size=1000, training=False,
                                 num_shards=2, shard_index=i, shard_by="file")
        seen.append(sum((rows(b) for b in ds), []))
    assert len(seen[0]) == len(seen[1]) == 256  # 2 of the 4 files of 128 records each
    assert not set(seen[0]) & set(seen[1])


@pytest.mark.parametrize("policy, files, shards, expected", [
    ("auto", 8, 4, "file"), ("auto", 2, 3, "record"), ("record", 8, 2, "record"),
    ("file", 1, 2, "file")])
def test_sharding_choice(policy, files, shards, expected):
    assert inputs.choose_sharding(policy, files, shards) == expected


def test_seed_makes_order_deterministic(store):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    first = [rows(b) for b in inputs.make_dataset(paths, schema, batch_size=8, training=True,
                                                  seed=5).take(3)]
    again = [rows(b) for b in inputs.make_dataset(paths, schema, batch_size=8, training=True,
                                                  seed=5).take(3)]
    other = [rows(b) for b in inputs.make_dataset(paths, schema, batch_size=8, training=True,
                                                  seed=6).take(3)]
    assert first == again and first != other


def test_bad_record_is_found_and_named(store):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    good = [r.numpy() for r in tf.data.TFRecordDataset(store.path(files[0]))]
    bad = write(store, "gs://test-bucket/bad/part-1.tfrecord",
                good * 2 + [example(age=1.0)] + good)  # no label, in the second batch of 256
    message = inputs.find_bad_record(store, [files[0], bad], schema)
    assert message == ("gs://test-bucket/bad/part-1.tfrecord record 256: "
                       "Feature: label (data type: int64) is required but could not be found.")
    wrong_type = write(store, "gs://test-bucket/bad/part-2.tfrecord",
                       [example(age="old", label=1)])
    assert "age" in inputs.find_bad_record(store, [wrong_type], schema)
    assert inputs.find_bad_record(store, files, schema) is None
    # A bounded check (what start-up does) stops before the bad record.
    assert inputs.find_bad_record(store, [bad], schema, limit=256) is None
    assert inputs.find_bad_record(store, [bad], schema, limit=257) == message


def test_corrupt_file_is_named(store):
    files, _ = infer(store, data_globs("binary")[0], "binary")
    data = bytearray(store.read_bytes(files[0]))
    data[len(data) // 2: len(data) // 2 + 8] = b"garbage!"
    store.write_bytes("gs://test-bucket/bad/corrupt.tfrecord", bytes(data))
    with pytest.raises(inputs.DataError, match=(
            r"cannot read gs://test-bucket/bad/corrupt.tfrecord: "
            r"corrupted record at \d+$")):
        list(inputs.sample_records(store, [files[1], "gs://test-bucket/bad/corrupt.tfrecord"],
                                   10_000))
