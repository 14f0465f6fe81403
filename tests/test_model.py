"""Model and heads: a model per task from the schema, preprocessing inside, custom builders."""

import logging
import sys
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer.base import config as config_lib
from trainer.data import inference
from trainer.data import schema as schema_lib
from trainer.model import heads
from trainer.model import tabular as model_lib

from conftest import linear_model, make_config, run_job

SCHEMA = schema_lib.Schema(
    label=schema_lib.Label("label", "string", ("a", "b", "c")),
    features=(
        schema_lib.Feature("x", "float", "numeric", mean=10.0, std=2.0),
        schema_lib.Feature("v", "float", "numeric", size=3),
        schema_lib.Feature("n", "int", "categorical", vocabulary=(3, 7)),
        schema_lib.Feature("few", "string", "categorical", vocabulary=("p", "q")),
        schema_lib.Feature(
            "many", "string", "categorical", vocabulary=tuple(f"v{i}" for i in range(50))
        ),
    ),
)

BATCH = {
    "x": tf.constant([[10.0], [12.0]]),
    "v": tf.zeros([2, 3]),
    "n": tf.constant([[3], [99]], tf.int64),
    "few": tf.constant([["p"], [""]]),
    "many": tf.constant([["v1"], ["unseen"]]),
}


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


def test_robust_ple_against_its_closed_form():
    # Quantiles of a heavy tail, with a repeated value (one bin fewer).
    q = [0.0, 1.0, 1.0, 2.0, 4.0, 8.0, 100.0, 1000.0, 1e5]
    layer = model_lib.RobustPLE(q)
    x = np.array([[-5.0], [0.5], [3.0], [50.0], [2e5]], np.float32)
    got = layer(tf.constant(x)).numpy()
    median, iqr = 4.0, 100.0 - 1.0  # q[4]; q[6] - q[2] of 8 intervals
    z = (x[:, 0] - median) / iqr
    np.testing.assert_allclose(got[:, 0], z / np.sqrt(1 + (z / 3) ** 2), rtol=1e-6)
    edges = np.array(sorted(set(q)))
    bins = np.clip((x - edges[:-1]) / np.diff(edges), 0, 1)
    np.testing.assert_allclose(got[:, 1:], bins, rtol=1e-6, atol=1e-7)
    assert got.shape == (5, 1 + len(edges) - 1)
    assert np.all(np.abs(got[:, 0]) < 3)  # smoothly clipped: 2e5 does not blow up
    # A constant feature: its scaled value is 0 and it has no bins.
    np.testing.assert_array_equal(model_lib.RobustPLE([7.0] * 17)(tf.constant([[7.0]])), [[0]])


def test_inferred_quantiles_and_the_ple_model(fake_gcs, job_uri):
    rng = np.random.default_rng(0)
    values = rng.lognormal(0, 2, 1000)
    records = []
    for i, v in enumerate(values):
        example = tf.train.Example()
        example.features.feature["x"].float_list.value.append(v)
        example.features.feature["y"].int64_list.value.append(i % 2)
        records.append((f"record {i}", example.SerializeToString()))
    schema = inference.infer(records, "y", "binary")
    (x,) = schema.features
    np.testing.assert_allclose(
        x.quantiles, np.quantile(values.astype(np.float32), np.linspace(0, 1, 17)), rtol=1e-6
    )
    again = schema_lib.from_json(schema.to_json(), "s.json", "y", "binary")
    assert again.features[0].quantiles == x.quantiles  # schema.json keeps them
    config = make_config(fake_gcs, job_uri, model="ple_mlp", hidden_units=None)
    model = model_lib.build(schema, 1, config)
    assert [layer.units for layer in model.layers if layer.name.startswith("hidden_")] == [
        256,
        256,
        256,
    ]
    assert sum(isinstance(layer, model_lib.RobustPLEs) for layer in model.layers) == 1


def test_all_ple_features_in_one_layer_encode_as_each_in_its_own():
    """RobustPLEs is RobustPLE of each input, bit for bit: quantile bins, a feature's
    values as edges, a constant feature (no bins), an int64 input; in the inputs' order."""
    rng = np.random.default_rng(3)
    encodings = [
        (sorted(rng.lognormal(0, 2, 17).tolist()), []),
        ([0.0, 1, 1, 2, 4, 8, 100, 1000, 1e5], [0.0, 2.0, 5.0]),
        ([7.0] * 17, []),
        ([float(q) for q in range(0, 170, 10)], []),
    ]
    xs = [
        tf.constant(rng.lognormal(0, 3, (50, 1)), tf.float32),
        tf.constant(rng.choice([0.0, 2.0, 5.0, 9.0, -1.0], (50, 1)), tf.float32),
        tf.constant(rng.normal(7, 1, (50, 1)), tf.float32),
        tf.constant(rng.integers(-20, 200, (50, 1)), tf.int64),
    ]
    together = model_lib.RobustPLEs(encodings)(xs)
    assert len(together) == len(encodings)
    for (quantiles, values), x, got in zip(encodings, xs, together):
        np.testing.assert_array_equal(
            got.numpy(), model_lib.RobustPLE(quantiles, values)(x).numpy()
        )
    # One feature alone: still a list of one, called eagerly and inside a model.
    (alone,) = model_lib.RobustPLEs(encodings[:1])(xs[:1])
    np.testing.assert_array_equal(alone.numpy(), together[0].numpy())
    schema = schema_lib.Schema(
        label=schema_lib.Label("y", "float"),
        features=(schema_lib.Feature("x", "float", "numeric", quantiles=tuple(encodings[0][0])),),
    )
    inputs = model_lib.feature_inputs(schema)
    encoded = keras.Model(inputs, model_lib.preprocess(inputs, schema, numeric="ple"))
    np.testing.assert_array_equal(encoded({"x": xs[0]}).numpy(), together[0].numpy())


def test_a_job_on_small_data_logs_and_records_its_hidden_layers(fake_gcs, store, job_uri, caplog):
    """The tiny dataset has 512 records: ple_mlp gets 64,32, in the log and config.json
    (trees off: the job's model is then the neural one, whose layers are looked at)."""
    config = make_config(
        fake_gcs, job_uri, model="ple_mlp", hidden_units=None, train_steps=2, trees="off"
    )
    with caplog.at_level(logging.INFO):
        result = run_job(config)
    assert "64,32 (--model=ple_mlp on 512 training records, fewer than 3,000" in caplog.text
    assert [layer.units for layer in result.model.layers if layer.name.startswith("hidden_")] == [
        64,
        32,
    ]
    assert store.read_json(config.model_dir + "/config.json")["hidden_units"] == [64, 32]


def test_few_distinct_values_are_kept_and_any_function_of_them_can_be_fitted():
    """An id-like number (200 distinct values, 20 records each) on which the label
    depends keeps its values in the schema, and its encoding over them gives each value
    its own code: a linear layer can then fit any function of the id, which 16 quantile
    bins cannot (a tree splits on each value). The same number beside an unrelated label
    keeps quantiles only (which of the two it is: tests/test_exact_values.py)."""
    rng = np.random.default_rng(0)
    ids = rng.permutation(np.arange(4000) % 200).astype(float)
    favourite = rng.integers(0, 2, 200)  # each id mostly one class
    records, unrelated = [], []
    for i, (id_, x) in enumerate(zip(ids, rng.lognormal(0, 2, 4000))):
        example = tf.train.Example()
        example.features.feature["id"].int64_list.value.append(int(id_))
        example.features.feature["x"].float_list.value.append(x)
        example.features.feature["y"].int64_list.value.append(i % 2)
        unrelated.append((f"record {i}", example.SerializeToString()))
        example.features.feature["y"].int64_list.value[0] = int(
            favourite[int(id_)] if rng.uniform() < 0.8 else 1 - favourite[int(id_)]
        )
        records.append((f"record {i}", example.SerializeToString()))
    schema = inference.infer(records, "y", "binary")
    id_feature, x_feature = schema.features
    assert id_feature.values == tuple(float(v) for v in range(200))
    assert x_feature.values == ()  # 4,000 distinct values: quantiles only
    assert inference.infer(unrelated, "y", "binary").features[0].values == ()
    # In 1,000 records the ids are seen 5 times each on average, fewer than 10: too few
    # to learn a value each.
    assert inference.infer(records[:1000], "y", "binary").features[0].values == ()
    again = schema_lib.from_json(schema.to_json(), "s.json", "y", "binary")
    assert again.features[0].values == id_feature.values  # schema.json keeps them

    def fit_residual(layer):
        codes = layer(tf.constant(np.arange(200, dtype=np.float32)[:, None])).numpy()
        design = np.hstack([codes, np.ones((200, 1))])
        target = np.random.default_rng(1).normal(size=200)
        solution = np.linalg.lstsq(design, target, rcond=None)[0]
        return float(np.max(np.abs(design @ solution - target)))

    assert fit_residual(model_lib.RobustPLE(id_feature.quantiles, id_feature.values)) < 1e-3
    assert fit_residual(model_lib.RobustPLE(id_feature.quantiles)) > 0.5


@pytest.mark.parametrize("numeric", ["standard", "ple"])
def test_a_missing_number_is_marked_not_taken_for_its_mean(numeric):
    """A feature some records lack (`Feature.missing`) parses as NaN there; the model
    sees the mean and a 0/1 mark after every feature's encoding, so a record without it
    and one holding the mean differ only in the mark."""
    schema = schema_lib.Schema(
        label=schema_lib.Label("y", "float"),
        features=(
            schema_lib.Feature(
                "a",
                "float",
                "numeric",
                mean=2.0,
                std=2.0,
                quantiles=tuple(np.linspace(0.0, 4.0, 9)),
                missing=True,
            ),
            schema_lib.Feature("b", "float", "numeric", mean=0.0, std=1.0),
        ),
    )
    inputs = model_lib.feature_inputs(schema)
    encoded = keras.Model(inputs, model_lib.preprocess(inputs, schema, numeric))
    spec = schema.parse_spec(with_label=False)
    absent = tf.train.Example().SerializeToString()  # neither feature
    parsed = tf.io.parse_example(tf.constant([absent]), spec)
    assert np.isnan(parsed["a"].numpy()).all() and parsed["b"].numpy()[0, 0] == 0.0
    rows = encoded(
        {"a": tf.constant([[np.nan], [2.0], [3.0]]), "b": tf.constant([[0.5], [0.5], [0.5]])}
    ).numpy()
    assert np.isfinite(rows).all()
    np.testing.assert_array_equal(rows[:, -1], [1.0, 0.0, 0.0])  # the mark, last
    np.testing.assert_allclose(rows[0, :-1], rows[1, :-1], atol=1e-6)  # NaN: the mean
    assert np.abs(rows[2, :-1] - rows[1, :-1]).max() > 0.1


@pytest.mark.parametrize(
    "feature, said",
    [
        ({"dtype": "int"}, "this one is int numeric of size 1"),
        ({"dtype": "float", "size": 2}, "of size 2"),
        ({"dtype": "float", "varlen": True}, "(varlen)"),
        ({"dtype": "string", "vocabulary": ["a"]}, "this one is string categorical"),
    ],
)
def test_missing_on_a_feature_that_cannot_be_marked_is_named(feature, said):
    bad = {
        "label": {"name": "y", "dtype": "int", "classes": [0, 1]},
        "features": [{"name": "x", "missing": True, **feature}],
    }
    with pytest.raises(schema_lib.SchemaError, match="feature 'x': missing is for float") as e:
        schema_lib.from_json(bad, "s.json", "y", "binary")
    assert said in str(e.value)


@pytest.mark.parametrize("key", ["quantiles", "values"])
def test_bad_quantiles_or_values_in_a_schema_file_are_named(key):
    bad = {
        "label": {"name": "y", "dtype": "int", "classes": [0, 1]},
        "features": [{"name": "x", "dtype": "float", key: [3, 1]}],
    }
    with pytest.raises(schema_lib.SchemaError, match=f"feature 'x': {key}"):
        schema_lib.from_json(bad, "s.json", "y", "binary")


@pytest.mark.parametrize("shape, said", [({"size": 3}, "size 3"), ({"varlen": True}, "variable")])
def test_quantiles_of_a_feature_of_many_values_are_named(shape, said):
    bad = {
        "label": {"name": "y", "dtype": "int", "classes": [0, 1]},
        "features": [{"name": "x", "dtype": "float", "quantiles": [1, 2, 3], **shape}],
    }
    with pytest.raises(
        schema_lib.SchemaError,
        match=f"schema s.json: feature 'x': quantiles for a feature of {said}",
    ):
        schema_lib.from_json(bad, "s.json", "y", "binary")


def test_values_without_quantiles_in_a_schema_file_are_named():
    bad = {
        "label": {"name": "y", "dtype": "int", "classes": [0, 1]},
        "features": [{"name": "x", "dtype": "float", "values": [1, 2, 3]}],
    }
    with pytest.raises(
        schema_lib.SchemaError, match="schema s.json: feature 'x': values without quantiles"
    ):
        schema_lib.from_json(bad, "s.json", "y", "binary")


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


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("no_such_module:f", "--model_fn='no_such_module:f': cannot load it"),
        (
            "trainer.model.tabular:no_such_fn",
            "--model_fn='trainer.model.tabular:no_such_fn': cannot load it",
        ),
        ("trainer.model.tabular:ONE_HOT_MAX", "is not a function"),
    ],
)
def test_bad_model_fn_is_named(spec, fragment):
    with pytest.raises(model_lib.ModelFnError) as e:
        model_lib.load_model_fn(spec)
    assert fragment in str(e.value)


def test_model_with_wrong_outputs_is_rejected(fake_gcs, job_uri, monkeypatch):
    module = types.ModuleType("bad_models")

    def wide(schema, num_outputs, config):
        inputs = model_lib.feature_inputs(schema)
        return keras.Model(
            inputs, keras.layers.Dense(num_outputs + 1)(model_lib.preprocess(inputs, schema))
        )

    module.wide = wide
    monkeypatch.setitem(sys.modules, "bad_models", module)
    with pytest.raises(model_lib.ModelFnError, match=r"expected \(batch, 1\) logits"):
        model_lib.build(SCHEMA, 1, make_config(fake_gcs, job_uri, model_fn="bad_models:wide"))


def test_feature_names_keras_would_refuse_still_build_and_serve():
    schema = schema_lib.Schema(
        label=schema_lib.Label("label", "int", (0, 1)),
        features=(
            schema_lib.Feature("od280/od315 of wine", "float", "numeric"),
            schema_lib.Feature("kind/of", "string", "categorical", vocabulary=("a",)),
        ),
    )
    config = config_lib.make_config(
        env={}, train_data="x", label="label", task="binary", job_dir="/tmp/unused"
    )
    model = model_lib.build(schema, 1, config)
    out = model({"od280/od315 of wine": tf.constant([[1.0]]), "kind/of": tf.constant([["a"]])})
    assert out.shape == (1, 1)
