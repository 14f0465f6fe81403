"""End to end through `python -m trainer.task`: the local run with gs:// paths, user
errors as one line, and real multi-worker clusters on loopback against one process."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import (
    BUCKET,
    data_globs,
    free_ports,
    predict_in_subprocess,
    read_records,
    run_cluster,
    run_task,
    task_args,
    tf_config,
)


def test_local_run_with_gcs_paths_trains_and_exports(fake_gcs, job_uri, store):
    # --eval_data: the older name of --validation_data keeps working.
    args = [
        a.replace("--validation_data=", "--eval_data=")
        for a in task_args(
            fake_gcs, job_uri, task="multiclass", train_steps=40, eval_every_steps=20, trees="auto"
        )
    ]
    proc = run_task(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stderr
    assert "step 20/40 loss=" in log and "step 40/40 loss=" in log
    assert "examples/s=" in log and "time_left=" in log
    assert f"the lowest logLoss on {data_globs('multiclass')[1]}" in log
    assert "validation at step 20:" in log and "final metrics:" in log
    assert "strategy default with 1 replica(s)" in log
    model_dir = f"{job_uri}/model"
    served = predict_in_subprocess(
        store.path(model_dir), read_records(store, data_globs("multiclass")[1], 4)
    )
    assert set(served["predictions"]) <= {"low", "mid", "high"}
    # The default blends two trees members in.
    assert {"trees.txt", "shallow_trees.txt"} <= set(store.listdir(model_dir))
    assert set(store.listdir(job_uri)) == {"model", "checkpoints", "logs"}
    assert store.glob(f"{job_uri}/logs/events.out.tfevents.*")

    # The written schema, given back with --schema, reproduces the run's input handling.
    rerun = run_task(
        task_args(
            fake_gcs,
            job_uri + "-schema",
            task="multiclass",
            schema=f"{model_dir}/schema.json",
            train_steps=10,
        )
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "inferred schema" not in rerun.stderr


def test_rerunning_a_finished_job_does_not_retrain_or_reexport(fake_gcs, job_uri, store):
    first = run_task(task_args(fake_gcs, job_uri, train_steps=10))
    assert first.returncode == 0, first.stderr[-3000:]
    saved_model = store.path(f"{job_uri}/model/saved_model.pb")
    before = os.stat(saved_model).st_mtime_ns
    again = run_task(task_args(fake_gcs, job_uri, train_steps=10))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished: step 10 of 10" in again.stderr
    assert "step 10/10" not in again.stderr and "exporting" not in again.stderr
    assert os.stat(saved_model).st_mtime_ns == before


def predictions(store, model_dir, records):
    serve = tf.saved_model.load(store.path(model_dir)).signatures["serving_default"]
    return serve(examples=tf.constant(records))["probabilities"].numpy()


AGREEMENT_FLAGS = dict(
    task="binary", batch_size=48, train_steps=30, shard_by="record", trees="auto"
)


@pytest.fixture(scope="module")
def single_process_model(fake_gcs) -> str:
    """The baseline: one process, compiled, the same global batch as the clusters."""
    job = f"gs://{BUCKET}/jobs/agreement-single"
    proc = run_task(task_args(fake_gcs, job, **AGREEMENT_FLAGS))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return f"{job}/model"


def test_three_workers_match_one_process(fake_gcs, job_uri, store, tmp_path, single_process_model):
    """A Vertex-shaped chief + 2 workers cluster trains the model one process trains with
    the same global batch: exported predictions agree within 1e-4."""
    ports = free_ports(3)
    cluster = {
        "chief": [f"localhost:{ports[0]}"],
        "worker": [f"localhost:{ports[1]}", f"localhost:{ports[2]}"],
    }
    tasks = [("chief", 0), ("worker", 0), ("worker", 1)]
    scratch = [tmp_path / f"tmp-{t}-{i}" for t, i in tasks]
    for s in scratch:
        s.mkdir()
    logs = run_cluster(
        task_args(fake_gcs, job_uri, **AGREEMENT_FLAGS),
        [
            dict(TF_CONFIG=tf_config(cluster, t, i), TMPDIR=str(s))
            for (t, i), s in zip(tasks, scratch)
        ],
    )
    assert "strategy MultiWorkerMirroredStrategy with 3 replica(s) in sync" in logs[0]
    assert "TF_CONFIG names 3 training task(s), this is worker 1" in logs[2]
    # Counted in each worker's compiled loop: the gradients' all-reduce is the one
    # cross-worker collective of a step; the loss is reduced once per loop (it took
    # 3 per step before: the loss, and an is-there-still-data check per next()).
    for log in logs:
        assert "the compiled loop waits on 1 collective(s) per step and 1 per loop" in log

    records = read_records(store, data_globs("binary")[1], 64)
    np.testing.assert_allclose(
        predictions(store, f"{job_uri}/model", records),
        predictions(store, single_process_model, records),
        atol=1e-4,
    )
    # Evaluation sums (AUC histograms included) add up across workers as in one process.
    cluster_metrics = store.read_json(f"{job_uri}/model/metrics.json")
    single_metrics = store.read_json(f"{single_process_model}/metrics.json")
    assert cluster_metrics["examples"] == single_metrics["examples"] == 128
    for key in ("auRoc", "auPrc", "logLoss", "accuracy"):
        assert cluster_metrics[key] == pytest.approx(single_metrics[key], abs=1e-4), key
    # So does the full evaluation: the confusion matrix and every threshold's counts.
    cluster_eval = store.read_json(f"{job_uri}/model/evaluation.json")["metrics"]
    single_eval = store.read_json(f"{single_process_model}/evaluation.json")["metrics"]
    assert cluster_eval["confusionMatrix"] == single_eval["confusionMatrix"]
    # (+-1 record: predictions agree within 1e-4, and one may sit on a threshold.)
    for a, b in zip(cluster_eval["confidenceMetrics"], single_eval["confidenceMetrics"]):
        for count in ("truePositiveCount", "falsePositiveCount"):
            assert abs(a[count] - b[count]) <= 1, (a, b)
    # Only the chief's outputs remain: one event file, no worker scratch left behind.
    assert len(store.glob(f"{job_uri}/logs/*")) == 1
    assert set(store.listdir(job_uri)) == {"model", "checkpoints", "logs"}
    assert all(not os.listdir(s) for s in scratch), [os.listdir(s) for s in scratch]


def test_two_eager_workers_from_vertex_cluster_spec_match_one_process(
    fake_gcs, job_uri, store, single_process_model
):
    """Custom containers get only CLUSTER_SPEC: worker pools 0 and 1 form the cluster.
    Run eagerly (the debugging mode), they still train what one compiled process does."""
    ports = free_ports(2)
    spec = {
        "cluster": {
            "workerpool0": [f"localhost:{ports[0]}"],
            "workerpool1": [f"localhost:{ports[1]}"],
        },
        "environment": "cloud",
    }
    envs = [
        dict(CLUSTER_SPEC=json.dumps({**spec, "task": {"type": f"workerpool{i}", "index": 0}}))
        for i in (0, 1)
    ]
    flags = {**AGREEMENT_FLAGS, "run_eagerly": True}
    logs = run_cluster(task_args(fake_gcs, job_uri, **flags), envs)
    assert "CLUSTER_SPEC names 2 training task(s), this is chief 0" in logs[0]
    assert store.read_json(f"{job_uri}/model/metrics.json")["examples"] == 128  # each once

    records = read_records(store, data_globs("binary")[1], 64)
    np.testing.assert_allclose(
        predictions(store, f"{job_uri}/model", records),
        predictions(store, single_process_model, records),
        atol=1e-4,
    )
