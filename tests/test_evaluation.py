"""evaluation.json against an independent computation: scikit-learn on the exported
model's own predictions of the evaluation data."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from sklearn import metrics as sk

from trainer.base import contracts


def predictions(model_dir: str, pattern: str):
    """(true class index, probabilities) of every evaluation record."""
    schema = json.load(open(os.path.join(model_dir, "schema.json")))
    classes = schema["label"]["classes"]
    records = [r.numpy() for f in sorted(glob.glob(pattern)) for r in tf.data.TFRecordDataset(f)]
    model = tf.saved_model.load(model_dir)
    out = model.signatures["serving_default"](examples=tf.constant(records))
    labels = [tf.train.Example.FromString(r).features.feature["label"] for r in records]
    values = [(f.int64_list.value or f.bytes_list.value)[0] for f in labels]
    values = [v.decode() if isinstance(v, bytes) else v for v in values]
    y = np.array([classes.index(v) for v in values])
    return y, out["probabilities"].numpy().astype(np.float64)


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_classification_evaluation_matches_scikit_learn(exported, fake_gcs, task):
    model_dir = exported[task]
    doc = json.load(open(os.path.join(model_dir, "evaluation.json")))
    assert doc["metricsSchemaUri"] == contracts.CLASSIFICATION_SCHEMA
    y, p = predictions(model_dir, os.path.join(fake_gcs, "test-bucket", task, "eval-*"))
    k = p.shape[1]
    m = doc["metrics"]
    # The confusion matrix: exact.
    assert (
        m["confusionMatrix"]["rows"]
        == sk.confusion_matrix(y, p.argmax(1), labels=range(k)).tolist()
    )
    # Counts at each threshold: exact but for a probability within float error of a
    # multiple of 0.01 (the model ran in float32 here, and in the job): +-1.
    points = m["confidenceMetrics"]
    assert (
        len(points) >= 100
        and points[0]["confidenceThreshold"] == 0.0
        and points[-1]["confidenceThreshold"] == 1.0
    )
    one_hot = np.eye(k)[y]
    scores, truth = (p[:, 1], y == 1) if task == "binary" else (p.ravel(), one_hot.ravel() > 0)
    for point in points:
        said = scores >= point["confidenceThreshold"]
        tp, fp = int((said & truth).sum()), int((said & ~truth).sum())
        assert abs(point["truePositiveCount"] - tp) <= 1, point
        assert abs(point["falsePositiveCount"] - fp) <= 1, point
        assert point["truePositiveCount"] + point["falseNegativeCount"] == truth.sum()
        assert point["falsePositiveCount"] + point["trueNegativeCount"] == (~truth).sum()
    # AUCs from 8192 bins of the log-odds, 1e-3 wide near 1/2 where these barely trained
    # models predict: within 2e-3 of the exact ones.
    auc = (
        sk.roc_auc_score(y, p[:, 1])
        if task == "binary"
        else sk.roc_auc_score(y, p, multi_class="ovr", average="macro")
    )
    assert m["auRoc"] == pytest.approx(auc, abs=2e-3)
    if task == "multiclass":
        assert [s["class"] for s in doc["slices"]] == json.load(
            open(os.path.join(model_dir, "schema.json"))
        )["label"]["classes"]
        top = p.max(1)
        for point in points[::10]:  # top-1: the top class, when at or above t
            said = top >= point["confidenceThreshold"]
            hits = int((said & (p.argmax(1) == y)).sum())
            if said.sum():
                assert point["precisionAt1"] == pytest.approx(
                    hits / said.sum(), abs=1.01 / said.sum()
                )


def test_regression_evaluation_has_vertex_regression_metrics(exported):
    doc = json.load(open(os.path.join(exported["regression"], "evaluation.json")))
    assert doc["metricsSchemaUri"] == contracts.REGRESSION_SCHEMA
    saved = json.load(open(os.path.join(exported["regression"], "metrics.json")))
    assert doc["metrics"]["rootMeanSquaredError"] == saved["rootMeanSquaredError"]
    assert "confidenceMetrics" not in doc["metrics"]
