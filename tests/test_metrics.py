"""Evaluation metrics: each against an independent NumPy computation on the exported
model's predictions, sums that add up across batches, and one replica against two.
Tolerances: 1e-5 relative for sums and means; AUCs 5e-4, average precision 2e-3 (the
histograms have 8192 bins of the log-odds: predictions closer than 1/256 count as ties)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from trainer.evaluate import metrics
from trainer.model import heads

from conftest import BUCKET, data_globs, make_config, read_records, run_job


def exact_roc_auc(y: np.ndarray, p: np.ndarray) -> float:
    """Mann-Whitney: the chance that a positive scores above a negative (ties: half)."""
    pos, neg = p[y == 1], p[y == 0]
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + ties / 2)


def exact_average_precision(y: np.ndarray, p: np.ndarray) -> float:
    order = np.argsort(-p, kind="stable")
    y = y[order]
    tp = np.cumsum(y)
    precision = tp / np.arange(1, len(y) + 1)
    return float(np.sum(precision * y) / y.sum())


def evaluate(head, labels, logits, batch=7) -> dict:
    """Sums over uneven batches, as an evaluation does."""
    total = {k: v.numpy() for k, v in metrics.zero_sums(head).items()}
    for i in range(0, len(labels), batch):
        part = metrics.batch_sums(
            head, tf.constant(labels[i : i + batch]), tf.constant(logits[i : i + batch])
        )
        total = {k: total[k] + v.numpy() for k, v in part.items()}
    return metrics.finish(head, total)


def test_binary_metrics_against_numpy():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500).astype(np.int32)
    logits = (rng.normal(0, 1.5, 500) + 1.2 * y).astype(np.float32)[:, None]
    m = evaluate(heads.Head("binary", (0, 1), "int"), y, logits)
    p = 1 / (1 + np.exp(-logits[:, 0].astype(np.float64)))
    said = p > 0.5
    tp, fp, fn = np.sum(said & (y == 1)), np.sum(said & (y == 0)), np.sum(~said & (y == 1))
    log_loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert m["examples"] == 500
    assert m["logLoss"] == pytest.approx(log_loss, rel=1e-5) and m["loss"] == m["logLoss"]
    assert m["accuracy"] == pytest.approx(np.mean(said == (y == 1)), rel=1e-6)
    assert m["precision"] == pytest.approx(tp / (tp + fp), rel=1e-6)
    assert m["recall"] == pytest.approx(tp / (tp + fn), rel=1e-6)
    assert m["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn), rel=1e-6)
    assert m["auRoc"] == pytest.approx(exact_roc_auc(y, p), abs=5e-4)
    assert m["auPrc"] == pytest.approx(exact_average_precision(y, p), abs=2e-3)
    assert 0.6 < m["auRoc"] < 0.95  # the data has a signal, not a degenerate case


def test_auc_of_predictions_crowded_near_zero():
    """Rare positives, every probability below 0.01 (as on weather_rain): bins of the
    probability would count most pairs as ties; bins of the log-odds rank them."""
    rng = np.random.default_rng(3)
    y = (rng.random(5000) < 0.02).astype(np.int32)
    logits = (rng.normal(-7.0, 0.6, 5000) + 1.0 * y).astype(np.float32)[:, None]
    m = evaluate(heads.Head("binary", (0, 1), "int"), y, logits, batch=512)
    p = 1 / (1 + np.exp(-logits[:, 0].astype(np.float64)))
    exact = exact_roc_auc(y, p)
    assert m["auRoc"] == pytest.approx(exact, abs=1e-4)
    # What 1,000 bins of the probability would have read: most of the pairs tied.
    bins = np.minimum((p * metrics.BINS).astype(int), metrics.BINS - 1)
    coarse = metrics.roc_auc(
        np.bincount(bins[y == 1], minlength=metrics.BINS),
        np.bincount(bins[y == 0], minlength=metrics.BINS),
    )
    assert exact - coarse > 0.01


def test_multiclass_macro_auc_against_numpy():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 400).astype(np.int32)
    logits = rng.normal(0, 1, (400, 3)).astype(np.float32)
    logits[np.arange(400), y] += 1.0
    m = evaluate(heads.Head("multiclass", ("a", "b", "c"), "string"), y, logits)
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(axis=1, keepdims=True)
    expected = np.mean([exact_roc_auc((y == c).astype(int), p[:, c]) for c in range(3)])
    assert m["auRoc"] == pytest.approx(expected, abs=5e-4)
    assert m["logLoss"] == pytest.approx(-np.mean(np.log(p[np.arange(400), y])), rel=1e-5)
    assert m["accuracy"] == pytest.approx(np.mean(p.argmax(1) == y), rel=1e-6)


def test_regression_metrics_in_label_units():
    rng = np.random.default_rng(2)
    y = rng.uniform(100, 20_000, 300).astype(np.float32)
    head = heads.Head("regression", label_mean=9000.0, label_std=5000.0)
    predicted = (y * rng.uniform(0.8, 1.2, 300)).astype(np.float32)  # all positive
    logits = ((predicted - 9000.0) / 5000.0)[:, None].astype(np.float32)
    m = evaluate(head, y, logits)
    e = predicted.astype(np.float64) - y
    assert m["meanAbsoluteError"] == pytest.approx(np.mean(np.abs(e)), rel=1e-4)
    assert m["mae"] == m["meanAbsoluteError"] and m["rmse"] == m["rootMeanSquaredError"]
    assert m["rootMeanSquaredError"] == pytest.approx(np.sqrt(np.mean(e**2)), rel=1e-4)
    assert m["rSquared"] == pytest.approx(1 - np.sum(e**2) / np.sum((y - y.mean()) ** 2), rel=1e-4)
    assert m["meanAbsolutePercentageError"] == pytest.approx(100 * np.mean(np.abs(e) / y), rel=1e-4)
    assert m["rootMeanSquaredLogError"] == pytest.approx(
        np.sqrt(np.mean((np.log1p(predicted) - np.log1p(y)) ** 2)), rel=1e-4
    )
    # The training loss is the standardised squared error.
    assert m["loss"] == pytest.approx(np.mean((e / 5000.0) ** 2), rel=1e-4)


def test_undefined_metrics_are_left_out():
    regression = evaluate(
        heads.Head("regression"),
        np.array([0.0, -1.0, 2.0], np.float32),
        np.array([[0.5], [0.0], [1.0]], np.float32),
    )
    assert "meanAbsolutePercentageError" not in regression  # a zero label
    assert "rootMeanSquaredLogError" not in regression  # a negative label
    only_positives = evaluate(
        heads.Head("binary", (0, 1), "int"),
        np.array([1, 1], np.int32),
        np.array([[1.0], [2.0]], np.float32),
    )
    assert "auRoc" not in only_positives and only_positives["auPrc"] == pytest.approx(1.0)


def test_metrics_json_agrees_with_the_exported_model(fake_gcs, store, mirrored_two_cpus):
    """metrics.json of a job equals NumPy on its exported model's predictions, and two
    mirrored replicas report what one does."""
    found = {}
    for name, strategy in (("one", None), ("two", mirrored_two_cpus)):
        job_dir = f"gs://{BUCKET}/jobs/metrics-{name}"
        run_job(make_config(fake_gcs, job_dir, "binary", train_steps=60), strategy)
        found[name] = store.read_json(f"{job_dir}/model/metrics.json")
    records = read_records(store, data_globs("binary")[1], 1000)
    model = tf.saved_model.load(store.path(f"gs://{BUCKET}/jobs/metrics-one/model"))
    p = (
        model.signatures["serving_default"](examples=tf.constant(records))["probabilities"]
        .numpy()[:, 1]
        .astype(np.float64)
    )
    y = np.array(
        [
            tf.train.Example.FromString(r).features.feature["label"].int64_list.value[0]
            for r in records
        ]
    )
    one = found["one"]
    assert one["examples"] == len(y) == 128
    # 60 steps leave the probabilities near 1/2, where bins are 1e-3 wide; on 128
    # records each tied pair moves the AUC by 1/(2 x positives x negatives), about 1.2e-4.
    assert one["auRoc"] == pytest.approx(exact_roc_auc(y, p), abs=2e-3)
    assert one["accuracy"] == pytest.approx(np.mean((p > 0.5) == (y == 1)), abs=1e-6)
    assert one["logLoss"] == pytest.approx(
        -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)), rel=1e-4
    )
    for key in ("auRoc", "auPrc", "logLoss", "accuracy", "f1"):
        # Same data order and weights (1 replica B = 2 replicas B/2), same sums.
        assert found["two"][key] == pytest.approx(one[key], abs=1e-4), key
