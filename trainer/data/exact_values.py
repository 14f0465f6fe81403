"""Whether a number with few distinct values is worth learning value by value.

An id, a price list or a count of few values is a function of each value (a tree splits
on each one); a rounded measurement (a distance in miles, a temperature in degrees) is a
smooth function of it, and a bin per value only lets the network overfit. Counting the
values cannot tell the two apart (VietNamI's commune: 191 values seen 52 times each;
flights' distance: 194 values seen 51 times each), the label can: on the schema sample,
the mean label of each value is compared, out of fold, with a piecewise-linear fit on
the 16 quantile bins, the two encodings `model.RobustPLE` chooses between.

Measured on 26 tables (benchmarks/real_data.py, docs/decisions.md):
flights 1.022 of HGB's error against 1.123 when every such feature kept its values,
VietNamI 1.025 against 1.112 with quantile bins only. Folds, prior and ridge were set
once, not tuned.
"""

from __future__ import annotations

import numpy as np

FOLDS = 5
# Records of the overall mean that each value's mean starts from, so a value seen a
# few times is not taken at its word.
PRIOR_RECORDS = 1.0
RIDGE = 1e-3


def worth_keeping(numbers: np.ndarray, labels: np.ndarray, classes: int, quantiles: int) -> bool:
    """True when each value's own mean label predicts held-out records better (squared
    error, summed over folds) than a piecewise-linear function of `quantiles` quantile
    edges does.

    Args:
      numbers: [n] the feature's values in the sampled records that have a label.
      labels: [n] those records' labels: standardised for regression, class indices
        for classification (compared one-hot: the error is then the Brier score).
      classes: how many classes; 0 for regression.
      quantiles: how many quantile edges the schema keeps (schema.QUANTILES).
    """
    fold = np.arange(len(numbers)) % FOLDS
    by_value = by_bins = 0.0
    for k in range(FOLDS):
        train, test = fold != k, fold == k
        if not train.any() or not test.any():
            return False
        x, y = numbers[train], labels[train]
        values, index = np.unique(x, return_inverse=True)
        counts = np.bincount(index, minlength=len(values))[:, None]
        sums = _group_sums(index, len(values), y, classes)
        overall = sums.sum(axis=0) / len(y)
        means = (sums + PRIOR_RECORDS * overall) / (counts + PRIOR_RECORDS)
        at = np.minimum(np.searchsorted(values, numbers[test]), len(values) - 1)
        seen = (values[at] == numbers[test])[:, None]
        by_value += _squared_error(np.where(seen, means[at], overall), labels[test], classes)

        edges = np.unique(np.quantile(x, np.linspace(0, 1, quantiles)))
        design = _ple(x, edges)
        weights = np.linalg.solve(
            design.T @ design + RIDGE * np.eye(design.shape[1]), _weighted_sums(design, y, classes)
        )
        by_bins += _squared_error(_ple(numbers[test], edges) @ weights, labels[test], classes)
    return bool(by_value < by_bins)


def _group_sums(groups: np.ndarray, size: int, labels: np.ndarray, classes: int) -> np.ndarray:
    """[size, max(classes, 1)]: the labels (one-hot for classes) summed per group."""
    if classes:
        return (
            np.bincount(groups * classes + labels.astype(int), minlength=size * classes)
            .reshape(size, classes)
            .astype(float)
        )
    return np.bincount(groups, weights=labels, minlength=size)[:, None]


def _weighted_sums(design: np.ndarray, labels: np.ndarray, classes: int) -> np.ndarray:
    """design.T @ targets, [columns, max(classes, 1)], the targets one-hot for classes,
    without making them (1,000 classes of 10,000 records would be 10M numbers)."""
    if not classes:
        return design.T @ labels[:, None]
    return np.stack(
        [np.bincount(labels.astype(int), weights=column, minlength=classes) for column in design.T]
    )


def _squared_error(guess: np.ndarray, labels: np.ndarray, classes: int) -> float:
    """The summed squared error of [n, max(classes, 1)] guesses: for classes, against
    the one-hot labels (|p|^2 - 2 p_label + 1 per record, the Brier score)."""
    if not classes:
        return float(np.sum((labels - guess[:, 0]) ** 2))
    picked = guess[np.arange(len(labels)), labels.astype(int)]
    return float(np.sum(guess**2) - 2 * np.sum(picked) + len(labels))


def _ple(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """A constant and the piecewise-linear encoding of x over `edges`, as RobustPLE."""
    lower, width = edges[:-1], np.diff(edges)
    bins = np.clip((x[:, None] - lower) / width, 0.0, 1.0) if len(width) else np.zeros((len(x), 0))
    return np.hstack([np.ones((len(x), 1)), bins])
