"""Variable-length features end to end: lists of tags and readings of any length (empty
ones too) are inferred, trained on (a signal that lives only in them is learnt), export
and serve through both signatures, and train alike on one replica or two."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from test_predict import predict
from test_training import max_abs_diff, train

from conftest import BUCKET

TAGS = tuple(f"t{i}" for i in range(30))  # more than one-hot takes: embedded, as a bag
COLORS = ("red", "green", "blue")  # few: multi-hot


def record(rng) -> tuple[bytes, int]:
    tags = list(rng.choice(TAGS, rng.integers(0, 5), replace=False))
    colors = list(rng.choice(COLORS, rng.integers(0, 3), replace=False))
    readings = list(rng.normal(0, 1, rng.integers(0, 6)))
    score = 2.0 * ("t3" in tags) + (max(readings) if readings else 0.0) - 1.2
    label = int(score > 0)
    feature = {
        "tags": tf.train.Feature(bytes_list=tf.train.BytesList(value=[t.encode() for t in tags])),
        "colors": tf.train.Feature(
            bytes_list=tf.train.BytesList(value=[c.encode() for c in colors])
        ),
        "readings": tf.train.Feature(float_list=tf.train.FloatList(value=readings)),
        "noise": tf.train.Feature(float_list=tf.train.FloatList(value=[rng.normal()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(), label


@pytest.fixture(scope="module")
def varlen_data(store):
    rng = np.random.default_rng(0)
    made = [record(rng) for _ in range(1500)]
    for name, part in (("train", made[:1200]), ("eval", made[1200:])):
        uri = f"gs://{BUCKET}/varlen/{name}.tfrecord"
        store.makedirs(uri.rsplit("/", 1)[0])
        with tf.io.TFRecordWriter(store.path(uri)) as w:
            for serialized, _ in part:
                w.write(serialized)
    return [r for r, _ in made[1200:]], np.array([y for _, y in made[1200:]])


FLAGS = dict(
    train_data=f"gs://{BUCKET}/varlen/train.tfrecord",
    validation_data=f"gs://{BUCKET}/varlen/eval.tfrecord",
    task="binary",
    train_steps=300,
    learning_rate=1e-2,
    batch_size=32,
)


def test_signal_in_variable_length_features_is_learnt_and_served(
    fake_gcs, job_uri, store, varlen_data
):
    records, labels = varlen_data
    _, result = train(fake_gcs, job_uri, tf.distribute.get_strategy(), **FLAGS)
    features = {f.name: f for f in result.schema.features}
    assert features["tags"].varlen and features["tags"].size == 4
    assert features["readings"].varlen and features["colors"].varlen
    base_rate = max(labels.mean(), 1 - labels.mean())
    assert result.metrics["accuracy"] > max(0.9, base_rate + 0.2), result.metrics

    model_dir = store.path(f"{job_uri}/model")
    model = tf.saved_model.load(model_dir)
    served = model.signatures["serving_default"](examples=tf.constant(records))
    raw = predict.raw_body(records, model_dir, model)
    empty = next(
        i
        for i in raw["instances"]
        if not any(t for t in i["tags"]) and np.isnan(i["readings"]).all()
    )  # empty lists: all pads
    assert empty["tags"] == [""] * 4 and len(empty["readings"]) == 5
    answered = predict.answer(raw, model)
    np.testing.assert_allclose(
        [p["probabilities"] for p in answered["predictions"]],
        served["probabilities"].numpy(),
        atol=1e-6,
    )


def test_variable_length_features_train_alike_on_one_replica_or_two(
    fake_gcs, job_uri, varlen_data, mirrored_two_cpus
):
    flags = {**FLAGS, "train_steps": 20, "shard_by": "record"}
    one, _ = train(fake_gcs, job_uri + "/one", tf.distribute.OneDeviceStrategy("/cpu:0"), **flags)
    two, _ = train(fake_gcs, job_uri + "/two", mirrored_two_cpus, **flags)
    assert max_abs_diff(one, two) <= 1e-5
