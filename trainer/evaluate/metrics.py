"""Evaluation metrics of each task, exact under every strategy.

Every evaluation batch yields sums (`batch_sums`) that add up across replicas, workers
and batches, uneven last batches included; `finish` turns the totals into metrics. The
AUCs come from fixed-threshold histograms of each prediction's log-odds (`SCORE_BINS`
bins), the confidence thresholds and calibration (`trainer.evaluate.evaluation`) from
histograms of its probability (`BINS` bins), so they are sums too: one replica and a
cluster of workers report the same figures. Names
follow Vertex AI's model evaluations (auRoc, logLoss, meanAbsoluteError, ...); the older
short names mae and rmse stay as aliases.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from trainer.model import heads

# Probability bins of the threshold histograms: every confidence threshold of
# evaluation.json (0, 0.01, ..., 1) falls on a bin edge, so their counts are exact.
BINS = 1000
# Log-odds bins of the AUC histograms, 1/256 wide over [-16, 16]: AUCs are exact but for
# predictions closer than that, which count as ties (half credit). Bins of the
# probability crowd predictions near 0 or 1 into ties: on weather_rain's 5,223 test
# records 1,000 of them read the AUC 5e-4 low (2% of its error), these 1e-5
# (docs/decisions.md).
SCORE_BINS = 8192
SCORE_LIMIT = 16.0


def zero_sums(head: heads.Head) -> dict[str, tf.Tensor]:
    """The sums of no example, shaped as `batch_sums` returns them."""
    labels = tf.zeros([0], tf.float32 if head.task == "regression" else tf.int32)
    return batch_sums(head, labels, tf.zeros([0, head.units]))


def batch_sums(
    head: heads.Head, labels: tf.Tensor, logits: tf.Tensor, weights: tf.Tensor | None = None
) -> dict[str, tf.Tensor]:
    """Sums over one batch; add them up over batches and replicas, then `finish`.

    Every sum counts a record `weights` times (1 by default): a weight of 2 counts as
    the record twice, in every metric. An ensemble's logits count as their combination."""
    logits = head.combine(logits)
    w = tf.ones_like(logits[:, 0]) if weights is None else tf.cast(weights, tf.float32)
    sums = {
        "loss": tf.reduce_sum(w * head.loss(labels, logits)),
        "count": tf.cast(tf.shape(logits)[0], tf.float32),
        "weight": tf.reduce_sum(w),
    }
    if head.task == "regression":
        sums.update(_regression_sums(head.predictions(logits), labels, w))
        return sums
    probabilities = head.probabilities(logits)
    labels = tf.cast(labels, tf.int32)
    predicted = tf.argmax(probabilities, axis=1, output_type=tf.int32)
    hit = tf.cast(tf.equal(predicted, labels), tf.float32)
    sums["correct"] = tf.reduce_sum(w * hit)
    # The confusion matrix (true class x predicted class), row-major.
    k = 2 if head.task == "binary" else head.units
    sums["confusion"] = tf.math.unsorted_segment_sum(w, labels * k + predicted, k * k)
    if head.task == "multiclass":  # the top class's probability, right or wrong
        top = tf.clip_by_value(
            tf.cast(tf.reduce_max(probabilities, axis=1) * BINS, tf.int32), 0, BINS - 1
        )
        sums["top_hits"] = tf.math.unsorted_segment_sum(w * hit, top, BINS)
        sums["top_misses"] = tf.math.unsorted_segment_sum(w * (1 - hit), top, BINS)
    if head.task == "binary":
        positive, said_positive = tf.cast(labels, tf.float32), tf.cast(predicted, tf.float32)
        sums["true_positives"] = tf.reduce_sum(w * positive * said_positive)
        sums["false_positives"] = tf.reduce_sum(w * (1 - positive) * said_positive)
        sums["false_negatives"] = tf.reduce_sum(w * positive * (1 - said_positive))
        probabilities = probabilities[:, 1:]  # the positive class alone
        one_hot = positive[:, None]
    else:
        one_hot = tf.one_hot(labels, head.units)
    probability_bins = tf.cast(probabilities * BINS, tf.int32)
    sums["positives"], sums["negatives"] = _histograms(probability_bins, one_hot, w, BINS)
    # Log-odds of a probability: +-inf at 0 and 1, clipped into the end bins.
    score = tf.clip_by_value(
        tf.math.log(probabilities) - tf.math.log1p(-probabilities), -SCORE_LIMIT, SCORE_LIMIT
    )
    score_bins = tf.cast((score + SCORE_LIMIT) * (SCORE_BINS / (2 * SCORE_LIMIT)), tf.int32)
    sums["score_positives"], sums["score_negatives"] = _histograms(
        score_bins, one_hot, w, SCORE_BINS
    )
    return sums


def _histograms(
    bins: tf.Tensor, one_hot: tf.Tensor, w: tf.Tensor, size: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """The weight of positives and of negatives in each of `size` bins, one histogram per
    class (one vs rest): index = class * size + bin; bins outside [0, size) are clipped."""
    bins = tf.clip_by_value(bins, 0, size - 1)
    index = tf.reshape(bins + tf.range(tf.shape(bins)[1])[None, :] * size, [-1])
    total = int(one_hot.shape[1]) * size
    return (
        tf.math.unsorted_segment_sum(tf.reshape(w[:, None] * one_hot, [-1]), index, total),
        tf.math.unsorted_segment_sum(tf.reshape(w[:, None] * (1 - one_hot), [-1]), index, total),
    )


def _regression_sums(
    predictions: tf.Tensor, labels: tf.Tensor, w: tf.Tensor
) -> dict[str, tf.Tensor]:
    error = predictions - labels
    nonzero = tf.not_equal(labels, 0.0)
    both_non_negative = (labels >= 0.0) & (predictions >= 0.0)
    log_error = tf.math.log1p(tf.maximum(predictions, 0.0)) - tf.math.log1p(tf.maximum(labels, 0.0))
    return {
        "abs_error": tf.reduce_sum(w * tf.abs(error)),
        "squared_error": tf.reduce_sum(w * tf.square(error)),
        "label_sum": tf.reduce_sum(w * labels),
        "label_squares": tf.reduce_sum(w * tf.square(labels)),
        "relative_error": tf.reduce_sum(
            w * tf.where(nonzero, tf.abs(error) / tf.where(nonzero, tf.abs(labels), 1.0), 0.0)
        ),
        "zero_labels": tf.reduce_sum(tf.cast(~nonzero, tf.float32)),
        "squared_log_error": tf.reduce_sum(
            w * tf.where(both_non_negative, tf.square(log_error), 0.0)
        ),
        "negatives": tf.reduce_sum(tf.cast(~both_non_negative, tf.float32)),
    }


def finish(head: heads.Head, sums: dict) -> dict[str, float]:
    """Metrics from summed `batch_sums`. A metric that is undefined for the data (an AUC
    without positives, a percentage error with zero labels) is left out."""
    sums = {k: np.asarray(v, dtype=np.float64) for k, v in sums.items()}
    n = float(sums["weight"]) or 1.0  # the weighted number of examples
    out = {"loss": float(sums["loss"]) / n, "examples": float(sums["count"])}
    if head.task == "regression":
        out.update(_regression_metrics(sums, n))
        return out
    out["logLoss"] = out["loss"]
    out["accuracy"] = float(sums["correct"]) / n
    classes = 1 if head.task == "binary" else head.units
    positives = sums["score_positives"].reshape(classes, SCORE_BINS)
    negatives = sums["score_negatives"].reshape(classes, SCORE_BINS)
    aucs = [auc for auc in (roc_auc(p, q) for p, q in zip(positives, negatives)) if auc is not None]
    if aucs:
        out["auRoc"] = float(np.mean(aucs))  # one-vs-rest, macro-averaged
    if head.task == "binary":
        tp, fp, fn = (
            float(sums[k]) for k in ("true_positives", "false_positives", "false_negatives")
        )
        out["precision"] = tp / (tp + fp) if tp + fp else 0.0
        out["recall"] = tp / (tp + fn) if tp + fn else 0.0
        pr = out["precision"] + out["recall"]
        out["f1"] = 2 * out["precision"] * out["recall"] / pr if pr else 0.0
        auprc = pr_auc(positives[0], negatives[0])
        if auprc is not None:
            out["auPrc"] = auprc
    return out


def _regression_metrics(sums: dict, n: float) -> dict[str, float]:
    mae = float(sums["abs_error"]) / n
    rmse = math.sqrt(float(sums["squared_error"]) / n)
    out = {"meanAbsoluteError": mae, "rootMeanSquaredError": rmse, "mae": mae, "rmse": rmse}
    total = float(sums["label_squares"]) - float(sums["label_sum"]) ** 2 / n
    if total > 0:
        out["rSquared"] = 1.0 - float(sums["squared_error"]) / total
    if not sums["zero_labels"]:
        out["meanAbsolutePercentageError"] = 100.0 * float(sums["relative_error"]) / n
    if not sums["negatives"]:
        out["rootMeanSquaredLogError"] = math.sqrt(float(sums["squared_log_error"]) / n)
    return out


def _curve(positives: np.ndarray, negatives: np.ndarray):
    """True and false positives at each threshold, from the highest bin down."""
    return np.cumsum(positives[::-1]), np.cumsum(negatives[::-1])


def roc_auc(positives: np.ndarray, negatives: np.ndarray) -> float | None:
    """Area under the ROC curve of one histogram pair; None without both classes."""
    tp, fp = _curve(positives, negatives)
    if not tp[-1] or not fp[-1]:
        return None
    tpr = np.concatenate([[0.0], tp / tp[-1]])
    fpr = np.concatenate([[0.0], fp / fp[-1]])
    return float(np.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2))


def pr_auc(positives: np.ndarray, negatives: np.ndarray) -> float | None:
    """Area under the precision-recall curve (average precision: each step of recall
    times the precision there); None without positives."""
    tp, fp = _curve(positives, negatives)
    if not tp[-1]:
        return None
    said = tp + fp
    precision = np.divide(tp, said, out=np.ones_like(tp), where=said > 0)
    recall = np.concatenate([[0.0], tp / tp[-1]])
    return float(np.sum((recall[1:] - recall[:-1]) * precision))
