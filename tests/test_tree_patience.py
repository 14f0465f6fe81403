"""benchmarks.tree_patience: the round its replay of early stopping keeps is the round
LightGBM's own early stopping keeps, at every patience, from one recorded curve."""

import numpy as np
import pytest

from benchmarks import tree_patience


def test_a_curve_that_keeps_improving_keeps_its_last_round():
    curve = np.linspace(1.0, 0.5, 20)
    assert tree_patience.kept_round(curve, 5, 20) == (20, 20)
    assert tree_patience.kept_round(curve, 5, 12) == (12, 12)  # the cap of rounds


def test_a_tie_is_not_an_improvement():
    # Best at round 2; rounds 3-5 tie it: patience 3 stops after round 5.
    curve = np.array([0.9, 0.5, 0.5, 0.5, 0.5, 0.4])
    assert tree_patience.kept_round(curve, 3, 6) == (2, 5)
    assert tree_patience.kept_round(curve, 5, 6) == (6, 6)


@pytest.mark.parametrize("patience", [3, 10, 40])
def test_the_replay_keeps_lightgbm_s_round(patience):
    import lightgbm

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 4))
    y = x[:, 0] + 0.5 * np.sin(3 * x[:, 1]) + rng.normal(scale=0.8, size=600)
    params = {"learning_rate": 0.3, "num_leaves": 31, "min_data_in_leaf": 3, "verbose": -1}
    params.update(seed=1, deterministic=True, force_row_wise=True, num_threads=1)

    def fit(stop):
        curves = {}
        train = lightgbm.Dataset(x[:400], y[:400])
        booster = lightgbm.train(
            params,
            train,
            num_boost_round=200,
            valid_sets=[lightgbm.Dataset(x[400:], y[400:], reference=train)],
            callbacks=[
                lightgbm.early_stopping(stop, verbose=False),
                lightgbm.record_evaluation(curves),
            ],
        )
        (curve,) = curves["valid_0"].values()
        return np.asarray(curve), booster.best_iteration

    long_curve, _ = fit(200)  # never stops early: the whole curve
    curve, kept = fit(patience)
    assert kept < 200  # a high rate overfits: early stopping does stop here
    assert tree_patience.kept_round(long_curve, patience, 200) == (kept, len(curve))
