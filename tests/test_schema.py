"""Schema: inference from records, the JSON format, and errors that name the culprit."""

import math

import numpy as np
import pytest
import tensorflow as tf

from trainer.data import inference
from trainer.data import schema as schema_lib
from trainer.sample_data import _feature


def example(**features) -> bytes:
    """A serialized Example; a value [] is an empty float_list (a list with no values)."""
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                k: (
                    tf.train.Feature(float_list=tf.train.FloatList())
                    if v == []
                    else _feature(v if isinstance(v, list) else [v])
                )
                for k, v in features.items()
            }
        )
    ).SerializeToString()


def records(*examples):
    return [(f"f.tfrecord record {i}", e) for i, e in enumerate(examples)]


def test_infers_types_statistics_and_vocabulary():
    schema = inference.infer(
        records(
            example(x=1.0, n=2, v=[1.0, 2.0], c="a", label=1),
            example(x=3.0, n=4, v=[3.0, 4.0], c="b", label=0),
            example(n=6, v=[5.0, 6.0], c="a", label=1),  # x missing
        ),
        label="label",
        task="binary",
    )
    f = {feat.name: feat for feat in schema.features}
    assert (f["x"].dtype, f["x"].kind, f["x"].size) == ("float", "numeric", 1)
    assert f["x"].mean == pytest.approx(2.0) and f["x"].std == pytest.approx(1.0)
    # x is missing in a record: it parses as NaN, which the model marks as missing; n is
    # in every record: a record without it gets the mean.
    assert f["x"].missing and math.isnan(f["x"].default_value())
    written = {d["name"]: d for d in schema.to_json()["features"]}
    assert written["x"]["missing"] and "default" not in written["x"]
    again = schema_lib.from_json(schema.to_json(), "s", "label", "binary")
    assert again.to_json() == schema.to_json()
    assert math.isnan({g.name: g for g in again.features}["x"].default_value())
    assert (f["n"].dtype, f["n"].default_value(), f["n"].missing) == ("int", 4, False)
    assert f["v"].size == 2 and f["v"].mean == pytest.approx(3.5)
    assert f["c"].kind == "categorical" and f["c"].vocabulary == ("a", "b")  # by frequency
    assert f["c"].default_value() == schema_lib.MISSING
    assert schema.label == schema_lib.Label("label", "int", (0, 1))


def test_string_classes_for_multiclass():
    schema = inference.infer(
        records(
            example(x=1.0, label="hi"), example(x=2.0, label="lo"), example(x=3.0, label="mid")
        ),
        "label",
        "multiclass",
    )
    assert schema.label.classes == ("hi", "lo", "mid")


def test_json_round_trip():
    schema = inference.infer(
        records(example(x=1.5, c="a", label=2.5), example(x=0.5, c="b", label=1.0)),
        "label",
        "regression",
    )
    again = schema_lib.from_json(schema.to_json(), "s.json", "label", "regression")
    assert again.to_json() == schema.to_json()
    spec = again.parse_spec(with_label=True)
    assert spec["x"].default_value == [pytest.approx(1.0)] and "label" in spec


@pytest.mark.parametrize(
    "examples, label, task, fragment",
    [
        (
            [example(x=1.0, label=1), example(x="s", label=0)],
            "label",
            "binary",
            "f.tfrecord record 1: feature 'x' is a bytes_list, earlier records have a float_list",
        ),
        ([example(x=float("nan"), label=1)], "label", "binary", "feature 'x' has a non-finite"),
        ([example(x=1.0, y=1)], "label", "binary", "label 'label' is not a feature"),
        (
            [example(x=1.0, label=i) for i in range(3)],
            "label",
            "binary",
            "--task=binary needs exactly 2 classes, found 3",
        ),
        (
            [example(x=1.0, label=0.5), example(x=1.0, label=1.5)],
            "label",
            "binary",
            "label 'label' holds floats",
        ),
        (
            [example(x=1.0, label="a"), example(x=1.0, label="b")],
            "label",
            "regression",
            "--task=regression needs numbers",
        ),
        ([example(label=1), example(label=0)], "label", "binary", "no features besides the label"),
    ],
)
def test_inference_errors_name_record_and_feature(examples, label, task, fragment):
    with pytest.raises(schema_lib.SchemaError) as e:
        inference.infer(records(*examples), label, task)
    assert fragment in str(e.value)


def test_garbage_record_is_named():
    with pytest.raises(schema_lib.SchemaError, match="f.tfrecord record 0: not a serialized"):
        inference.infer([("f.tfrecord record 0", b"\xff\xff garbage")], "label", "binary")


BINARY = {"name": "label", "dtype": "int", "classes": [0, 1]}


@pytest.mark.parametrize(
    "obj, fragment",
    [
        ([], 'expected an object with "label" and a "features" list'),
        ({"label": {"name": "other"}, "features": []}, "label is 'other' but --label='label'"),
        (
            {"label": BINARY, "features": [{"name": "x", "dtype": "double"}]},
            "feature 'x': dtype 'double'",
        ),
        (
            {"label": BINARY, "features": [{"name": "c", "dtype": "string"}]},
            "feature 'c': categorical features need a non-empty vocabulary",
        ),
        (
            {"label": BINARY, "features": [{"name": "x", "dtype": "float", "size": 0}]},
            "feature 'x': size 0",
        ),
        (
            {"label": BINARY, "features": [{"name": "label", "dtype": "float"}]},
            "label 'label' is also listed as a feature",
        ),
        (
            {
                "label": {"name": "label", "dtype": "int", "classes": [0, 1, 2]},
                "features": [{"name": "x", "dtype": "float"}],
            },
            "--task=binary needs exactly 2 classes",
        ),
    ],
)
def test_bad_schema_file_is_named(obj, fragment):
    with pytest.raises(schema_lib.SchemaError) as e:
        schema_lib.from_json(obj, "gs://b/schema.json", "label", "binary")
    assert str(e.value).startswith("schema gs://b/schema.json: ") and fragment in str(e.value)


def test_variable_length_features_are_inferred():
    """Lists whose length varies (an empty one meaning missing) become variable-length
    features, kept up to the longest sampled list."""
    schema = inference.infer(
        records(
            example(tags=["a", "b"], readings=[1.0, 2.0, 3.0], n=[1, 2], label=1),
            example(tags=["b"], readings=[5.0], n=[3, 4], label=0),
            example(tags=[], readings=[], label=1),
        ),
        "label",
        "binary",
    )
    f = {feat.name: feat for feat in schema.features}
    assert (f["tags"].varlen, f["tags"].size, f["tags"].kind) == (True, 2, "categorical")
    assert f["tags"].vocabulary == ("b", "a")
    assert (f["readings"].varlen, f["readings"].size) == (True, 3)
    assert f["readings"].mean == pytest.approx(11 / 4)  # over values, not records
    assert not f["n"].varlen and f["n"].size == 2  # fixed length, missing once
    spec = schema.parse_spec(with_label=False)
    assert isinstance(spec["tags"], tf.io.RaggedFeature)
    written = schema.to_json()
    tags = next(d for d in written["features"] if d["name"] == "tags")
    assert tags["varlen"] is True and "default" not in tags
    again = schema_lib.from_json(written, "s.json", "label", "binary")
    assert again.to_json() == written


@pytest.mark.parametrize("task,name", [("regression", None), ("multiclass", "abc")])
def test_the_label_decides_which_numbers_keep_their_values(task, name):
    """An id the label depends on keeps its values whatever the label's type (numbers,
    string classes); a record without a label takes no part."""
    rng = np.random.default_rng(0)
    level = rng.integers(0, 3, 100)
    examples = []
    for i in range(2000):
        id_ = i % 100
        label = float(level[id_]) + rng.normal(scale=0.3) if name is None else name[level[id_]]
        examples.append(example(id=id_, noise=int(rng.integers(0, 100)), y=label))
    examples.append(example(id=5, noise=5))  # no label
    f = {feat.name: feat for feat in inference.infer(records(*examples), "y", task).features}
    assert f["id"].values == tuple(float(v) for v in range(100))
    assert f["noise"].values == ()
