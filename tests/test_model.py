"""Model and heads: a model per task from the schema, preprocessing inside, custom builders."""

import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import linear_model, make_config
from trainer import config as config_lib
from trainer import heads
from trainer import model as model_lib
from trainer import schema as schema_lib

SCHEMA = schema_lib.Schema(
    label=schema_lib.Label("label", "string", ("a", "b", "c")),
    features=(
        schema_lib.Feature("x", "float", "numeric", mean=10.0, std=2.0),
        schema_lib.Feature("v", "float", "numeric", size=3),
        schema_lib.Feature("n", "int", "categorical", vocabulary=(3, 7)),
        schema_lib.Feature("few", "string", "categorical", vocabulary=("p", "q")),
        schema_lib.Feature("many", "string", "categorical",
                           vocabulary=tuple(f"v{i}" for i in range(50)))))

BATCH = {"x": tf.constant([[10.0], [12.0]]), "v": tf.zeros([2, 3]),
         "n": tf.constant([[3], [99]], tf.int64), "few": tf.constant([["p"], [""]]),
         "many": tf.constant([["v1"], ["unseen"]])}


@pytest.mark.parametrize("task, units", [("regression", 1), ("binary", 1), ("multiclass", 3)])
def test_builds_logits_for_each_task(fake_gcs, job_uri, task, units):
    config = make_config(fake_gcs, job_uri, task=task)
    model = model_lib.build(SCHEMA, heads.Head(task, ("a", "b", "c")).units, config)
    logits = model(BATCH)
    assert logits.shape == (2, units)
    assert np.all(np.isfinite(logits.numpy()))  # unseen and missing values are fine


def test_preprocessing_normalises_and_encodes():
    inputs = model_lib.feature_inputs(SCHEMA)
    features = keras.Model(inputs, model_lib.preprocess(inputs, SCHEMA))(BATCH).numpy()
    # x: (10-10)/2 = 0 and (12-10)/2 = 1; then v (3 values); then n one-hot over
    # [unseen, missing(-1), 3, 7]: 3 -> slot 2, 99 -> unseen slot 0.
    np.testing.assert_allclose(features[:, 0], [0.0, 1.0], atol=1e-6)
    np.testing.assert_array_equal(features[:, 4:8], [[0, 0, 1, 0], [1, 0, 0, 0]])
    # few: [unseen, missing, p, q]: 'p' -> 2, '' (missing) -> 1: missing is not unseen.
    np.testing.assert_array_equal(features[:, 8:12], [[0, 0, 1, 0], [0, 1, 0, 0]])
    assert features.shape[1] > 12  # 'many' is embedded


def test_head_outputs_classes_as_in_the_data():
    head = heads.Head("multiclass", ("a", "b", "c"), "string")
    out = head.outputs(tf.constant([[0.0, 5.0, 1.0], [9.0, 0.0, 0.0]]))
    assert out["predictions"].numpy().tolist() == [b"b", b"a"]
    np.testing.assert_allclose(tf.reduce_sum(out["probabilities"], 1), [1, 1], rtol=1e-6)
    binary = heads.Head("binary", (0, 1), "int").outputs(tf.constant([[2.0], [-2.0]]))
    assert binary["predictions"].numpy().tolist() == [1, 0]
    assert binary["probabilities"].shape == (2, 2)


def test_custom_model_fn_is_loaded_by_name(fake_gcs, job_uri, monkeypatch):
    module = types.ModuleType("my_models")
    module.linear = linear_model
    monkeypatch.setitem(sys.modules, "my_models", module)
    config = make_config(fake_gcs, job_uri, model_fn="my_models:linear")
    model = model_lib.build(SCHEMA, 1, config)
    assert len(model.trainable_variables) == 3  # the 'many' embedding, Dense kernel and bias
    assert model(BATCH).shape == (2, 1)


@pytest.mark.parametrize("spec, fragment", [
    ("no_such_module:f", "--model_fn='no_such_module:f': cannot load it"),
    ("trainer.model:no_such_fn", "--model_fn='trainer.model:no_such_fn': cannot load it"),
    ("trainer.model:ONE_HOT_MAX", "is not a function"),
])
def test_bad_model_fn_is_named(spec, fragment):
    with pytest.raises(model_lib.ModelFnError) as e:
        model_lib.load_model_fn(spec)
    assert fragment in str(e.value)


def test_model_with_wrong_outputs_is_rejected(fake_gcs, job_uri, monkeypatch):
    module = types.ModuleType("bad_models")

    def wide(schema, num_outputs, config):
        inputs = model_lib.feature_inputs(schema)
        return keras.Model(inputs, keras.layers.Dense(num_outputs + 1)(
            model_lib.preprocess(inputs, schema)))

    module.wide = wide
    monkeypatch.setitem(sys.modules, "bad_models", module)
    with pytest.raises(model_lib.ModelFnError, match=r"expected \(batch, 1\) logits"):
        model_lib.build(SCHEMA, 1, make_config(fake_gcs, job_uri, model_fn="bad_models:wide"))


def test_feature_names_keras_would_refuse_still_build_and_serve():
    schema = schema_lib.Schema(
        label=schema_lib.Label("label", "int", (0, 1)),
        features=(schema_lib.Feature("od280/od315 of wine", "float", "numeric"),
                  schema_lib.Feature("kind/of", "string", "categorical", vocabulary=("a",))))
    config = config_lib.make_config(env={}, train_data="x", label="label", task="binary",
                                    job_dir="/tmp/unused")
    model = model_lib.build(schema, 1, config)
    out = model({"od280/od315 of wine": tf.constant([[1.0]]), "kind/of": tf.constant([["a"]])})
    assert out.shape == (1, 1)
