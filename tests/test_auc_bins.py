"""benchmarks.auc_bins: the histograms' AUCs of a kept job's test predictions beside the
exact one."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from benchmarks import auc_bins


def kept_job(task: str, classes: int, logits: np.ndarray, labels: np.ndarray) -> dict:
    """What benchmarks.blend_predictions keeps, for `logits` from both members."""
    return {
        "task": np.array(task),
        "classes": np.array(classes),
        "label_mean": np.array(0.0),
        "label_std": np.array(1.0),
        "weight": np.array(0.5),
        "test_neural": logits,
        "test_trees": logits,
        "test_labels": labels,
    }


def test_binary_predictions_crowded_near_zero():
    rng = np.random.default_rng(0)
    labels = (rng.random(4000) < 0.02).astype(np.int64)
    logits = (rng.normal(-7.0, 0.6, 4000) + 1.0 * labels).astype(np.float32)[:, None]
    read = auc_bins.readings(kept_job("binary", 2, logits, labels), [8192])
    exact = roc_auc_score(labels, 1 / (1 + np.exp(-logits[:, 0].astype(np.float64))))
    assert read["exact"] == pytest.approx(exact, abs=1e-9)
    assert read["log-odds 8192"] == pytest.approx(exact, abs=1e-4)
    assert exact - read["probability 1000"] > 0.01  # most pairs share a bin near 0


def test_multiclass_macro_auc():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 600)
    logits = rng.normal(0, 1, (600, 3)).astype(np.float32)
    logits[np.arange(600), labels] += 1.0
    read = auc_bins.readings(kept_job("multiclass", 3, logits, labels), [2048, 8192])
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(1, keepdims=True)
    exact = roc_auc_score(labels, p, multi_class="ovr", average="macro")
    assert read["exact"] == pytest.approx(exact, abs=1e-6)
    for scheme in ("log-odds 2048", "log-odds 8192", "probability 1000"):
        assert read[scheme] == pytest.approx(exact, abs=2e-3), scheme
