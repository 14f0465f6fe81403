"""The boosted-trees members (trainer.train.forest): fitted on the training records,
weighed against the neural model on validation data, exported inside the SavedModel.
Tolerances are maximum absolute differences."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from trainer.data import inputs
from trainer.model import trees
from trainer.plan import plan as plan_lib
from trainer.train import forest

from conftest import data_globs, make_config, read_records, run_job


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


def test_the_rounds_cap_bounds_a_fit(fake_gcs, job_uri, monkeypatch):
    """Both members run up to ROUNDS; a caller's `rounds` (benchmarks.tree_members'
    candidates) caps a fit in its place."""
    import lightgbm

    plan = plan_lib.make_plan(make_config(fake_gcs, job_uri, task="regression"))
    x, y, w = forest.matrix(plan, plan.splits.train_files, plan.splits.train_part, None)
    train = (x, forest._target(plan.head, y), w)
    monkeypatch.setattr(forest, "PATIENCE", 10_000)  # validation on the training records
    monkeypatch.setattr(forest, "ROUNDS", 5)  # keeps improving: every round is run

    def trees_of(params: dict, **cap) -> int:
        text = forest.fit(plan, params, train, train, **cap)
        return lightgbm.Booster(model_str=text).num_trees()

    assert trees_of(forest.lightgbm_params(plan)) == 5
    assert trees_of(forest.lightgbm_params(plan, "shallow_trees")) == 5
    assert trees_of(forest.lightgbm_params(plan), rounds=7) == 7


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
