"""Held-out validation records: chosen by a hash of each record and its position in its file."""

import numpy as np
import tensorflow as tf

from trainer.base import storage as storage_lib
from trainer.data import records, scan, splits

from conftest import data_globs, make_config, read_records


def random_records(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(rng.integers(5, 60))) for _ in range(n)]


def positions(n: int) -> tf.Tensor:
    return tf.range(n, dtype=tf.int64)


def test_the_held_out_fraction_is_kept_within_binomial_noise():
    data = tf.constant(random_records(20_000))
    for fraction in (0.1, 0.25):
        train, held_out = splits.Part(fraction, False), splits.Part(fraction, True)
        inside = held_out(data, positions(20_000)).numpy()
        np.testing.assert_array_equal(train(data, positions(20_000)).numpy(), ~inside)
        # 20,000 draws: the standard deviation of the share is <= 0.0031; 4 of them.
        assert abs(inside.mean() - fraction) < 0.0125, (fraction, inside.mean())


def test_a_record_lands_on_the_same_side_in_any_order_or_batch():
    data = random_records(2_000, seed=1)
    part = splits.Part(0.1, True)
    whole = part(tf.constant(data), positions(2_000)).numpy()
    order = np.random.default_rng(2).permutation(len(data))
    shuffled = part(tf.constant([data[i] for i in order]), tf.constant(order)).numpy()
    np.testing.assert_array_equal(shuffled, whole[order])
    one_by_one = [
        bool(part(tf.constant([r]), tf.constant([i]))[0]) for i, r in enumerate(data[:200])
    ]
    assert one_by_one == list(whole[:200])


def test_copies_of_a_record_are_held_out_like_any_records():
    # 4,000 copies of one record: each is held out on its own, by its position, so about
    # a tenth validate (sd 0.0047; 4 of them), not all or none of them.
    copies = tf.constant(random_records(1, seed=3) * 4_000)
    inside = splits.Part(0.1, True)(copies, positions(4_000)).numpy()
    assert abs(inside.mean() - 0.1) < 0.019, inside.mean()


def test_resolve_holds_out_only_without_validation_data(fake_gcs, job_uri, store):
    train, validation = data_globs("binary")
    given = splits.resolve(make_config(fake_gcs, job_uri), store)
    assert given.train_part is None and given.validation_part is None
    assert given.validation_files == store.glob(validation)
    held = splits.resolve(make_config(fake_gcs, job_uri, validation_data=None), store)
    assert held.validation_files == held.train_files == store.glob(train)
    assert held.validation_part == splits.Part(0.1, True)
    assert held.train_part == splits.Part(0.1, False)
    assert "0.1 of the records of" in held.validation_name
    none = splits.resolve(
        make_config(fake_gcs, job_uri, validation_data=None, holdout_fraction=0), store
    )
    assert none.validation_files == [] and none.train_part is None


def test_training_and_validation_read_complementary_records(fake_gcs, job_uri, store):
    train, _ = data_globs("binary")
    paths = [store.path(f) for f in store.glob(train)]
    every = read_records(store, train, 10_000)
    # What the part says of each record at its place in its file, file by file.
    inside = [
        splits.Part(0.1, True)(tf.constant(held), positions(len(held))).numpy()
        for held in (read_records(store, store.uri(p), 10_000) for p in paths)
    ]
    expected = int(np.concatenate(inside).sum())
    assert 0 < expected < len(every)
    held = records.count(paths, skip_corrupt=False, keep=splits.Part(0.1, True))
    rest = records.count(paths, skip_corrupt=False, keep=splits.Part(0.1, False))
    assert (held, rest) == (expected, len(every) - expected)


def test_any_record_reads_up_to_the_first_kept_one(fake_gcs, store):
    paths = [store.path(f) for f in store.glob(data_globs("binary")[0])]
    assert records.any_record(paths, skip_corrupt=False, keep=splits.Part(0.1, False))
    # A part that keeps nothing (every record "inside" a fraction of 1): the streamed
    # training data would be empty epochs forever; this is how that is caught.
    assert not records.any_record(paths, skip_corrupt=False, keep=splits.Part(1.0, False))


def test_blocks_of_any_size_keep_the_records_of_their_positions(tmp_path):
    # Three files of 10, 700 and 1,000 records (blocks of 7 and 256 end mid-file): what
    # read_blocks keeps is what the part says of each record at its index in its file.
    rng = np.random.default_rng(4)
    paths, expected = [], []
    for i, n in enumerate((10, 700, 1_000)):
        data = random_records(n, seed=10 + i) + [b"copy"] * int(rng.integers(50, 60))
        path = str(tmp_path / f"part-{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as w:
            for r in data:
                w.write(r)
        paths.append(path)
        mask = splits.Part(0.25, True)(tf.constant(data), positions(len(data))).numpy()
        expected.append([r for r, m in zip(data, mask) if m])
    held = sorted(r for part in expected for r in part)
    for block in (7, 256):
        kept = records.read_blocks(
            paths, skip_corrupt=False, block=block, keep=splits.Part(0.25, True)
        )
        assert sorted(r for b in kept for r in b.numpy()) == held, block
    # The schema's sample (record by record) keeps the same records.
    sampled = scan.sample_records(
        storage_lib.Storage(), paths, 10_000, keep=splits.Part(0.25, True)
    )
    assert sorted(r for _, r in sampled) == held
    # Some copies of b"copy" train and some validate, in each of the big files.
    for path, part in zip(paths[1:], expected[1:]):
        copies = part.count(b"copy")
        assert 0 < copies < 50, (path, copies)
