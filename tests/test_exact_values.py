"""exact_values: an id's values are kept, a rounded measurement's are not."""

import numpy as np
import pytest

from trainer.data import exact_values
from trainer.model import tabular as model_lib

QUANTILES = 17


def _ids_and_miles(seed: int):
    """4,000 records: an id of 200 values (20 records each) and a distance rounded to
    whole miles (200 values), both uniform."""
    rng = np.random.default_rng(seed)
    return (
        rng,
        rng.permutation(np.arange(4000) % 200).astype(float),
        np.round(rng.uniform(100, 300, 4000)),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regression_keeps_an_ids_values_and_not_a_rounded_measurements(seed):
    rng, ids, miles = _ids_and_miles(seed)
    # Each id its own level (a commune's prices): no smooth function of the number.
    level = rng.normal(size=200)
    y = level[ids.astype(int)] + rng.normal(scale=0.5, size=4000)
    assert exact_values.worth_keeping(ids, y, 0, QUANTILES)
    # Fares that grow smoothly with the distance: 16 bins fit it, a bin a mile overfits.
    y = np.sqrt(miles) / 3 + rng.normal(scale=0.5, size=4000)
    assert not exact_values.worth_keeping(miles, y, 0, QUANTILES)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classes_keep_an_ids_values_and_not_a_rounded_measurements(seed):
    rng, ids, miles = _ids_and_miles(seed)
    # Three classes; each id mostly one of them.
    favourite = rng.integers(0, 3, 200)[ids.astype(int)]
    labels = np.where(rng.uniform(size=4000) < 0.7, favourite, rng.integers(0, 3, 4000))
    assert exact_values.worth_keeping(ids, labels.astype(float), 3, QUANTILES)
    # Longer flights more often late: a smooth probability of the distance.
    late = rng.uniform(size=4000) < 1 / (1 + np.exp(-(miles - 200) / 40))
    assert not exact_values.worth_keeping(miles, late.astype(float), 2, QUANTILES)


def test_a_number_unrelated_to_the_label_keeps_quantiles():
    rng, ids, _ = _ids_and_miles(0)
    assert not exact_values.worth_keeping(ids, rng.normal(size=4000), 0, QUANTILES)


def test_too_few_records_for_the_folds_keep_quantiles():
    assert not exact_values.worth_keeping(np.array([1.0, 2.0]), np.array([0.0, 1.0]), 2, QUANTILES)


def test_its_bins_are_those_of_the_model():
    """The choice fits the encoding the model will use: RobustPLE's bins, repeated
    edges (a feature of few values) merged."""
    quantiles = [0.0, 1.0, 1.0, 2.0, 5.0, 5.0, 9.0]
    x = np.array([-1.0, 0.0, 0.5, 1.0, 1.5, 3.0, 5.0, 7.0, 9.0, 12.0])
    ours = exact_values._ple(x, np.unique(quantiles))
    theirs = model_lib.RobustPLE(quantiles)(x[:, None].astype(np.float32)).numpy()
    np.testing.assert_allclose(ours[:, 0], 1.0)  # the constant
    np.testing.assert_allclose(ours[:, 1:], theirs[:, 1:], atol=1e-6)  # after the scaled x
