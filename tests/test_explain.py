"""Per-prediction attributions (scripts/predict.py --explain, trainer.serving.explain)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from trainer.serving import explain

from conftest import linear_model, make_config, read_records, run_job, run_python


def run_predict(*args: str) -> subprocess.CompletedProcess:
    return run_python("scripts/predict.py", *args)


@pytest.mark.parametrize("task", ["regression", "binary", "multiclass"])
def test_contributions_add_up_to_the_prediction_minus_the_baseline(exported, fake_gcs, task):
    proc = run_predict(
        f"--model_dir={exported[task]}",
        "--explain",
        "--num=3",
        f"--examples={fake_gcs}/test-bucket/{task}/eval-*",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 3
    model = tf.saved_model.load(exported[task])
    features = set(model.signatures["predict"].structured_input_signature[1])
    for line in lines:
        assert set(line["contributions"]) == features
        # Additivity holds in every feature order; what is left is float rounding of
        # the model's float32 outputs: within 1e-5.
        assert sum(line["contributions"].values()) == pytest.approx(
            line["prediction"] - line["baseline_prediction"], abs=1e-5
        )
    # The printed prediction is the model's own (its positive class, or predicted one).
    records = read_records_local(fake_gcs, task, 3)
    out = model.signatures["serving_default"](examples=tf.constant(records))
    for line, i in zip(lines, range(3)):
        if task == "regression":
            want = float(out["predictions"][i])
        elif task == "binary":
            want = float(out["probabilities"][i][1])
        else:
            want = float(np.max(out["probabilities"][i]))
        assert line["prediction"] == pytest.approx(want, abs=1e-5)


def read_records_local(fake_gcs: str, task: str, n: int) -> list[bytes]:
    from trainer.base import storage as storage_lib

    return read_records(
        storage_lib.Storage(fake_gcs), f"gs://test-bucket/{task}/eval-*.tfrecord", n
    )


def test_a_linear_model_gets_its_closed_form(fake_gcs, job_uri, monkeypatch):
    # Additive in its inputs (normalised numbers, a category's embedding, one Dense):
    # the Shapley value of feature i is f(baseline with x_i) - f(baseline), in every order.
    module = types.ModuleType("linear_models")
    module.linear = linear_model
    monkeypatch.setitem(sys.modules, "linear_models", module)
    config = make_config(
        fake_gcs, job_uri, "regression", model_fn="linear_models:linear", train_steps=30
    )
    run_job(config)
    model_dir = os.path.join(fake_gcs, config.model_dir[len("gs://") :])
    model = tf.saved_model.load(model_dir)
    specs = model.signatures["predict"].structured_input_signature[1]
    base = explain.baseline(json.load(open(os.path.join(model_dir, "schema.json"))), specs)
    shift = {tf.float32: 1.5, tf.int64: 2}
    instance = {
        name: (np.asarray(v) + shift[specs[name].dtype]).tolist()
        if specs[name].dtype in shift
        else v
        for name, v in base.items()
    }
    instance["city"] = "city_07" if base["city"] != "city_07" else "city_08"
    found = explain.shapley(model, instance, base, orders=8)

    def f(values: dict) -> float:
        cols = {n: tf.constant([values[n]], dtype=specs[n].dtype) for n in specs}
        return float(model.signatures["predict"](**cols)["predictions"][0])

    for name in specs:
        alone = f({**base, name: instance[name]}) - f(base)
        assert found["contributions"][name] == pytest.approx(alone, abs=1e-4), name


def test_explain_needs_the_predict_signature(tmp_path, exported, fake_gcs):
    # A SavedModel with serving_default alone.
    class Only(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, examples):
            return {"predictions": tf.zeros_like(examples, tf.float32)}

    only = Only()
    tf.saved_model.save(only, str(tmp_path / "m"), signatures={"serving_default": only.serve})
    proc = run_predict(
        f"--model_dir={tmp_path}/m", "--explain", f"--examples={fake_gcs}/test-bucket/binary/eval-*"
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path}/m: no 'predict' signature (raw features) to explain; export "
        "the model with trainer.task"
    ]
