"""Model selection (trainer/selection.py) and the validation action and final evaluation
(trainer/validation.py): the exported model is the best one on validation data, early
stopping, test data evaluated once, and which data each figure comes from."""

import logging
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer.train import selection as selection_lib

from conftest import data_globs, make_config, read_records, run_job


def small_model() -> keras.Model:
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2)(inputs))


def test_consider_keeps_the_best_weights_and_restores_them():
    model = small_model()
    chosen = selection_lib.Selection(model, "logLoss", patience=2)
    assert chosen.selected_step is None and not chosen.stopped
    first = [w.copy() for w in model.get_weights()]
    assert chosen.consider(10, {"logLoss": 0.5})
    model.set_weights([w + 1 for w in first])
    assert not chosen.consider(20, {"logLoss": 0.6})  # worse: not kept
    assert not chosen.consider(30, {"logLoss": float("nan")})  # never wins
    assert chosen.stopped  # 2 evaluations without a better one
    assert chosen.restore_best() == 10
    for got, want in zip(model.get_weights(), first):
        np.testing.assert_array_equal(got, want)
    assert chosen.best_value == 0.5


def test_early_stopping_counts_only_evaluations_worse_than_the_best_by_the_margin():
    """A plateau within MARGIN of the best is waited through (the rate's decay may still
    bring a better model); evaluations in a row beyond it stop training."""
    assert selection_lib.MARGIN == 0.01
    for metric, best, near, far in [("logLoss", 0.5, 0.504, 0.506), ("auRoc", 0.8, 0.793, 0.791)]:
        chosen = selection_lib.Selection(small_model(), metric, patience=2)
        assert chosen.consider(10, {metric: best})
        for step in (20, 30, 40):  # within 1% of the best: a plateau
            assert not chosen.consider(step, {metric: near}) and not chosen.stopped
        assert not chosen.consider(50, {metric: far}) and not chosen.stopped  # 1 of 2
        assert not chosen.consider(60, {metric: near}) and not chosen.stopped  # in a row only
        assert not chosen.consider(70, {metric: far}) and not chosen.stopped
        assert not chosen.consider(80, {metric: far}) and chosen.stopped
        assert chosen.selected_step == 10, metric


def test_higher_is_better_for_scores_and_nothing_finite_selects_nothing():
    model = small_model()
    chosen = selection_lib.Selection(model, "auRoc")
    assert not chosen.consider(1, {"auRoc": math.nan})
    assert chosen.restore_best() is None  # the model keeps its last weights
    assert chosen.consider(2, {"auRoc": 0.6}) and chosen.consider(3, {"auRoc": 0.7})
    assert not chosen.consider(4, {"auRoc": 0.65})
    assert chosen.selected_step == 3 and not chosen.stopped  # patience 0: never stops


def exported_figures(store, model_dir: str) -> dict:
    """The exported model's accuracy, precision and recall on the eval records, computed
    here from the SavedModel's predictions. (Not log loss: at these rates probabilities
    round to 0 in float32, where the trainer's loss, from logits, stays finite; not AUC:
    saturated predictions tie in the trainer's 1/1000 bins.)"""
    from sklearn import metrics

    records = read_records(store, data_globs("binary")[1], 10_000)
    serve = tf.saved_model.load(store.path(model_dir)).signatures["serving_default"]
    probabilities = serve(examples=tf.constant(records))["probabilities"].numpy()
    labels = np.array(
        [
            tf.train.Example.FromString(r).features.feature["label"].int64_list.value[0]
            for r in records
        ]
    )
    predicted = probabilities.argmax(1)
    return {
        "accuracy": metrics.accuracy_score(labels, predicted),
        "precision": metrics.precision_score(labels, predicted),
        "recall": metrics.recall_score(labels, predicted),
    }


def assert_exported_is(store, model_dir: str, figures: dict) -> None:
    """The SavedModel in `model_dir` is the model `figures` were measured on: the same
    three counts of its predictions (float32 sums: 1e-6)."""
    exported = exported_figures(store, model_dir)
    for key, value in exported.items():
        assert value == pytest.approx(figures[key], abs=1e-6), key


def test_the_export_is_the_best_evaluated_model_not_the_last(fake_gcs, job_uri, store):
    # A learning rate too high: the networks overfit halfway and validation loss rises.
    # (At 0.3 the default's ReLUs die and the loss sits at ln 2: no model to tell apart.)
    # Trees off: the neural model selected is then the model exported.
    config = make_config(
        fake_gcs,
        job_uri,
        train_steps=160,
        eval_every_steps=20,
        learning_rate=0.1,
        trees="off",
        early_stopping_patience=0,  # every evaluation: the best is not the last
    )
    result = run_job(config)
    metrics = store.read_json(f"{job_uri}/model/metrics.json")
    history = store.read_json(f"{job_uri}/model/history.json")["eval"]
    assert [e["step"] for e in history] == list(range(20, 161, 20))
    best = min(history, key=lambda e: e["logLoss"])
    assert metrics["selection"]["step"] == best["step"] == result.metrics["selection"]["step"]
    assert best["step"] != 160, "this run should overfit; change its flags"
    assert metrics["selection"]["goal"] == "minimize" and metrics["step"] == 160
    # The exported model is that step's: its validation figures, evaluated again at the
    # end, and recomputed here from the SavedModel's predictions.
    assert metrics["validation"]["logLoss"] == pytest.approx(best["logLoss"], abs=1e-6)
    assert_exported_is(store, f"{job_uri}/model", best)
    last = [e for e in history if e["step"] == 160][0]
    assert last["logLoss"] > best["logLoss"]
    assert metrics["data"] == {
        "training": config.train_data,
        "validation": config.validation_data,
        "metrics": "validation",
    }
    assert metrics["logLoss"] == metrics["validation"]["logLoss"]


def test_early_stopping_and_a_rerun_that_has_nothing_to_do(fake_gcs, job_uri, store, caplog):
    caplog.set_level(logging.INFO)
    config = make_config(
        fake_gcs,
        job_uri,
        train_steps=400,
        eval_every_steps=10,
        checkpoint_every_steps=10,
        learning_rate=0.1,  # overfits by step 100 (at 0.3 the default's ReLUs die)
        early_stopping_patience=2,
    )
    result = run_job(config)
    # The checkpoint of the step it stopped at holds the stop: a restart does not train on.
    assert tf.train.latest_checkpoint(store.path(config.checkpoint_dir)).endswith(
        f"ckpt-{result.step}"
    )
    history = store.read_json(f"{job_uri}/model/history.json")["eval"]
    selected = result.metrics["selection"]
    assert selected["stoppedEarly"] and result.step < 400
    # It stopped at the first 2 evaluations in a row worse than the best by over 1%.
    best, beyond, stop = math.inf, 0, None
    for e in history:
        beyond = beyond + 1 if e["logLoss"] > 1.01 * min(best, e["logLoss"]) else 0
        best = min(best, e["logLoss"])
        if beyond == 2:
            stop = e["step"]
            break
    assert history[-1]["step"] == result.step == stop
    assert selected["step"] == min(history, key=lambda e: e["logLoss"])["step"]
    again = run_job(config)
    assert again.metrics == result.metrics
    assert "already finished" in caplog.text


def test_test_data_is_evaluated_once_on_the_selected_model(fake_gcs, job_uri, store):
    train, validation = data_globs("binary")
    config = make_config(
        fake_gcs,
        job_uri,
        train_steps=40,
        eval_every_steps=10,
        learning_rate=0.3,
        validation_data=None,
        test_data=validation,
    )
    result = run_job(config)
    metrics = store.read_json(f"{job_uri}/model/metrics.json")
    assert metrics["data"]["metrics"] == "test" and metrics["data"]["test"] == validation
    assert "0.1 of the records of" in metrics["data"]["validation"]
    assert "0.9 of the records of" in metrics["data"]["training"]
    # Held out: about a tenth of the 512 training records validate.
    assert 25 <= metrics["validation"]["examples"] <= 80
    assert metrics["test"]["examples"] == metrics["examples"] == 128
    assert metrics["logLoss"] == metrics["test"]["logLoss"]
    assert_exported_is(store, f"{job_uri}/model", metrics["test"])
    evaluation = store.read_json(f"{job_uri}/model/evaluation.json")
    assert evaluation["data"] == validation
    assert result.metrics["selection"]["step"] in (10, 20, 30, 40)


def test_no_validation_exports_the_last_model(fake_gcs, job_uri, store):
    config = make_config(fake_gcs, job_uri, validation_data=None, holdout_fraction=0)
    result = run_job(config)
    metrics = store.read_json(f"{job_uri}/model/metrics.json")
    assert "selection" not in metrics and "validation" not in metrics
    assert metrics["step"] == result.step == 20 and math.isfinite(metrics["train_loss"])
