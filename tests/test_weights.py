"""--weight: a weight of 2 on a record is that record twice, in the gradient and in every
metric; a record without the weight weighs 1; the weight is no model input."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_inputs import write
from test_schema import example
from test_training import max_abs_diff, train

from trainer.data import inference, inputs, scan
from trainer.data import schema as schema_lib
from trainer.evaluate import metrics
from trainer.model import heads, optimizers
from trainer.train import loops as training

SCHEMA = schema_lib.Schema(
    label=schema_lib.Label("label", "int", (0, 1)),
    features=(
        schema_lib.Feature("x", "float", "numeric"),
        schema_lib.Feature("c", "string", "categorical", vocabulary=("a", "b")),
    ),
    weight=schema_lib.Weight("w"),
)


def one_step(batch, global_batch_size: int) -> list[np.ndarray]:
    """Weights and Adam moments after one train_step from a fixed initialisation (the
    moments are linear in the gradient)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    )
    optimizer = optimizers.make_optimizer(1e-2)
    optimizer.build(model.trainable_variables)
    training.train_step(
        model, optimizer, heads.Head("binary", (0, 1), "int"), batch, global_batch_size
    )
    return [v.numpy() for v in model.weights + optimizer.variables if "float" in str(v.dtype)]


def test_weight_two_is_the_record_twice_in_the_gradient():
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7]], np.float32)
    y = np.array([1, 0], np.int32)
    weighted = one_step((tf.constant(x), tf.constant(y), tf.constant([2.0, 1.0])), 3)
    twice = one_step((tf.constant(x[[0, 0, 1]]), tf.constant(y[[0, 0, 1]]), tf.ones([3])), 3)
    unweighted = one_step((tf.constant(x), tf.constant(y), tf.ones([2])), 3)
    assert max_abs_diff(weighted, twice) <= 1e-6
    assert max_abs_diff(weighted, unweighted) > 1e-4  # the weight did something


@pytest.mark.parametrize(
    "head",
    [
        heads.Head("binary", (0, 1), "int"),
        heads.Head("multiclass", (0, 1, 2), "int"),
        heads.Head("regression", label_mean=3.0, label_std=2.0),
    ],
)
def test_weight_two_is_the_record_twice_in_every_metric(head):
    rng = np.random.default_rng(0)
    n = 50
    logits = rng.normal(0, 1, (n, head.units)).astype(np.float32)
    labels = (
        rng.uniform(0.5, 9, n).astype(np.float32)
        if head.task == "regression"
        else rng.integers(0, len(head.classes), n).astype(np.int32)
    )
    w = rng.integers(0, 3, n)  # 0, 1 or 2 copies
    rows = np.repeat(np.arange(n), w)
    weighted = metrics.finish(
        head,
        {
            k: v.numpy()
            for k, v in metrics.batch_sums(
                head, tf.constant(labels), tf.constant(logits), tf.constant(w, tf.float32)
            ).items()
        },
    )
    copies = metrics.finish(
        head,
        {
            k: v.numpy()
            for k, v in metrics.batch_sums(
                head, tf.constant(labels[rows]), tf.constant(logits[rows])
            ).items()
        },
    )
    assert weighted.pop("examples") == n and copies.pop("examples") == len(rows)
    assert weighted.keys() == copies.keys()
    for key in weighted:
        assert weighted[key] == pytest.approx(copies[key], rel=1e-5, abs=1e-6), key


def test_missing_weight_is_one_and_negative_is_named(store):
    uri = write(
        store,
        "gs://test-bucket/weights/a.tfrecord",
        [example(x=1.0, c="a", label=1, w=3.0), example(x=2.0, c="b", label=0)],
    )
    _, _, weights = next(
        iter(inputs.make_dataset([store.path(uri)], SCHEMA, batch_size=2, training=False))
    )
    assert weights.numpy().tolist() == [3.0, 1.0]
    bad = write(
        store, "gs://test-bucket/weights/bad.tfrecord", [example(x=1.0, c="a", label=1, w=-1.0)]
    )
    assert "weight 'w' has a negative value" in scan.find_bad_record(store, [bad], SCHEMA)


def test_weight_is_inferred_apart_and_is_no_model_input():
    records = [(f"r{i}", example(x=float(i), w=i % 3, label=i % 2)) for i in range(20)]
    schema = inference.infer(records, "label", "binary", weight="w")
    assert schema.weight == schema_lib.Weight("w", "int")
    assert [f.name for f in schema.features] == ["x"]
    again = schema_lib.from_json(schema.to_json(), "s.json", "label", "binary", "w")
    assert again.to_json() == schema.to_json() and again.weight == schema.weight
    with pytest.raises(schema_lib.SchemaError, match="weight 'wt' is not a feature"):
        inference.infer(records, "label", "binary", weight="wt")


def test_weighted_job_one_replica_equals_two(fake_gcs, job_uri, store, mirrored_two_cpus):
    """--weight=visits (Poisson counts, zeros included) under 1 and 2 replicas."""
    flags = dict(task="regression", batch_size=32, shard_by="record", weight="visits")
    one, result = train(
        fake_gcs, job_uri + "/one", tf.distribute.OneDeviceStrategy("/cpu:0"), **flags
    )
    two, _ = train(fake_gcs, job_uri + "/two", mirrored_two_cpus, **flags)
    assert max_abs_diff(one, two) <= 1e-5
    assert "visits" not in result.model.input  # no model input
    assert result.metrics["examples"] == 128  # records; the means are weighted
    signature = tf.saved_model.load(store.path(f"{job_uri}/one/model")).signatures["predict"]
    assert "visits" not in signature.structured_input_signature[1]
