"""The full evaluation in Vertex AI's model evaluation schema (evaluation.json), from the
summed histograms of `trainer.evaluate.metrics`, so it too is exact across workers.

Classifiers get `confidenceMetrics` at 101 thresholds (0, 0.01, ..., 1: each a multiple
of the histograms' bin width, so the counts are exact), `confusionMatrix`, and for
multiclass per-class slices (one class against the rest) and the top-1 ("At1") figures.
Binary figures are for the positive class (the second of `schema.label.classes`);
multiclass `confidenceMetrics` sum every class's one-vs-rest counts (micro-averaged), as
Vertex's AutoML evaluations do.
"""

from __future__ import annotations

import numpy as np

from trainer.base import contracts
from trainer.data import schema as schema_lib
from trainer.evaluate import metrics as metrics_lib
from trainer.model import heads

THRESHOLDS = np.round(np.arange(101) / 100, 2)


def evaluate(head: heads.Head, schema: schema_lib.Schema, sums: dict, data: str) -> dict:
    """evaluation.json for summed `metrics.batch_sums` of the data `data` names."""
    summary = metrics_lib.finish(head, sums)
    if head.task == "regression":
        return {
            "metricsSchemaUri": contracts.REGRESSION_SCHEMA,
            "data": data,
            "metrics": {
                k: summary[k] for k in contracts.SCHEMA_METRICS["regression"] if k in summary
            },
        }
    sums = {k: np.asarray(v, np.float64) for k, v in sums.items()}
    classes = [str(c) for c in schema.label.classes]
    k = 1 if head.task == "binary" else head.units
    positives = sums["positives"].reshape(k, metrics_lib.BINS)
    negatives = sums["negatives"].reshape(k, metrics_lib.BINS)
    top = (sums["top_hits"], sums["top_misses"]) if head.task == "multiclass" else None
    out: dict = {
        "metricsSchemaUri": contracts.CLASSIFICATION_SCHEMA,
        "data": data,
        "metrics": {
            **{m: summary[m] for m in contracts.SCHEMA_METRICS["classification"] if m in summary},
            "confidenceMetrics": confidence_metrics(positives.sum(0), negatives.sum(0), top),
            "confusionMatrix": confusion_matrix(sums["confusion"], classes),
        },
    }
    if top is not None:  # multiclass
        out["slices"] = [
            {"class": c, "confidenceMetrics": confidence_metrics(p, q)}
            for c, p, q in zip(classes, positives, negatives)
        ]
        out["calibration"] = calibration(top[0], top[1])  # the top class, right or wrong
    else:
        out["calibration"] = calibration(positives[0], negatives[0])
    return out


def calibration(hits: np.ndarray, misses: np.ndarray, bins: int = 10) -> list[dict]:
    """Reliability diagram data: per band of predicted probability, how often the
    prediction was right (binary: the positive class; multiclass: the top class)."""
    width = metrics_lib.BINS // bins
    hits, misses = hits.reshape(bins, width), misses.reshape(bins, width)
    centres = (np.arange(metrics_lib.BINS) + 0.5) / metrics_lib.BINS
    out = []
    for b in range(bins):
        n = hits[b].sum() + misses[b].sum()
        if n:
            weights = hits[b] + misses[b]
            out.append(
                {
                    "low": b / bins,
                    "high": (b + 1) / bins,
                    "count": _count(n),
                    "predicted": float((centres[b * width : (b + 1) * width] * weights).sum() / n),
                    "observed": float(hits[b].sum() / n),
                }
            )
    return out


def confidence_metrics(
    positives: np.ndarray, negatives: np.ndarray, top: tuple | None = None
) -> list[dict]:
    """One entry per threshold t: counts of predictions with probability >= t."""
    # Bin b holds probabilities in [b/BINS, (b+1)/BINS): at or above t = bins >= t*BINS.
    above_p = np.concatenate([np.cumsum(positives[::-1])[::-1], [0.0]])
    above_n = np.concatenate([np.cumsum(negatives[::-1])[::-1], [0.0]])
    if top is not None:
        hits = np.concatenate([np.cumsum(top[0][::-1])[::-1], [0.0]])
        misses = np.concatenate([np.cumsum(top[1][::-1])[::-1], [0.0]])
    total_p, total_n = positives.sum(), negatives.sum()
    out = []
    for t in THRESHOLDS:
        b = int(round(t * metrics_lib.BINS))
        tp, fp = above_p[b], above_n[b]
        entry = {"confidenceThreshold": float(t), **_rates(tp, fp, total_p, total_n)}
        if top is not None:  # the top class alone, when its probability is >= t
            at1 = _rates(hits[b], misses[b], total_p, total_n)
            entry.update(
                {f"{k}At1": at1[k] for k in ("recall", "precision", "falsePositiveRate", "f1Score")}
            )
        out.append(entry)
    return out


def _rates(tp: float, fp: float, total_p: float, total_n: float) -> dict:
    fn, tn = total_p - tp, total_n - fp
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / total_p if total_p else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "recall": recall,
        "precision": precision,
        "falsePositiveRate": fp / total_n if total_n else 0.0,
        "f1Score": f1,
        "truePositiveCount": _count(tp),
        "falsePositiveCount": _count(fp),
        "falseNegativeCount": _count(fn),
        "trueNegativeCount": _count(tn),
    }


def _count(x: float) -> float | int:
    """A (weighted) count: an integer unless --weight made it fractional."""
    return int(round(x)) if abs(x - round(x)) < 1e-6 else float(x)


def confusion_matrix(confusion: np.ndarray, classes: list[str]) -> dict:
    """Vertex's confusionMatrix: rows are true classes, columns predicted ones."""
    k = len(classes)
    rows = np.asarray(confusion, np.float64).reshape(k, k)
    return {
        "annotationSpecs": [{"id": str(i), "displayName": c} for i, c in enumerate(classes)],
        "rows": [[_count(x) for x in row] for row in rows],
    }
