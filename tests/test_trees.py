"""LightGBM's trees as TensorFlow ops (trainer.model.trees) give LightGBM's own scores.
Tolerances are maximum absolute differences."""

import lightgbm
import numpy as np
import pytest
import tensorflow as tf

from trainer.data import schema as schema_lib
from trainer.model import trees


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.column_stack(
        [
            rng.normal(size=n),
            rng.integers(0, 12, n).astype(float),  # categorical slots
            np.round(rng.exponential(size=n), 1),  # ties at the thresholds' sides
            rng.normal(size=n),
        ]
    )
    x[rng.random(n) < 0.1, 3] = np.nan  # missing values go their learnt way
    signal = x[:, 0] + np.isin(x[:, 1], [2, 5, 7]) - 0.5 * x[:, 2] + np.nan_to_num(x[:, 3])
    return x, signal


@pytest.mark.parametrize("objective", ["regression", "binary", "multiclass"])
def test_forest_scores_equal_lightgbm_raw_scores(objective):
    x, signal = _data(3000)
    y = {
        "regression": signal,
        "binary": (signal > 0.3).astype(int),
        "multiclass": np.digitize(signal, [-0.5, 0.5, 1.5]),
    }[objective]
    params = {"objective": objective, "verbose": -1, "num_leaves": 15, "min_data_per_group": 5}
    if objective == "multiclass":
        params["num_class"] = 4
    _assert_forest_is_booster(
        lightgbm.train(params, lightgbm.Dataset(x, y, categorical_feature=[1]), num_boost_round=40),
        categorical=True,
    )


@pytest.mark.parametrize("nan_in_training", [False, True])
def test_forests_without_categories_take_their_shorter_path_to_the_same_scores(nan_in_training):
    """Without categorical splits, and (first) without a missing value in training, the
    forest skips those fields; NaN at prediction then counts as 0, as in LightGBM."""
    x, signal = _data(3000)
    if not nan_in_training:
        x[:, 3] = np.nan_to_num(x[:, 3])
    booster = lightgbm.train(
        {"objective": "regression", "verbose": -1, "num_leaves": 15},
        lightgbm.Dataset(x, signal, categorical_feature=[]),
        num_boost_round=40,
    )
    arrays = _assert_forest_is_booster(booster, categorical=False)
    assert np.any(arrays.missing != 0) == nan_in_training


def test_zero_as_missing_is_read_from_the_model_text_and_walked_as_lightgbm_does():
    """LightGBM's third missing type (zero_as_missing: 0 and NaN go the learnt way)."""
    x, signal = _data(3000)
    x[::7, 2] = 0.0
    booster = lightgbm.train(
        {"objective": "regression", "verbose": -1, "num_leaves": 15, "zero_as_missing": True},
        lightgbm.Dataset(x, signal, categorical_feature=[1]),
        num_boost_round=40,
    )
    arrays = _assert_forest_is_booster(booster, categorical=True)
    assert np.any(arrays.missing == 1)


def _assert_forest_is_booster(booster, categorical: bool) -> trees.Arrays:
    arrays = trees.from_lightgbm(booster.model_to_string())
    assert arrays.categorical.any() == categorical and arrays.depth > 2
    test, _ = _data(500, seed=1)
    test[0, 1] = 40  # a slot never seen in training
    test[1, :] = np.nan  # every feature missing
    expected = booster.predict(test, raw_score=True).reshape(len(test), -1)
    # LightGBM's predict (the job's) and the plain ops (the export's): the same scores,
    # on a batch and on one record.
    for forest in (trees.Forest(arrays, booster), trees.Forest(arrays)):
        got = forest(tf.constant(test)).numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-9)
        np.testing.assert_allclose(forest(tf.constant(test[2:3])).numpy(), expected[2:3], atol=1e-9)
    return arrays


def test_the_job_s_forest_asks_lightgbm_in_its_graph_and_the_export_s_walks_ops():
    """Inside a traced function (the job's evaluation) the forest with its booster is one
    call to LightGBM, of any batch size, the empty one too; `portable` (the export) traces
    the walk as ops instead, and leaves the booster in place after."""
    x, signal = _data(300)
    booster = lightgbm.train(
        {"objective": "multiclass", "num_class": 3, "verbose": -1, "num_leaves": 15},
        lightgbm.Dataset(x, np.digitize(signal, np.quantile(signal, [1 / 3, 2 / 3]))),
        num_boost_round=10,
    )
    forest = trees.Forest(trees.from_lightgbm(booster.model_to_string()), booster)
    expected = booster.predict(x, raw_score=True)
    model = tf.function(forest, input_signature=[tf.TensorSpec([None, x.shape[1]], tf.float64)])
    for n in (0, 1, 300):
        got = model(tf.constant(x[:n])).numpy()
        assert got.shape == (n, 3)
        np.testing.assert_allclose(got, expected[:n], atol=1e-9)

    def op_types(function) -> set[str]:
        graph = function.get_concrete_function().graph
        return {op.type for op in graph.get_operations()}

    python_calls = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
    assert python_calls & op_types(model)
    with trees.portable(forest):
        walk = tf.function(
            lambda x: forest(x), input_signature=[tf.TensorSpec([None, x.shape[1]], tf.float64)]
        )
        assert not python_calls & op_types(walk)
        np.testing.assert_allclose(walk(tf.constant(x)).numpy(), expected, atol=1e-9)
    assert forest.native


def test_a_forest_of_single_leaves_is_its_constant():
    x, signal = _data(50)
    booster = lightgbm.train(
        {"objective": "regression", "verbose": -1, "min_data_in_leaf": 100},
        lightgbm.Dataset(x, signal),
        num_boost_round=3,
    )
    arrays = trees.from_lightgbm(booster.model_to_string())
    for forest in (trees.Forest(arrays, booster), trees.Forest(arrays)):
        got = forest(tf.constant(x)).numpy()
        np.testing.assert_allclose(got[:, 0], booster.predict(x, raw_score=True), atol=1e-9)


def test_columns_are_values_and_the_model_s_vocabulary_slots():
    schema = schema_lib.Schema(
        label=schema_lib.Label("y", "float"),
        features=(
            schema_lib.Feature("x", "float", "numeric"),
            schema_lib.Feature("c", "string", "categorical", vocabulary=("p", "q")),
            schema_lib.Feature("v", "float", "numeric", size=2),
            schema_lib.Feature("bag", "string", "categorical", vocabulary=("a",), varlen=True),
        ),
    )
    assert trees.column_names(schema) == ["x", "c", "v[0]", "v[1]"]
    assert trees.categorical_columns(schema) == [1]
    features = {
        "x": tf.constant([[1.5], [2.0]]),
        "c": tf.constant([["q"], ["zzz"]]),
        "v": tf.constant([[1.0, 2.0], [3.0, 4.0]]),
        "bag": tf.constant([["a"], [""]]),
    }
    got = trees.Columns(schema)(features).numpy()
    # c: slot 0 unseen, 1 missing (''), 2 'p', 3 'q'.
    np.testing.assert_array_equal(got, [[1.5, 3, 1, 2], [2, 0, 3, 4]])
    # A missing number (NaN) is below every value, in every column of a feature.
    x = tf.constant([[np.nan], [-1000.0]])
    v = tf.constant([[np.nan, 2.0], [3.0, np.nan]])
    got = trees.Columns(schema)(dict(features, x=x, v=v)).numpy()
    np.testing.assert_array_equal(got[:, 0], [trees.MISSING, -1000])
    np.testing.assert_array_equal(got[:, 2:], [[trees.MISSING, 2], [3, trees.MISSING]])
