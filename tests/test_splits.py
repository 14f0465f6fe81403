"""Held-out validation records: chosen by a hash of each record, whatever the files."""

import numpy as np
import tensorflow as tf

from trainer.data import records, splits

from conftest import data_globs, make_config, read_records


def random_records(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(int(rng.integers(5, 60))) for _ in range(n)]


def test_the_held_out_fraction_is_kept_within_binomial_noise():
    data = tf.constant(random_records(20_000))
    for fraction in (0.1, 0.25):
        train, held_out = splits.Part(fraction, False), splits.Part(fraction, True)
        inside = held_out(data).numpy()
        np.testing.assert_array_equal(train(data).numpy(), ~inside)  # exactly one side
        # 20,000 draws: the standard deviation of the share is <= 0.0031; 4 of them.
        assert abs(inside.mean() - fraction) < 0.0125, (fraction, inside.mean())


def test_a_record_lands_on_the_same_side_in_any_order_or_batch():
    data = random_records(2_000, seed=1)
    part = splits.Part(0.1, True)
    whole = part(tf.constant(data)).numpy()
    order = np.random.default_rng(2).permutation(len(data))
    shuffled = part(tf.constant([data[i] for i in order])).numpy()
    np.testing.assert_array_equal(shuffled, whole[order])
    one_by_one = [bool(part(tf.constant([r])).numpy()[0]) for r in data[:200]]
    assert one_by_one == list(whole[:200])
    # Identical records (duplicates) never straddle training and validation.
    twice = part(tf.constant(data[:50] + data[:50])).numpy()
    np.testing.assert_array_equal(twice[:50], twice[50:])


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
    expected = int(splits.Part(0.1, True)(tf.constant(every)).numpy().sum())
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
