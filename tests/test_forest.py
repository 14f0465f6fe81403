"""The boosted-trees member (trainer.train.forest): fitted on the training records,
weighed against the neural model on validation data, exported inside the SavedModel.
Tolerances are maximum absolute differences."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from trainer.data import inputs
from trainer.model import heads, trees
from trainer.plan import plan as plan_lib
from trainer.train import forest

from conftest import data_globs, make_config, read_records, run_job


@pytest.mark.parametrize("records", [20_000, 400])
def test_the_weight_goes_to_the_member_that_predicts_the_validation_labels(records):
    """... on many records or few, when validation is sure of it."""
    rng = np.random.default_rng(0)
    head = heads.Head("binary", (0, 1))
    labels = rng.integers(0, 2, records)
    good = (labels * 2.0 - 1.0)[:, None] * 2 + rng.normal(0, 1, (records, 1))
    noise = rng.normal(0, 1, (records, 1))
    ones = np.ones(records)
    weighed = forest.choose_weight(head, noise, good, labels, ones)
    assert weighed.choice == 0.0 and min(weighed.losses, key=weighed.losses.get) == 0.0
    assert weighed.spread < 0.05 and weighed.weight <= 0.02
    assert forest.choose_weight(head, good, noise, labels, ones).weight >= 0.98
    # Trees that add nothing leave the neural model alone: every resample ties.
    same = forest.choose_weight(head, good, good, labels, ones)
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
    weighed = forest.choose_weight(head, a, b, labels, ones, seed=1)
    assert weighed.spread > 0.15
    shrink = forest.WEIGHT_PRIOR_SD**2 / (forest.WEIGHT_PRIOR_SD**2 + weighed.spread**2)
    assert weighed.weight == pytest.approx(0.5 + (weighed.choice - 0.5) * shrink, abs=1e-4)
    assert weighed.choice != 0.5 and abs(weighed.weight - 0.5) < abs(weighed.choice - 0.5)
    # The resamples are drawn from the seed: the same on every worker.
    assert forest.choose_weight(head, a, b, labels, ones, seed=1) == weighed


def test_temperature_softens_overconfident_probabilities_and_leaves_calibrated_ones():
    rng = np.random.default_rng(2)
    head = heads.Head("multiclass", ("a", "b", "c"))
    logits = rng.normal(0, 2, (2000, 3))
    labels = np.array([rng.choice(3, p=p) for p in _softmax(logits)])  # calibrated at 1
    ones = np.ones(len(labels))
    t, loss = forest.choose_temperature(head, logits, labels, ones)
    assert 0.8 <= t <= 1.25
    t, sharper = forest.choose_temperature(head, 3 * logits, labels, ones)
    assert 2.5 <= t <= 3.5  # undoes the factor 3
    assert sharper == pytest.approx(loss, abs=0.01)
    regression = heads.Head("regression")
    assert forest.choose_temperature(regression, logits[:, :1], labels * 1.0, ones)[0] == 1


@pytest.mark.parametrize("task", ["regression", "multiclass"])
def test_the_blend_is_the_weighted_mean_of_probabilities_or_numbers(task):
    rng = np.random.default_rng(1)
    units = 3 if task == "multiclass" else 1
    head = heads.Head(task, ("a", "b", "c") if units == 3 else ())
    neural, scores = rng.normal(size=(6, units)), rng.normal(size=(6, units))
    got = forest.blended(head, neural, scores, 0.3)
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
    two_stage = forest.blended(head, neural, forest.blended(head, first, second, w1), w)
    one = forest.mixture(head, neural, [first, second], [w, (1 - w) * w1, (1 - w) * (1 - w1)])
    np.testing.assert_allclose(one, two_stage, rtol=0, atol=1e-5)


def _softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_the_trees_matrix_holds_the_job_s_training_records(fake_gcs, job_uri):
    plan = plan_lib.make_plan(make_config(fake_gcs, job_uri, task="regression"))
    x, y, w = forest.matrix(plan, plan.splits.train_files, plan.splits.train_part, None)
    assert x.shape == (512, len(trees.column_names(plan.schema))) and x.dtype == np.float64
    # The labels as the head's loss takes them (it standardises numbers itself); the trees
    # learn the standardised number, as the neural model's logits give it.
    head = plan.head
    assert head.label_std > 1.2  # so that the label and its standardised value differ
    assert float(np.std(y)) == pytest.approx(head.label_std, rel=0.1)
    target = forest._target(head, y)
    np.testing.assert_allclose(target, (y - head.label_mean) / head.label_std)
    assert abs(float(np.mean(target))) < 0.3 and 0.9 < float(np.std(target)) < 1.1
    np.testing.assert_array_equal(w, 1.0)
    x, _, _ = forest.matrix(plan, plan.splits.train_files, plan.splits.train_part, 100)
    assert len(x) == 100


def test_a_member_s_own_cap_bounds_its_rounds(fake_gcs, job_uri, monkeypatch):
    """A member's `num_iterations` (SHALLOW's) caps its rounds in place of ROUNDS, and
    the parameters handed to `fit` are left as they were."""
    import lightgbm

    plan = plan_lib.make_plan(make_config(fake_gcs, job_uri, task="regression"))
    x, y, w = forest.matrix(plan, plan.splits.train_files, plan.splits.train_part, None)
    train = (x, forest._target(plan.head, y), w)
    monkeypatch.setattr(forest, "PATIENCE", 10_000)  # validation on the training records
    monkeypatch.setattr(forest, "ROUNDS", 5)  # keeps improving: every round is run

    def rounds(params: dict) -> int:
        return lightgbm.Booster(model_str=forest.fit(plan, params, train, train)).num_trees()

    assert rounds(forest.lightgbm_params(plan)) == 5
    params = {**forest.lightgbm_params(plan), "num_iterations": 7}
    assert rounds(params) == 7 and params["num_iterations"] == 7
    shallow = forest.lightgbm_params(plan, "shallow_trees")
    assert shallow["num_iterations"] == forest.SHALLOW["num_iterations"] == 3000


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_a_job_blends_trees_into_its_export(fake_gcs, store, job_uri, task, caplog):
    config = make_config(fake_gcs, job_uri, task=task, trees="auto", train_steps=60)
    with caplog.at_level(logging.INFO):
        result = run_job(config)
    assert "boosted trees" in caplog.text
    metrics = store.read_json(f"{job_uri}/model/metrics.json")
    blend = metrics["blend"]
    assert 0 <= blend["neuralWeight"] <= 1 and 0 <= blend["treesWeight"] <= 1
    assert set(blend["treeRounds"]) == set(forest.MEMBERS) == {"trees", "shallow_trees"}
    assert min(blend["treeRounds"].values()) >= 1 and blend["treeRecords"] == 512
    # The one mixture of three: w, then (1 - w) shared w1 : 1 - w1 by the trees members.
    w, w1 = blend["neuralWeight"], blend["treesWeight"]
    expected = {"neural": w, "trees": (1 - w) * w1, "shallow_trees": (1 - w) * (1 - w1)}
    assert blend["memberWeights"] == pytest.approx(expected, abs=1e-6)
    # The blend's validation loss, computed in numpy when its weights and temperature were
    # chosen, is the loss the distributed evaluation of the exported model measures.
    # (Regression's loss is the squared error of the standardised label: in 2026-12 the
    # weight was chosen against labels standardised twice, and this held for classes only.)
    losses = blend["validationLoss"]
    assert metrics["validation"]["loss"] == pytest.approx(losses["calibrated"], rel=1e-5)
    # A mixture's proper loss is at most the worse of its two parts' (convexity; 1e-6 for
    # float32's rounding, where the mixture is one part), and the temperature only ever
    # lowers it.
    assert losses["treesBlend"] <= max(losses["trees"], losses["shallow_trees"]) * (1 + 1e-6)
    assert losses["blend"] <= max(losses["neural"], losses["treesBlend"]) * (1 + 1e-6)
    assert losses["calibrated"] <= losses["blend"]
    for name in ("trees.txt", "shallow_trees.txt"):
        assert store.exists(f"{job_uri}/model/{name}")
        assert store.exists(f"{job_uri}/checkpoints/{name}")
    # The served model is the blend: its probabilities (numbers) are the job's model's.
    output = "predictions" if task == "regression" else "probabilities"
    records = read_records(store, data_globs(task)[1], 32)
    served = (
        tf.saved_model.load(store.path(f"{job_uri}/model"))
        .signatures["serving_default"](examples=tf.constant(records))[output]
        .numpy()
    )
    features = inputs.parse_features(tf.constant(records), result.schema)
    direct = result.head.outputs(result.model(features, training=False))[output].numpy()
    np.testing.assert_allclose(served, direct, rtol=1e-6, atol=1e-6)
    # The job asked LightGBM for its trees' scores; the export holds plain ops only (no
    # call back into Python, nothing XLA must compile), and the job's model still asks
    # LightGBM.
    assert not _unservable(store.path(f"{job_uri}/model"))
    forests = [layer for layer in result.model.layers if isinstance(layer, trees.Forest)]
    assert [f.name for f in forests] == list(forest.MEMBERS) and all(f.native for f in forests)


def _unservable(export_dir: str) -> list[str]:
    """What in a SavedModel a server could not run: calls back into Python, and
    functions that XLA must compile (TF Serving runs XLA only under an experimental
    flag)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(f"{export_dir}/saved_model.pb", "rb") as f:
        saved.ParseFromString(f.read())
    python_calls = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
    found = []
    for graph in saved.meta_graphs:
        found += [node.name for node in graph.graph_def.node if node.op in python_calls]
        for function in graph.graph_def.library.function:
            if function.attr["_XlaMustCompile"].b:
                found.append(function.signature.name)
            found += [node.name for node in function.node_def if node.op in python_calls]
    return found


def test_a_restarted_job_reuses_its_trees(fake_gcs, store, job_uri, caplog):
    config = make_config(fake_gcs, job_uri, trees="auto", train_steps=20)
    run_job(config)
    first = store.read_json(f"{job_uri}/model/metrics.json")
    # The export is removed: the job trains no more, but fits no new trees either.
    store.remove_tree(f"{job_uri}/model")
    with caplog.at_level(logging.INFO):
        run_job(config)
    assert caplog.text.count("as fitted before this restart") == 2  # both members
    _assert_same_blend(store.read_json(f"{job_uri}/model/metrics.json"), first)
    # Killed between the two members' writes: the missing one is fitted again, the same.
    kept = store.read_bytes(f"{job_uri}/checkpoints/shallow_trees.txt")
    os.remove(store.path(f"{job_uri}/checkpoints/shallow_trees.txt"))
    store.remove_tree(f"{job_uri}/model")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        run_job(config)
    assert caplog.text.count("as fitted before this restart") == 1
    assert store.read_bytes(f"{job_uri}/checkpoints/shallow_trees.txt") == kept
    _assert_same_blend(store.read_json(f"{job_uri}/model/metrics.json"), first)


def _assert_same_blend(metrics: dict, first: dict) -> None:
    """The same weights and trees, and so the same validation log loss (1e-6)."""
    for key in ("neuralWeight", "treesWeight", "treeRounds"):
        assert metrics["blend"][key] == first["blend"][key]
    assert metrics["validation"]["logLoss"] == pytest.approx(
        first["validation"]["logLoss"], abs=1e-6
    )
