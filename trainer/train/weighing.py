"""How the blend is weighed: its members' weights and temperature, chosen on the
validation records.

The blend, in two stages, each by the same rule (`choose_weight`): the two trees
members' mean of probabilities (of numbers, for regression) weighted w1 : 1 - w1, then
that and the neural members together weighted 1 - w : w, each w the one with the lowest
proper loss on the validation data (log loss, or squared error), pulled towards 1/2 as
far as resamples of those records disagree on it. The exported model is the one mixture
of the three, weighted w, (1 - w) w1, (1 - w)(1 - w1) (`mixture`, the export's own
layer). Then, for classes, its logits are divided by the temperature that gives the
lowest validation log loss (temperature scaling: it changes probabilities, not the
predicted class nor the AUC).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from trainer.model import blend as blend_lib
from trainer.model import heads

BLEND_STEPS = 20
# The blend weight's prior: around 1/2, this standard deviation (choose_weight; chosen on
# the 26 benchmark tables: 0.909 of HGB's error against 0.911-0.912 for 0.1, 0.2, 0.5,
# docs/decisions.md); and the resamples of the validation records that measure how sure
# validation is of its choice.
WEIGHT_PRIOR_SD = 0.3
BOOTSTRAPS = 200
# Temperatures tried on the blend's logits (classes), evenly spaced in log from 1/2 to 4.
TEMPERATURES = 25


@dataclasses.dataclass(frozen=True)
class Weighing:
    """The blend's neural share `weight`; validation's own choice and its standard
    deviation over resamples of the records; the validation loss of every w tried."""

    weight: float
    choice: float
    spread: float
    losses: dict[float, float]


def choose_weight(
    head: heads.Head,
    neural: np.ndarray,
    forest: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    seed: int = 0,
) -> Weighing:
    """The neural share w of the blend, as validation weighs it (`Weighing`).

    w* is the w of the lowest proper loss on these records (from 0 to 1 in steps of
    1/BLEND_STEPS); `spread` is w*'s standard deviation over BOOTSTRAPS resamples of the
    records (drawn from `seed`: every worker draws the same). The weight is w* pulled
    towards the equal blend as far as validation is unsure of it (`pulled`): the mean of
    a normal prior around 1/2 of deviation WEIGHT_PRIOR_SD and a normal likelihood around
    w* of deviation `spread`. A few dozen records choose by chance (both models were also
    selected on them); a clear choice, on any number of records, is followed
    (docs/decisions.md).
    """
    grid = [i / BLEND_STEPS for i in range(BLEND_STEPS + 1)]
    weights = np.asarray(weights, np.float64)

    def per_example(w: float) -> np.ndarray:
        return _per_example_loss(head, blended(head, neural, forest, w), labels)

    def mean(losses: np.ndarray) -> float:
        return float(weights @ losses / weights.sum())

    table = np.stack([per_example(w) for w in grid], 1)  # [records, w]
    losses = {w: mean(column) for w, column in zip(grid, table.T)}
    best = _lowest(grid, weights @ table)
    rng = np.random.default_rng(seed)
    n = len(labels)
    draws = [
        _lowest(grid, (np.bincount(rng.integers(0, n, n), minlength=n) * weights) @ table)
        for _ in range(BOOTSTRAPS)
    ]
    spread = float(np.std(draws))
    chosen = pulled(best, spread)
    if chosen not in losses:
        losses[chosen] = mean(per_example(chosen))
    return Weighing(chosen, best, spread, losses)


def pulled(choice: float, spread: float, prior_sd: float = WEIGHT_PRIOR_SD) -> float:
    """Validation's `choice` of the weight, pulled towards 1/2 as far as its `spread`
    says it is unsure: 0.5 + (choice - 0.5) * prior_sd^2 / (prior_sd^2 + spread^2)."""
    return round(0.5 + (choice - 0.5) * prior_sd**2 / (prior_sd**2 + spread**2), 4)


def _per_example_loss(head: heads.Head, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The head's loss of each record, in float64 for the sums over records."""
    per_example = head.loss(_labels(head, labels), tf.constant(logits, tf.float32))
    return per_example.numpy().astype(np.float64)


def _lowest(grid: list[float], totals: np.ndarray) -> float:
    """The w of the lowest total; ties (within float32's rounding: trees that add
    nothing) keep the neural model."""
    lowest = float(np.min(totals))
    return max(w for w, total in zip(grid, totals) if total <= lowest + 1e-6 * abs(lowest))


def choose_temperature(
    head: heads.Head, logits: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """The temperature (classes only: 1 for regression) by which dividing `logits` gives
    the lowest log loss on these records, from 1/2 to 4, and that loss. 1 unless another
    is better by more than float32's rounding."""

    def loss(t: float) -> float:
        return mean_loss(head, logits / t, labels, weights)

    plain = loss(1.0)
    if head.task == "regression":
        return 1.0, plain
    grid = [float(t) for t in np.geomspace(0.5, 4.0, TEMPERATURES)]
    best = min(grid, key=loss)
    return (best, loss(best)) if loss(best) < plain - 1e-6 * abs(plain) else (1.0, plain)


def _labels(head: heads.Head, labels: np.ndarray) -> tf.Tensor:
    """Labels as the head's loss takes them: float32 numbers, or int32 class indices."""
    return tf.constant(labels, tf.float32 if head.task == "regression" else tf.int32)


def blended(head: heads.Head, neural: np.ndarray, forest: np.ndarray, w: float) -> np.ndarray:
    """The logits (numpy) of two models' blend, `w` for the first, as Blend computes it."""
    return mixture(head, neural, [forest], [w, 1 - w])


def mixture(
    head: heads.Head, neural: np.ndarray, forests: list[np.ndarray], weights: list[float]
) -> np.ndarray:
    """The blend's logits (numpy) of the neural model and trees members, `weights` in
    that order, as the exported model computes them."""
    layer = blend_lib.Blend(head, weights)
    return layer(
        tf.constant(neural, tf.float32), [tf.constant(f, tf.float32) for f in forests]
    ).numpy()


def mean_loss(head: heads.Head, logits: np.ndarray, labels: np.ndarray, weights) -> float:
    """The weighted mean of the head's loss over these records."""
    weights = np.asarray(weights, np.float64)
    return float(weights @ _per_example_loss(head, logits, labels) / weights.sum())
