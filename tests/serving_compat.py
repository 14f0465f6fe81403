"""Serving compatibility: exports made here (TensorFlow 2.21, or whatever runs this file)
answer both Vertex request bodies in TensorFlow 2.15.1, the runtime of Vertex AI's newest
prebuilt prediction images (tf2-cpu.2-15 / tf2-gpu.2-15), with the same predictions.

Not collected by `scripts/test.sh` (its name does not start with test_): it needs a second
environment, which `scripts/test_serving.sh` makes and names in SERVING_PYTHON.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
from test_predict import predict

from conftest import BUCKET, REPO, TASKS, data_globs, make_config, read_records, run_job

SERVING_PYTHON = os.environ.get("SERVING_PYTHON")
TOLERANCE = 1e-5  # max abs difference of predictions and probabilities


@pytest.fixture(scope="module")
def serving_python() -> str:
    assert SERVING_PYTHON, "run through scripts/test_serving.sh, which sets SERVING_PYTHON"
    version = subprocess.run(
        [SERVING_PYTHON, "-c", "import tensorflow as tf; print(tf.__version__)"],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert version.stdout.strip() == "2.15.1", version.stderr[-2000:]
    return SERVING_PYTHON


def answer_in(python: str, model_dir: str, body: dict, tmp_path) -> dict:
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    proc = subprocess.run(
        [python, "scripts/predict.py", f"--model_dir={model_dir}", f"--body={path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def flatten(answer: dict) -> tuple[list, np.ndarray]:
    """(classes or [], every number of the answer) for comparison."""
    classes, numbers = [], []
    for p in answer["predictions"]:
        if isinstance(p, dict):
            classes.append(p["predictions"])
            numbers.extend(p["probabilities"])
        else:
            numbers.append(p)
    return classes, np.array(numbers, dtype=np.float64)


# The default for every task; mlp differs only in standardising numbers, so once (20 s
# of a CI run near its 30 minutes, 2026-12-04); a job trained in bf16 exports float32.
@pytest.mark.parametrize(
    "task, model, precision",
    [(t, "ple_mlp", "float32") for t in TASKS]
    + [("regression", "mlp", "float32"), ("binary", "ple_mlp", "bfloat16")],
)
def test_tf_2_15_serves_the_export_like_this_tensorflow(
    fake_gcs, store, serving_python, tmp_path, task, model, precision
):
    job_dir = f"gs://{BUCKET}/jobs/serving-{task}-{model}-{precision}"
    run_job(make_config(fake_gcs, job_dir, task, model=model, trees="auto", precision=precision))
    model_dir = store.path(f"{job_dir}/model")
    model = tf.saved_model.load(model_dir)
    records = read_records(store, data_globs(task)[1], 16)
    for body in (predict.vertex_body(records), predict.raw_body(records, model_dir, model)):
        here = flatten(predict.answer(body, model))
        there = flatten(answer_in(serving_python, model_dir, body, tmp_path))
        assert here[0] == there[0]
        assert np.max(np.abs(here[1] - there[1])) <= TOLERANCE
