"""benchmarks.blend_predictions and benchmarks.blend_rules: a real job's kept predictions
replay its own blend, weight and test error."""

import numpy as np
import pytest

from benchmarks import blend_rules

from conftest import data_globs, run_python, task_args


def test_a_job_s_kept_predictions_replay_its_weight_and_test_error(
    fake_gcs, store, job_uri, tmp_path
):
    kept = tmp_path / "job.npz"
    args = task_args(
        fake_gcs,
        job_uri,
        "regression",
        trees="auto",
        train_steps=40,
        test_data=data_globs("regression")[1],
    )
    done = run_python("-m", "benchmarks.blend_predictions", *args, BLEND_PREDICTIONS=str(kept))
    assert done.returncode == 0, done.stderr[-2000:]
    metrics = store.read_json(f"{job_uri}/model/metrics.json")
    job = dict(np.load(kept))
    head = blend_rules.head_of(job)
    assert head.task == "regression" and head.label_std != 1.0
    weights = blend_rules.rules(job, head, [0.3])
    # The job's weight is the rule's own (sd 0.3, the default).
    assert weights["the job's"] == metrics["blend"]["neuralWeight"]
    assert weights["spread, prior sd 0.3"] == weights["the job's"]
    assert weights["validation's choice"] == metrics["blend"]["validationChoice"]
    # The blend of the kept test predictions at that weight scores what the job measured.
    rmse = blend_rules.test_metric(job, head, weights["the job's"])["rootMeanSquaredError"]
    assert rmse == pytest.approx(metrics["rootMeanSquaredError"], rel=1e-5)
    trees = blend_rules.test_metric(job, head, 0.0)["rootMeanSquaredError"]
    assert trees != pytest.approx(rmse, rel=1e-5)
