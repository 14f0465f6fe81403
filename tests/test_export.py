"""Export: the SavedModel serves, in a fresh process with only TensorFlow, what the
in-memory model predicts (max abs difference <= 1e-5), through both signatures."""

import json

import numpy as np
import pytest
import tensorflow as tf

from trainer.data import inputs
from trainer.serving import export

from conftest import data_globs, make_config, predict_in_subprocess, read_records, run_job


@pytest.mark.parametrize("task", ["regression", "binary", "multiclass"])
def test_reloaded_model_predicts_like_the_trained_one(fake_gcs, job_uri, store, task):
    config = make_config(fake_gcs, job_uri, task=task)
    result = run_job(config)
    records = read_records(store, data_globs(task)[1], 16)
    expected = result.head.outputs(
        result.model(inputs.parse_features(tf.constant(records), result.schema), training=False)
    )

    served = predict_in_subprocess(store.path(config.model_dir), records)

    if task == "regression":
        assert set(served) == {"predictions"}
        np.testing.assert_allclose(served["predictions"], expected["predictions"], atol=1e-5)
    else:
        assert set(served) == {"predictions", "probabilities"}
        np.testing.assert_allclose(served["probabilities"], expected["probabilities"], atol=1e-5)
        classes = [
            c.decode() if isinstance(c, bytes) else c
            for c in expected["predictions"].numpy().tolist()
        ]
        assert served["predictions"] == classes
        assert set(classes) <= set(result.schema.label.classes)


def test_predict_signature_takes_raw_named_features(fake_gcs, job_uri, store):
    config = make_config(fake_gcs, job_uri, task="multiclass")
    result = run_job(config)
    loaded = tf.saved_model.load(store.path(config.model_dir))
    records = read_records(store, data_globs("multiclass")[1], 32)
    from_examples = loaded.signatures["serving_default"](examples=tf.constant(records))
    parsed = inputs.parse_features(tf.constant(records), result.schema)
    # Records lacking a feature the schema marks missing: NaN in, finite answers out.
    marked = [f.name for f in result.schema.features if f.missing]
    assert marked and any(np.isnan(parsed[name].numpy()).any() for name in marked)
    # Instances of an online prediction request: scalars as [batch], vectors [batch, n].
    instances = {name: tf.squeeze(t, 1) if t.shape[1] == 1 else t for name, t in parsed.items()}
    from_features = loaded.signatures["predict"](**instances)
    np.testing.assert_allclose(
        from_features["probabilities"], from_examples["probabilities"], atol=1e-6
    )
    assert np.isfinite(from_features["probabilities"].numpy()).all()
    assert set(loaded.signatures["predict"].structured_input_signature[1]) == {
        f.name for f in result.schema.features
    }


def test_the_model_s_graph_is_held_once(fake_gcs, job_uri, store):
    """Both signatures call one traced function of the model: its matrix products are in
    one function of the SavedModel's library, not one copy per signature (deliveries'
    saved_model.pb: 0.82 MB against 1.53 MB with a copy each)."""
    from tensorflow.core.protobuf import saved_model_pb2

    config = make_config(fake_gcs, job_uri, task="binary", train_steps=2)
    run_job(config)
    saved = saved_model_pb2.SavedModel()
    with open(store.path(config.model_dir + "/saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    products = {"MatMul", "BatchMatMulV2", "_FusedMatMul"}
    holding = [
        function.signature.name
        for graph in saved.meta_graphs
        for function in graph.graph_def.library.function
        if any(node.op in products for node in function.node_def)
    ]
    assert len(holding) == 1, holding


def test_model_dir_holds_a_complete_export_only(fake_gcs, job_uri, store):
    config = make_config(fake_gcs, job_uri, task="binary")
    result = run_job(config)
    assert {"saved_model.pb", "variables", "schema.json", "config.json", "metrics.json"} <= set(
        store.listdir(config.model_dir)
    )
    assert store.read_json(config.model_dir + "/metrics.json") == json.loads(
        json.dumps(result.metrics)
    )
    assert store.read_json(config.model_dir + "/schema.json") == result.schema.to_json()
    assert store.read_json(config.model_dir + "/config.json")["train_data"] == config.train_data
    siblings = store.listdir(job_uri)
    assert not [s for s in siblings if ".partial-" in s or ".old-" in s], siblings


def test_feature_signature_shapes(fake_gcs, job_uri):
    result = run_job(make_config(fake_gcs, job_uri, train_steps=1), tf.distribute.get_strategy())
    sig = export.feature_signature(result.schema)
    assert sig["scores"].shape.as_list() == [None, 3] and sig["age"].shape.as_list() == [None]
    assert sig["city"].dtype == tf.string and sig["visits"].dtype == tf.int64
