"""Input pipeline: defaults for missing values, labels, sharding, order, bad records."""

import numpy as np
import pytest
import tensorflow as tf
from test_schema import example

from trainer.data import inference, inputs, records, scan
from trainer.data import schema as schema_lib

from conftest import data_globs


def write(store, uri, serialized):
    store.makedirs(uri.rsplit("/", 1)[0])
    with tf.io.TFRecordWriter(store.path(uri)) as w:
        for s in serialized:
            w.write(s)
    return uri


def infer(store, glob, task):
    files = store.glob(glob)
    return files, inference.infer(scan.sample_records(store, files, 1000), "label", task)


def test_missing_features_get_schema_defaults(store):
    schema = schema_lib.Schema(
        label=schema_lib.Label("label", "string", ("no", "yes")),
        features=(
            schema_lib.Feature("x", "float", "numeric", mean=5.0, std=2.0),
            schema_lib.Feature("c", "string", "categorical", vocabulary=("a",)),
        ),
    )
    uri = write(
        store,
        "gs://test-bucket/missing/a.tfrecord",
        [example(x=1.0, c="a", label="yes"), example(label="no")],
    )
    features, labels, _ = next(
        iter(inputs.make_dataset([store.path(uri)], schema, batch_size=2, training=False))
    )
    np.testing.assert_allclose(features["x"].numpy(), [[1.0], [5.0]])
    assert features["c"].numpy().tolist() == [[b"a"], [b""]]
    assert labels.numpy().tolist() == [1, 0]  # class indices in the schema's order


def test_a_feature_marked_missing_parses_as_nan_and_only_infinity_fails(store):
    """`Feature.missing`: a record without the feature, or with NaN in it, parses as NaN
    (the model marks it missing); an infinite value fails, naming the feature."""
    schema = schema_lib.Schema(
        label=schema_lib.Label("label", "string", ("no", "yes")),
        features=(schema_lib.Feature("x", "float", "numeric", mean=5.0, std=2.0, missing=True),),
    )
    uri = write(
        store,
        "gs://test-bucket/marked/a.tfrecord",
        [example(x=1.0, label="yes"), example(label="no"), example(x=float("nan"), label="no")],
    )
    features, _, _ = next(
        iter(inputs.make_dataset([store.path(uri)], schema, batch_size=3, training=False))
    )
    np.testing.assert_array_equal(features["x"].numpy(), [[1.0], [np.nan], [np.nan]])
    bad = write(store, "gs://test-bucket/marked/b.tfrecord", [example(x=float("inf"), label="no")])
    assert "feature 'x' has a non-finite value" in scan.find_bad_record(store, [bad], schema)


def test_batches_have_the_requested_shape(store):
    files, schema = infer(store, data_globs("multiclass")[0], "multiclass")
    ds = inputs.make_dataset(
        [store.path(f) for f in files], schema, batch_size=16, training=True, seed=1
    )
    features, labels, weights = next(iter(ds))
    assert features["scores"].shape == (16, 3) and features["age"].shape == (16, 1)
    assert labels.dtype == tf.int32 and set(labels.numpy()) <= {0, 1, 2}
    assert weights.numpy().tolist() == [1.0] * 16  # no --weight: every record weighs 1


def rows(batch):
    """Identifies each example of a batch by its 'scores' vector (unique per example)."""
    return sorted(map(tuple, np.round(batch[0]["scores"].numpy(), 6)))


CACHES = ("memory", "stream")


@pytest.mark.parametrize("cache", CACHES)
def test_record_shards_together_form_the_single_pipeline_batches(store, cache):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    common = dict(training=True, seed=3, shuffle_buffer=64, shard_by="record", cache=cache)
    single = list(inputs.make_dataset(paths, schema, batch_size=12, **common).take(50))
    shards = [
        list(
            inputs.make_dataset(
                paths, schema, batch_size=4, num_shards=3, shard_index=i, **common
            ).take(50)
        )
        for i in range(3)
    ]
    for step in range(50):  # 600 records: past the end of the first epoch (512)
        union = sorted(sum((rows(shards[i][step]) for i in range(3)), []))
        assert union == rows(single[step])


def test_file_shards_split_the_files(store):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    seen = []
    for i in range(2):
        ds = inputs.make_dataset(
            paths,
            schema,
            batch_size=1000,
            training=False,
            num_shards=2,
            shard_index=i,
            shard_by="file",
        )
        seen.append(sum((rows(b) for b in ds), []))
    assert len(seen[0]) == len(seen[1]) == 256  # 2 of the 4 files of 128 records each
    assert not set(seen[0]) & set(seen[1])


@pytest.mark.parametrize(
    "policy, files, shards, expected",
    [
        ("auto", 8, 4, "file"),
        ("auto", 2, 3, "record"),
        ("record", 8, 2, "record"),
        ("file", 1, 2, "file"),
    ],
)
def test_sharding_choice(policy, files, shards, expected):
    assert inputs.choose_sharding(policy, files, shards) == expected


@pytest.mark.parametrize("cache", CACHES)
def test_the_training_stream_is_known_to_be_infinite(store, cache):
    """So a distributed iterator over it runs no per-step all-reduce asking whether every
    worker still has data; evaluation data stays finite (it must end)."""
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    train = inputs.make_dataset(paths, schema, batch_size=8, training=True, cache=cache)
    assert train.cardinality() == tf.data.INFINITE_CARDINALITY
    evaluation = inputs.make_dataset(paths, schema, batch_size=8, training=False)
    assert evaluation.cardinality() != tf.data.INFINITE_CARDINALITY


def test_the_in_memory_stream_runs_without_tf_data_s_autotuning_thread(store):
    """Freeing an iterator waits for that thread to wake (5-9 s in 1 default job of 6,
    docs/decisions.md); the streamed pipeline keeps autotuning its file reads."""
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]
    memory = inputs.make_dataset(paths, schema, batch_size=8, training=True, cache="memory")
    assert memory.options().autotune.enabled is False
    stream = inputs.make_dataset(paths, schema, batch_size=8, training=True, cache="stream")
    assert stream.options().autotune.enabled is not False


@pytest.mark.parametrize("cache", CACHES)
def test_seed_makes_order_deterministic(store, cache):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    paths = [store.path(f) for f in files]

    def order(seed):
        return [
            rows(b)
            for b in inputs.make_dataset(
                paths,
                schema,
                batch_size=8,
                training=True,
                seed=seed,
                cache=cache,
                shuffle_buffer=100,
            ).take(3)
        ]

    assert order(5) == order(5) and order(5) != order(6)


@pytest.mark.parametrize("cache", CACHES)
def test_every_epoch_holds_every_record_once_in_a_new_order(store, cache):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    batches = [
        rows(b)
        for b in inputs.make_dataset(
            [store.path(f) for f in files],
            schema,
            batch_size=16,
            training=True,
            seed=2,
            cache=cache,
            shuffle_buffer=100,
        ).take(3 * 512 // 16)
    ]
    epochs = [sum(batches[i * 32 : (i + 1) * 32], []) for i in range(3)]
    assert all(len(set(e)) == 512 for e in epochs) and set(epochs[0]) == set(epochs[2])
    assert epochs[0] != epochs[1] != epochs[2]


@pytest.mark.parametrize(
    "cache, shard_by, shards",
    [
        ("memory", "record", 1),
        ("stream", "record", 1),
        ("memory", "record", 3),
        ("stream", "record", 3),
        ("memory", "file", 2),
        ("stream", "file", 2),
    ],
)
def test_resumed_stream_continues_exactly_where_it_stopped(store, cache, shard_by, shards):
    """Started at step s, every pipeline yields what it would have yielded after s steps,
    here 9+ epochs in: a resumed job trains on the records an uninterrupted one would."""
    files, schema = infer(store, data_globs("binary")[0], "binary")
    common = dict(
        batch_size=4,
        step_size=8,
        training=True,
        seed=4,
        cache=cache,
        shuffle_buffer=100,
        num_shards=shards,
        shard_by=shard_by,
    )
    paths = [store.path(f) for f in files]
    for index in range(shards):
        for start_step in (1, 37, 600):  # inside the first window, epoch, ninth epoch
            resumed = inputs.make_dataset(
                paths, schema, start_step=start_step, shard_index=index, **common
            )
            full = inputs.make_dataset(paths, schema, shard_index=index, **common)
            # Two batches (the pipeline's replicas) per step.
            expected = [rows(b) for b in full.skip(2 * start_step).take(6)]
            assert [rows(b) for b in resumed.take(6)] == expected


def test_a_resumed_stream_given_the_plan_count_reads_no_count(store, monkeypatch):
    """The plan's count of every file (`records`) stands in for the stream's own count:
    the same records follow, and nothing is counted."""
    files, schema = infer(store, data_globs("binary")[0], "binary")  # 512 records
    paths = [store.path(f) for f in files]
    common = dict(batch_size=4, training=True, seed=4, cache="stream", shuffle_buffer=100)
    expected = [rows(b) for b in inputs.make_dataset(paths, schema, **common).skip(300).take(6)]
    monkeypatch.setattr(records, "count", lambda *a, **k: pytest.fail("counted"))
    resumed = inputs.make_dataset(paths, schema, start_step=300, records=512, **common)
    assert [rows(b) for b in resumed.take(6)] == expected


def write_sorted_files(store, prefix: str, files: int, per_file: int) -> list[str]:
    """Files that are each sorted by label (all 0s, then all 1s), as database exports
    often are; `x` numbers the records."""
    uris = []
    for f in range(files):
        uris.append(
            write(
                store,
                f"{prefix}/part-{f}.tfrecord",
                [
                    example(x=float(f * per_file + i), label=int(i >= per_file // 2))
                    for i in range(per_file)
                ],
            )
        )
    return uris


def batch_mix_error(labels: np.ndarray, batch: int) -> float:
    """Mean absolute difference between each batch's share of label 1 and the overall
    share: how far consecutive batches are from the data's label mix."""
    shares = labels[: len(labels) // batch * batch].reshape(-1, batch).mean(axis=1)
    return float(np.mean(np.abs(shares - labels.mean())))


@pytest.mark.parametrize(
    "cache, window, worst",
    [
        ("memory", 100, 1.2),  # the default for data that fits: a full shuffle every epoch
        ("stream", 8000, 1.2),  # a window as large as the data: a full shuffle too
        ("stream", 200, None),
    ],
)  # sorted files, small window: documented as not mixing
def test_sorted_files_mix_like_a_full_shuffle(store, cache, window, worst):
    """8 files of 1,000 records, each sorted by label. Over two epochs, batches of 50 are
    compared with a fully shuffled stream of the same labels (the mean over 20 NumPy
    permutations): the label mix of a batch must be off by at most `worst` times as much
    as with a full shuffle."""
    uris = write_sorted_files(store, "gs://test-bucket/sorted", files=8, per_file=1000)
    schema = schema_lib.Schema(
        label=schema_lib.Label("label", "int", (0, 1)),
        features=(schema_lib.Feature("x", "float", "numeric"),),
    )
    labels = np.concatenate(
        [
            y.numpy()
            for _, y, _ in inputs.make_dataset(
                [store.path(u) for u in uris],
                schema,
                batch_size=50,
                training=True,
                seed=1,
                cache=cache,
                shuffle_buffer=window,
            ).take(2 * 8000 // 50)
        ]
    )
    rng = np.random.default_rng(0)
    shuffled = np.mean([batch_mix_error(rng.permutation(labels), 50) for _ in range(20)])
    error = batch_mix_error(labels, 50)
    if worst is None:
        # What docs/guide/performance.md says of streamed sorted files: a window holds
        # the same stretch of each file, so batches stay close to all-0 or all-1.
        assert error > 5 * shuffled, (error, shuffled)
    else:
        assert error <= worst * shuffled, (error, shuffled)


def test_bad_record_is_found_and_named(store):
    files, schema = infer(store, data_globs("binary")[0], "binary")
    good = [r.numpy() for r in tf.data.TFRecordDataset(store.path(files[0]))]
    bad = write(
        store, "gs://test-bucket/bad/part-1.tfrecord", good * 2 + [example(age=1.0)] + good
    )  # no label, in the second batch of 256
    message = scan.find_bad_record(store, [files[0], bad], schema)
    assert message == (
        "gs://test-bucket/bad/part-1.tfrecord record 256: "
        "Feature: label (data type: int64) is required but could not be found."
    )
    wrong_type = write(store, "gs://test-bucket/bad/part-2.tfrecord", [example(age="old", label=1)])
    assert "age" in scan.find_bad_record(store, [wrong_type], schema)
    assert scan.find_bad_record(store, files, schema) is None
    # A bounded check (what start-up does) stops before the bad record.
    assert scan.find_bad_record(store, [bad], schema, limit=256) is None
    assert scan.find_bad_record(store, [bad], schema, limit=257) == message


def test_corrupt_file_is_named(store):
    files, _ = infer(store, data_globs("binary")[0], "binary")
    data = bytearray(store.read_bytes(files[0]))
    data[len(data) // 2 : len(data) // 2 + 8] = b"garbage!"
    store.write_bytes("gs://test-bucket/bad/corrupt.tfrecord", bytes(data))
    with pytest.raises(
        inputs.DataError,
        match=(
            r"cannot read gs://test-bucket/bad/corrupt.tfrecord: "
            r"corrupted record at \d+$"
        ),
    ):
        list(
            scan.sample_records(store, [files[1], "gs://test-bucket/bad/corrupt.tfrecord"], 10_000)
        )


def test_a_sample_takes_files_in_turn_and_names_each_record_s_place(store):
    """The sample is read in batches (scan.SAMPLE_BATCH); across their boundaries each
    record still comes with its own file and index, the files in turn, each record once."""
    files = [
        write(
            store,
            f"gs://test-bucket/sample/part-{i}.tfrecord",
            [b"%d:%d" % (i, r) for r in range(n)],
        )
        for i, n in enumerate([scan.SAMPLE_BATCH, 700, 300])
    ]
    everything = list(scan.sample_records(store, files, 10_000))
    assert len(everything) == scan.SAMPLE_BATCH + 1000
    for where, record in everything:
        shard, index = record.decode().split(":")
        assert where == f"{files[int(shard)]} record {index}"
    assert [r for _, r in everything[:6]] == [b"0:0", b"1:0", b"2:0", b"0:1", b"1:1", b"2:1"]
    assert len({r for _, r in everything}) == len(everything)
    some = list(scan.sample_records(store, files, scan.SAMPLE_BATCH + 5))
    assert some == everything[: scan.SAMPLE_BATCH + 5]


@pytest.mark.parametrize("cache", CACHES)
def test_nothing_readable_is_an_error_not_an_endless_stream(store, cache):
    """Skipping corrupt data can leave no record at all: an endless stream of empty epochs
    would hang the job, so it stops, saying so."""
    files, schema = infer(store, data_globs("binary")[0], "binary")
    store.write_bytes("gs://test-bucket/garbage/part-0.tfrecord", b"not a tfrecord" * 10)
    with pytest.raises(inputs.DataError, match=r"no training records could be read from 1 "):
        inputs.make_dataset(
            [store.path("gs://test-bucket/garbage/part-0.tfrecord")],
            schema,
            batch_size=4,
            training=True,
            cache=cache,
            skip_corrupt=True,
        )


def test_count_with_a_limit_stops_reading_once_it_is_reached(store):
    paths = [store.path(f) for f in store.glob(data_globs("binary")[0])]  # 512 records
    assert records.count(paths, skip_corrupt=False, limit=10_000) == 512
    # Counted by blocks: at least the limit, and not all 4 files' worth.
    assert 100 <= records.count(paths, skip_corrupt=False, limit=100) < 512
