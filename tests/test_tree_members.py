"""benchmarks.tree_members: a real job's kept predictions and directory replay its own
trees, its own test figure and the race's stops."""

import os
import time

import numpy as np
import pytest

from benchmarks import blend_rules, tree_members
from trainer.train import forest, weighing

from conftest import BUCKET, data_globs, run_python, task_args


@pytest.fixture(scope="module")
def kept_job(fake_gcs, tmp_path_factory):
    """(the job's kept predictions, its local directory) of one small default binary job."""
    from trainer.base import storage as storage_lib

    job_uri = f"gs://{BUCKET}/jobs/tree-members/tiny-{time.time_ns()}"
    kept = tmp_path_factory.mktemp("kept") / "tiny-1.npz"
    args = task_args(
        fake_gcs,
        job_uri,
        "binary",
        trees="auto",
        train_steps=40,
        eval_every_steps=10,
        seed=1,
        test_data=data_globs("binary")[1],
    )
    done = run_python("-m", "benchmarks.blend_predictions", *args, BLEND_PREDICTIONS=str(kept))
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(np.load(kept)), storage_lib.Storage(fake_gcs).path(job_uri)


def test_the_job_is_found_by_table_and_seed(kept_job):
    _, job_dir = kept_job
    assert tree_members.job_dirs(os.path.dirname(job_dir), "tiny") == {1: job_dir}
    assert tree_members.job_dirs(os.path.dirname(job_dir), "tin") == {}


def test_lightgbm_refitted_from_the_job_s_directory_gives_the_job_s_own_trees(
    kept_job, monkeypatch
):
    job, job_dir = kept_job
    plan = tree_members.job_plan(job_dir)
    data = tree_members.matrices(plan)
    np.testing.assert_array_equal(data["validation"][1], job["validation_labels"])
    np.testing.assert_array_equal(data["test"][1], job["test_labels"])
    # No parameter over the first member's own: the very trees the job blended; the
    # CatBoost-like candidate's: the job's second member.
    validation, test, seconds = tree_members.fit_lightgbm(plan, data, {})
    np.testing.assert_allclose(validation, job["validation_member_trees"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(test, job["test_member_trees"], rtol=0, atol=1e-9)
    assert seconds > 0
    shallow = tree_members.LIGHTGBM["lightgbm, CatBoost-like"](plan, len(data["train"][0]))
    validation, test, _ = tree_members.fit_lightgbm(plan, data, shallow)
    np.testing.assert_allclose(validation, job["validation_member_shallow_trees"], atol=1e-9)
    np.testing.assert_allclose(test, job["test_member_shallow_trees"], rtol=0, atol=1e-9)
    # A candidate's num_iterations is its cap of rounds, not a parameter for LightGBM.
    caps = []
    fit = forest.fit
    monkeypatch.setattr(
        forest,
        "fit",
        lambda plan, params, *data: caps.append((params, data[2])) or fit(plan, params, *data),
    )
    tree_members.fit_lightgbm(plan, data, {"num_iterations": 3})
    assert caps[0][1] == 3 and "num_iterations" not in caps[0][0]
    tree_members.fit_lightgbm(plan, data, {})
    assert caps[1][1] is None  # the job's own cap
    monkeypatch.setattr(forest, "fit", fit)
    # Another member's parameters give other trees.
    other, _, _ = tree_members.fit_lightgbm(plan, data, {"num_leaves": 4, "learning_rate": 0.3})
    assert np.max(np.abs(other - job["validation_member_trees"])) > 1e-3


def test_the_job_s_own_second_member_replays_the_job_s_figure(kept_job):
    job, _ = kept_job
    head = blend_rules.head_of(job)
    own = blend_rules.test_metric(job, head, float(job["weight"]))["auRoc"]
    second = job["validation_member_shallow_trees"], job["test_member_shallow_trees"]
    assert tree_members.two_stage(job, head, *second)["auRoc"] == pytest.approx(own, abs=1e-6)
    # The kept trees' blend is the members' blend by the job's own trees weight.
    members = [job[f"test_member_{n}"] for n in ("trees", "shallow_trees")]
    blend = weighing.blended(head, *members, float(job["trees_weight"]))
    np.testing.assert_allclose(job["test_trees"], blend, rtol=0, atol=1e-6)
    # A member that predicts the validation labels outright takes the blend over: where
    # its test scores are the labels reversed, so is the blend's ranking (whatever the
    # job's own test AUC, 1.0 included).
    reversed_ = -8.0 * (2.0 * job["test_labels"][:, None] - 1.0)
    seen = 8.0 * (2.0 * job["validation_labels"][:, None] - 1.0)
    assert own > 0.9  # so that a blend that ignored the member could not pass below
    assert tree_members.two_stage(job, head, seen, reversed_)["auRoc"] < 0.1


def test_the_replay_of_a_job_reads_its_figures_and_its_races(kept_job, tmp_path):
    job, job_dir = kept_job
    cache = str(tmp_path / "members.npz")
    metrics, seconds = tree_members.replay_job(job, job_dir, cache)
    head = blend_rules.head_of(job)
    assert metrics["default"] == blend_rules.test_metric(job, head, float(job["weight"]))
    assert metrics["trees alone"] == blend_rules.test_metric(job, head, 0.0)
    for f, m in tree_members.RACES:
        rule = f"race f={f:g} m={m:g}"
        assert metrics[rule] in (metrics["default"], metrics["trees alone"])
        assert 0 < seconds[rule] <= seconds["default"]
    assert "+ lightgbm, another seed" in metrics and "+ shallow, 3,000 rounds" in metrics
    # The second members were kept: a second replay reads them back, the same figures.
    again, _ = tree_members.replay_job(job, job_dir, cache)
    assert again == metrics
    # Only the members asked for.
    named, _ = tree_members.replay_job(job, job_dir, None, ["lightgbm, another seed"])
    assert {k for k in named if k.startswith("+ ")} == {"+ lightgbm, another seed"}
    assert named["+ lightgbm, another seed"] == metrics["+ lightgbm, another seed"]


def test_the_race_stops_at_the_first_evaluation_behind_the_trees_from_its_share_on():
    history = {"eval": [{"step": s, "loss": loss} for s, loss in ((10, 0.9), (20, 0.6), (30, 0.5))]}
    # Behind the trees' 0.55 by more than 2% until step 30; checked from step 10 of 40.
    assert tree_members.race_stop(history, 0.55, 40, 0.25, 0.02) == 10
    assert tree_members.race_stop(history, 0.55, 40, 0.5, 0.02) == 20
    # 0.6 is within 10% of 0.55, and from step 20 on the networks are never that far behind.
    assert tree_members.race_stop(history, 0.55, 40, 0.5, 0.1) is None
    assert tree_members.race_stop(history, 0.40, 40, 0.75, 0.0) == 30
    rows = [{"step": 10, "examples_per_second": 320.0}, {"step": 30, "examples_per_second": 640.0}]
    # Steps 11-30 at batch 32 and 640 examples/s: one second.
    assert tree_members.seconds_after({"train": rows}, 32, 10) == pytest.approx(1.0)
    assert tree_members.seconds_after({"train": rows}, 32, 30) == 0.0
