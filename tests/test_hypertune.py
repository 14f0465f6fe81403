"""Hyperparameter tuning reports: the cloudml-hypertune file convention, trials only."""

import json

import pytest

from trainer.base import config as config_lib
from trainer.base import contracts
from trainer.train import hypertune

from conftest import make_config


def test_reports_only_in_a_trial(tmp_path):
    path = tmp_path / "hp" / "output.metrics"
    env = {"CLOUD_ML_HP_METRIC_FILE": str(path)}
    assert hypertune.report("accuracy", {"accuracy": 0.9, "step": 100}, env) is None
    assert not path.exists()
    env["CLOUD_ML_TRIAL_ID"] = "7"
    assert hypertune.report("accuracy", {"accuracy": 0.9, "step": 100}, env) == str(path)
    hypertune.report("accuracy", {"accuracy": 0.95, "step": 200}, env)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(e["trial"], e["accuracy"], e["global_step"]) for e in lines] == [
        ("7", "0.9", "100"),
        ("7", "0.95", "200"),
    ]


def test_tuning_sees_the_selected_models_validation_figure_never_the_test(tmp_path):
    env = {"CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "m"), "CLOUD_ML_TRIAL_ID": "3"}
    metrics = {
        "accuracy": 0.7,
        "step": 500,
        "test": {"accuracy": 0.7},
        "validation": {"accuracy": 0.8},
        "selection": {"step": 300},
    }
    hypertune.report("accuracy", metrics, env)
    entry = json.loads((tmp_path / "m").read_text())
    assert (entry["accuracy"], entry["global_step"]) == ("0.8", "300")


def test_training_loss_stands_in_without_eval_data(tmp_path):
    env = {"CLOUD_ML_HP_METRIC_FILE": str(tmp_path / "m"), "CLOUD_ML_TRIAL_ID": "1"}
    hypertune.report("loss", {"train_loss": 0.5, "step": 10}, env)
    assert json.loads((tmp_path / "m").read_text())["loss"] == "0.5"
    assert hypertune.report("accuracy", {"train_loss": 0.5}, env) is None


def test_metric_must_exist_for_the_task(fake_gcs, job_uri):
    with pytest.raises(
        config_lib.ConfigError,
        match="--hptune_metric='accuracy': --task=regression reports loss, "
        "meanAbsoluteError, rootMeanSquaredError, rSquared",
    ):
        make_config(fake_gcs, job_uri, task="regression", hptune_metric="accuracy")
    for task, metric in (
        ("binary", "auRoc"),
        ("multiclass", "auRoc"),
        ("binary", "auPrc"),
        ("regression", "rSquared"),
        ("regression", "mae"),
    ):
        assert make_config(fake_gcs, job_uri, task=task, hptune_metric=metric)


def test_reported_metrics_are_what_the_tasks_compute():
    """What the flags accept (contracts.TASK_METRICS) is what metrics.finish reports, on
    data where every metric is defined (labels away from zero, both classes present)."""
    import numpy as np
    import tensorflow as tf

    from trainer.evaluate import metrics
    from trainer.model import heads

    rng = np.random.default_rng(0)
    for task, classes in (("regression", ()), ("binary", (0, 1)), ("multiclass", (0, 1, 2))):
        head = heads.Head(
            task=task, classes=classes, label_dtype="int", label_mean=10.0, label_std=2.0
        )
        if task == "regression":
            labels = tf.constant(rng.normal(10, 2, 200), tf.float32)
        else:
            labels = tf.constant(rng.integers(0, len(classes), 200), tf.int64)
        logits = tf.constant(rng.normal(0, 1, (200, head.units)), tf.float32)
        sums = metrics.batch_sums(head, labels, logits)
        found = metrics.finish(head, {k: v.numpy() for k, v in sums.items()})
        assert set(found) == {"examples", *contracts.TASK_METRICS[task]}, task
