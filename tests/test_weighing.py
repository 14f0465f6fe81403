"""How the blend is weighed (trainer.train.weighing): the weight validation chooses and
how sure it is, the temperature, the blend and the mixture of three as the export
computes them. Tolerances are maximum absolute differences."""

import numpy as np
import pytest
import tensorflow as tf

from trainer.model import heads
from trainer.train import weighing


@pytest.mark.parametrize("records", [20_000, 400])
def test_the_weight_goes_to_the_member_that_predicts_the_validation_labels(records):
    """... on many records or few, when validation is sure of it."""
    rng = np.random.default_rng(0)
    head = heads.Head("binary", (0, 1))
    labels = rng.integers(0, 2, records)
    good = (labels * 2.0 - 1.0)[:, None] * 2 + rng.normal(0, 1, (records, 1))
    noise = rng.normal(0, 1, (records, 1))
    ones = np.ones(records)
    weighed = weighing.choose_weight(head, noise, good, labels, ones)
    assert weighed.choice == 0.0 and min(weighed.losses, key=weighed.losses.get) == 0.0
    assert weighed.spread < 0.05 and weighed.weight <= 0.02
    assert weighing.choose_weight(head, good, noise, labels, ones).weight >= 0.98
    # Trees that add nothing leave the neural model alone: every resample ties.
    same = weighing.choose_weight(head, good, good, labels, ones)
    assert (same.weight, same.choice, same.spread) == (1.0, 1.0, 0.0)


def test_an_unsure_choice_is_pulled_towards_the_equal_blend():
    """Two members as good as each other, 40 records: validation's choice is chance, and
    the weight keeps to 1/2 by as much as resamples of the records disagree."""
    rng = np.random.default_rng(4)
    head = heads.Head("binary", (0, 1))
    labels = rng.integers(0, 2, 40)
    signal = (labels * 2.0 - 1.0)[:, None]
    a, b = (signal + rng.normal(0, 1.5, (40, 1)) for _ in range(2))
    ones = np.ones(40)
    weighed = weighing.choose_weight(head, a, b, labels, ones, seed=1)
    assert weighed.spread > 0.15
    shrink = weighing.WEIGHT_PRIOR_SD**2 / (weighing.WEIGHT_PRIOR_SD**2 + weighed.spread**2)
    assert weighed.weight == pytest.approx(0.5 + (weighed.choice - 0.5) * shrink, abs=1e-4)
    assert weighed.choice != 0.5 and abs(weighed.weight - 0.5) < abs(weighed.choice - 0.5)
    # The resamples are drawn from the seed: the same on every worker.
    assert weighing.choose_weight(head, a, b, labels, ones, seed=1) == weighed


def test_temperature_softens_overconfident_probabilities_and_leaves_calibrated_ones():
    rng = np.random.default_rng(2)
    head = heads.Head("multiclass", ("a", "b", "c"))
    logits = rng.normal(0, 2, (2000, 3))
    labels = np.array([rng.choice(3, p=p) for p in _softmax(logits)])  # calibrated at 1
    ones = np.ones(len(labels))
    t, loss = weighing.choose_temperature(head, logits, labels, ones)
    assert 0.8 <= t <= 1.25
    t, sharper = weighing.choose_temperature(head, 3 * logits, labels, ones)
    assert 2.5 <= t <= 3.5  # undoes the factor 3
    assert sharper == pytest.approx(loss, abs=0.01)
    regression = heads.Head("regression")
    assert weighing.choose_temperature(regression, logits[:, :1], labels * 1.0, ones)[0] == 1


@pytest.mark.parametrize("task", ["regression", "multiclass"])
def test_the_blend_is_the_weighted_mean_of_probabilities_or_numbers(task):
    rng = np.random.default_rng(1)
    units = 3 if task == "multiclass" else 1
    head = heads.Head(task, ("a", "b", "c") if units == 3 else ())
    neural, scores = rng.normal(size=(6, units)), rng.normal(size=(6, units))
    got = weighing.blended(head, neural, scores, 0.3)
    if task == "regression":
        np.testing.assert_allclose(got, 0.3 * neural + 0.7 * scores, atol=1e-6)
    else:
        p = head.probabilities(tf.constant(got)).numpy()
        expected = 0.3 * _softmax(neural) + 0.7 * _softmax(scores)
        np.testing.assert_allclose(p, expected, atol=1e-6)


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_the_mixture_of_three_is_the_two_stage_blend(task):
    """The export's one mixture, weighted w, (1 - w) w1, (1 - w)(1 - w1), is the trees'
    blend (w1) blended with the neural model (w), to float32's rounding."""
    rng = np.random.default_rng(3)
    units = 3 if task == "multiclass" else 1
    head = heads.Head(task, {"binary": (0, 1), "multiclass": ("a", "b", "c")}.get(task, ()))
    neural, first, second = (rng.normal(0, 2, size=(50, units)) for _ in range(3))
    w, w1 = 0.35, 0.8
    two_stage = weighing.blended(head, neural, weighing.blended(head, first, second, w1), w)
    one = weighing.mixture(head, neural, [first, second], [w, (1 - w) * w1, (1 - w) * (1 - w1)])
    np.testing.assert_allclose(one, two_stage, rtol=0, atol=1e-5)


def _softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
