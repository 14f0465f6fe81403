"""scripts/predict.py: Vertex request bodies built from examples, answered offline the way
TF Serving's REST API decodes them, for every task and both signatures."""

from __future__ import annotations

import json
import subprocess
import types

import numpy as np
import pytest
import tensorflow as tf

from trainer.serving import bodies, client

from conftest import TASKS, data_globs, read_records, run_python

# What trainer.predict is made of: its client of an export and the server's decoder.
predict = types.SimpleNamespace(
    vertex_body=client.vertex_body,
    raw_body=client.raw_body,
    send=client.send,
    answer=bodies.answer,
    BodyError=bodies.BodyError,
)


def records_with_a_missing_feature(store, task: str) -> list[bytes]:
    """Eval records; the sample data leaves some `income` and `color` values out."""
    records = read_records(store, data_globs(task)[1], 40)
    missing = [
        r for r in records if "income" not in tf.train.Example.FromString(r).features.feature
    ]
    assert missing  # the raw body must fill them from schema.json
    return records[:6] + missing[:2]


def assert_same_predictions(a: dict, b: dict) -> None:
    assert len(a["predictions"]) == len(b["predictions"])
    for x, y in zip(a["predictions"], b["predictions"]):
        if isinstance(x, dict):
            assert x["predictions"] == y["predictions"]  # the class, as in the data
            np.testing.assert_allclose(x["probabilities"], y["probabilities"], atol=1e-6)
        else:
            np.testing.assert_allclose(x, y, atol=1e-6)


@pytest.mark.parametrize("task", TASKS)
def test_vertex_and_raw_bodies_get_the_same_answer(store, exported, task):
    model = tf.saved_model.load(exported[task])
    records = records_with_a_missing_feature(store, task)
    vertex = predict.vertex_body(records)
    raw = predict.raw_body(records, exported[task], model)
    assert raw["signature_name"] == "predict" and "signature_name" not in vertex
    assert set(vertex["instances"][0]) == {"b64"}
    assert isinstance(raw["instances"][0]["age"], float)  # scalars as scalars
    assert len(raw["instances"][0]["scores"]) == 3  # vectors as lists
    # Through JSON, as they would travel.
    vertex_answer = predict.answer(json.loads(json.dumps(vertex)), model)
    raw_answer = predict.answer(json.loads(json.dumps(raw)), model)
    assert_same_predictions(vertex_answer, raw_answer)
    direct = model.signatures["serving_default"](examples=tf.constant(records))
    expected = direct["predictions"].numpy().tolist()[0]
    expected = expected.decode() if isinstance(expected, bytes) else expected
    first = vertex_answer["predictions"][0]
    if task == "regression":
        assert first == pytest.approx(expected, abs=1e-6)
    else:
        assert first["predictions"] == expected


def test_columnar_inputs_and_bare_b64_instances(store, exported):
    model = tf.saved_model.load(exported["binary"])
    records = read_records(store, data_globs("binary")[1], 3)
    rows = predict.answer(predict.vertex_body(records), model)
    columnar = predict.answer(
        {"inputs": {"examples": [i for i in predict.vertex_body(records)["instances"]]}}, model
    )
    named = predict.answer(
        {"instances": [{"examples": i} for i in predict.vertex_body(records)["instances"]]}, model
    )
    assert_same_predictions(rows, columnar)
    assert_same_predictions(rows, named)


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"signature_name": "explain", "instances": [1]}, "signature_name 'explain' is not"),
        ({"instances": []}, '"instances" must be a non-empty list'),
        ({"rows": []}, 'neither "instances" nor "inputs"'),
        ({"signature_name": "predict", "instances": [{"age": 1.0}]}, "the body is missing"),
        ({"instances": [{"b64": "AA==", "x": 1}]}, 'must be {"b64": ...}'),
    ],
)
def test_bodies_tf_serving_would_reject_are_named(exported, body, fragment):
    model = tf.saved_model.load(exported["binary"])
    with pytest.raises(predict.BodyError, match=fragment):
        predict.answer(body, model)


def run_script(*args: str) -> subprocess.CompletedProcess:
    return run_python("scripts/predict.py", *args, PYTHONPATH="")


def test_command_line_round_trip_prints_no_start_up_noise(store, exported, tmp_path):
    examples = store.path(data_globs("multiclass")[1])
    answers = []
    for request in ("vertex", "raw"):
        made = run_script(
            f"--model_dir={exported['multiclass']}",
            f"--examples={examples}",
            "--num=4",
            f"--request={request}",
        )
        assert made.returncode == 0, made.stderr[-2000:]
        assert made.stderr == ""  # TensorFlow's C++ start-up lines are not shown
        body = tmp_path / f"{request}.json"
        body.write_text(made.stdout)
        answered = run_script(f"--model_dir={exported['multiclass']}", f"--body={body}")
        assert answered.returncode == 0, answered.stderr[-2000:]
        answers.append(json.loads(answered.stdout))
    assert_same_predictions(*answers)
    shown = run_script(
        f"--model_dir={exported['multiclass']}", f"--examples={examples}", "--label=label"
    )
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr[-2000:]
    assert "example 4: prediction=" in shown.stdout and "true=" in shown.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"instances": []}')
    failed = run_script(f"--model_dir={exported['multiclass']}", f"--body={bad}")
    assert failed.returncode == 2
    assert failed.stderr.strip() == 'error: "instances" must be a non-empty list'
