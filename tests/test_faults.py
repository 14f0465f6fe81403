"""Fault tolerance and bad input, with real processes: SIGKILL and exact resume, SIGTERM
and preemption checkpoints, a killed worker, a crash during export, and every user
mistake as one line with a non-zero exit and nothing half-written."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from test_schema import example

from trainer.base import storage as storage_lib

from conftest import (
    BUCKET,
    REPO,
    data_globs,
    free_ports,
    make_config,
    read_records,
    run_job,
    run_python,
    run_task,
    subprocess_env,
    task_args,
    tf_config,
)

# Long enough to be killed in the middle; tiny batches keep it a few seconds.
RESUME_FLAGS = dict(
    task="binary",
    batch_size=16,
    train_steps=600,
    steps_per_loop=20,
    checkpoint_every_steps=100,
    validation_data=None,
)


def final_weights(store, checkpoint_dir: str) -> dict[str, np.ndarray]:
    """Every model, optimizer and model-selection variable of the newest checkpoint (the
    best weights so far, their step and value: what the export will be)."""
    reader = tf.train.load_checkpoint(store.path(checkpoint_dir))
    return {
        name: reader.get_tensor(name)
        for name in reader.get_variable_to_shape_map()
        if name.startswith(("model/", "optimizer/", "selection/"))
    }


def assert_same_weights(a: dict, b: dict, tolerance: float) -> None:
    assert a.keys() == b.keys() and len(a) > 4
    assert any(k.startswith("selection/") for k in a)
    worst = max(float(np.max(np.abs(a[k] - b[k]))) if a[k].size else 0.0 for k in a)
    assert worst <= tolerance, worst


class Job:
    """A `trainer.task` process whose log is read as it runs."""

    def __init__(self, args: list[str], **env: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.task", *args],
            cwd=REPO,
            env=subprocess_env(**env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout: float = 120) -> str:
        """Reads the log until a line contains `text`; fails if the process ends first."""
        deadline = time.monotonic() + timeout
        for line in self.proc.stderr:
            self.lines.append(line)
            if text in line:
                return line
            if time.monotonic() > deadline:
                break
        self.kill()
        pytest.fail(f"never logged {text!r}:\n" + "".join(self.lines[-40:]))

    def finish(self, timeout: float = 120) -> int:
        try:
            _, rest = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("process did not exit in time:\n" + "".join(self.lines[-40:]))
        self.lines.append(rest)
        return self.proc.returncode

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def uninterrupted_runs(fake_gcs, store):
    """The final weights of an uninterrupted run, per --cache value (made once each)."""
    weights = {}

    def get(cache: str = "auto") -> dict[str, np.ndarray]:
        if cache not in weights:
            proc = run_task(
                task_args(fake_gcs, uninterrupted_job(cache), cache=cache, **RESUME_FLAGS)
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            weights[cache] = final_weights(store, f"{uninterrupted_job(cache)}/checkpoints")
        return weights[cache]

    return get


def uninterrupted_job(cache: str) -> str:
    return f"gs://{BUCKET}/jobs/uninterrupted-{cache}"


@pytest.fixture
def uninterrupted(uninterrupted_runs) -> dict[str, np.ndarray]:
    return uninterrupted_runs("auto")


@pytest.mark.parametrize(
    "cache, paths",
    [
        ("auto", "gs://"),  # memory (the data fits)
        ("off", "gs://"),  # streamed
        # Vertex's Cloud Storage FUSE paths for the data and the job: the same objects.
        ("auto", "/gcs/"),
    ],
    ids=["auto", "off", "auto-gcs-mount"],
)
def test_sigkill_then_restart_ends_with_the_uninterrupted_weights(
    fake_gcs, job_uri, store, uninterrupted_runs, cache, paths
):
    args = [
        a.replace("=gs://", f"={paths}")
        for a in task_args(fake_gcs, job_uri, cache=cache, **RESUME_FLAGS)
    ]
    assert sum(paths in a for a in args) == 2  # --train_data, --job_dir
    job = Job(args)
    job.wait_for("saved checkpoint at step 200")
    job.kill()
    assert "exporting" not in job.log  # killed in the middle of training

    restarted = run_task(args)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    resumed_at = int(restarted.stderr.split("resuming at step ")[1].split()[0])
    assert 200 <= resumed_at < 600  # 6+ epochs of the 512 records in
    # Same data order from the restored position: no example twice, none skipped.
    assert_same_weights(
        final_weights(store, f"{job_uri}/checkpoints"), uninterrupted_runs(cache), 1e-6
    )
    # The same model selected and exported: validation held out by hash (no
    # --validation_data), evaluated every 40 steps, the best kept across the restart.
    resumed = store.read_json(f"{job_uri}/model/metrics.json")
    straight = store.read_json(f"{uninterrupted_job(cache)}/model/metrics.json")
    assert resumed["selection"]["step"] == straight["selection"]["step"]
    assert re.search(r"eval_every_steps +40 \(", restarted.stderr)
    for key in ("logLoss", "auRoc", "accuracy", "examples"):
        assert resumed["validation"][key] == pytest.approx(straight["validation"][key], abs=1e-6), (
            key
        )


def test_sigterm_checkpoints_exits_143_and_resumes(fake_gcs, job_uri, store, uninterrupted):
    args = task_args(fake_gcs, job_uri, **RESUME_FLAGS)
    job = Job(args)
    job.wait_for("step 120/600")
    job.proc.send_signal(signal.SIGTERM)
    assert job.finish() == 128 + signal.SIGTERM
    last = job.log.strip().splitlines()[-1]
    assert last.startswith("error: stopped by SIGTERM at step ") and "run the job again" in last
    stopped_at = int(last.split("at step ")[1].split()[0])
    assert 120 <= stopped_at < 600
    assert f"saved checkpoint at step {stopped_at}" in job.log
    assert not store.exists(f"{job_uri}/model")

    restarted = run_task(args)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert f"resuming at step {stopped_at} of 600" in restarted.stderr
    assert_same_weights(final_weights(store, f"{job_uri}/checkpoints"), uninterrupted, 1e-6)


def two_worker_jobs(args: list[str]) -> list[Job]:
    ports = free_ports(2)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    return [
        Job(args, TF_CONFIG=tf_config(cluster, "chief", 0)),
        Job(args, TF_CONFIG=tf_config(cluster, "worker", 0)),
    ]


def finish_all(jobs: list[Job]) -> list[int]:
    try:
        return [j.finish(timeout=120) for j in jobs]
    finally:
        for j in jobs:
            j.kill()


def test_sigterm_to_one_worker_stops_the_whole_cluster_and_resumes_exactly(
    fake_gcs, job_uri, store
):
    """Vertex may signal one VM only: every task must stop at the same step and save.
    Restarted, the cluster ends with the weights of an uninterrupted cluster. Streamed
    (--cache=off) and sharded by file: each worker skips inside its own files."""
    # Evaluations on a fixed schedule: unset, it would follow --train_steps, which differs
    # (100,000 first, so that the job still runs when signalled); for the same reason
    # `mlp`, whose rate is constant (ple_mlp's schedule follows --train_steps; the SIGKILL
    # test resumes the default model with the same --train_steps).
    flags = {
        **RESUME_FLAGS,
        "cache": "off",
        "shard_by": "file",
        "eval_every_steps": 20,
        "model": "mlp",
    }
    chief, worker = two_worker_jobs(
        task_args(fake_gcs, job_uri, **{**flags, "train_steps": 100_000})
    )
    try:
        chief.wait_for("step 100/100000")
        worker.proc.send_signal(signal.SIGTERM)
    finally:
        codes = finish_all([chief, worker])
    assert codes == [143, 143], chief.log[-3000:]
    lasts = [j.log.strip().splitlines()[-1] for j in (chief, worker)]
    steps = {int(re.search(r"stopped by SIGTERM at step (\d+)", last)[1]) for last in lasts}
    assert len(steps) == 1, lasts  # the same step on both
    step = steps.pop()
    assert f"saved checkpoint at step {step}" in chief.log
    assert tf.train.latest_checkpoint(store.path(f"{job_uri}/checkpoints")).endswith(f"ckpt-{step}")

    assert step < 300
    resumed = two_worker_jobs(task_args(fake_gcs, job_uri, **{**flags, "train_steps": 300}))
    assert finish_all(resumed) == [0, 0], resumed[0].log[-3000:]
    assert f"resuming at step {step} of 300" in resumed[1].log
    straight = two_worker_jobs(
        task_args(fake_gcs, job_uri + "-straight", **{**flags, "train_steps": 300})
    )
    assert finish_all(straight) == [0, 0], straight[0].log[-3000:]
    assert_same_weights(
        final_weights(store, f"{job_uri}/checkpoints"),
        final_weights(store, f"{job_uri}-straight/checkpoints"),
        1e-6,
    )


def test_killed_worker_stops_the_chief_which_resumes_after_restart(fake_gcs, job_uri, store):
    ports = free_ports(2)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    args = task_args(fake_gcs, job_uri, **{**RESUME_FLAGS, "train_steps": 100_000})
    chief = Job(args, TF_CONFIG=tf_config(cluster, "chief", 0))
    worker = Job(args, TF_CONFIG=tf_config(cluster, "worker", 0))
    try:
        chief.wait_for("saved checkpoint at step 100")
        worker.kill()
        killed_at = time.monotonic()
        code = chief.finish(timeout=60)
        assert time.monotonic() - killed_at < 30  # bounded, not a hang
    finally:
        chief.kill()
        worker.kill()
    assert code == 3, chief.log[-3000:]
    last = chief.log.strip().splitlines()[-1]
    # Killed mid-collective, the chief sees the connection drop; otherwise the
    # coordination service reports the missing heartbeats. Both name the worker.
    assert re.match(
        rf"error: lost worker 0 \(localhost:{ports[1]}\): (connection lost|stopped "
        r"sending heartbeats); restart every task to resume from the checkpoint "
        r"of step \d+$",
        last,
    ), last

    # Restarted (with a reachable end), every task resumes from the chief's checkpoint.
    resumed = int(last.rsplit(" ", 1)[1])
    ports = free_ports(2)
    cluster = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    args = task_args(fake_gcs, job_uri, **{**RESUME_FLAGS, "train_steps": resumed + 40})
    jobs = [Job(args, TF_CONFIG=tf_config(cluster, t, 0)) for t in ("chief", "worker")]
    try:
        assert [j.finish() for j in jobs] == [0, 0], jobs[0].log[-3000:]
    finally:
        for j in jobs:
            j.kill()
    assert f"resuming at step {resumed} of {resumed + 40}" in jobs[1].log
    assert store.exists(f"{job_uri}/model/saved_model.pb")


def test_crash_during_export_leaves_the_previous_model_whole(fake_gcs, job_uri, store):
    first = run_task(task_args(fake_gcs, job_uri, train_steps=20))
    assert first.returncode == 0, first.stderr[-3000:]
    metrics = store.read_json(f"{job_uri}/model/metrics.json")

    job = Job(task_args(fake_gcs, job_uri, train_steps=40))  # resumes, trains, exports
    job.wait_for("exporting the model")
    job.kill()
    assert "exported the model" not in job.log
    # model_dir still holds the first export, whole and servable.
    assert store.read_json(f"{job_uri}/model/metrics.json") == metrics
    records = read_records(store, data_globs("binary")[1], 4)
    served = tf.saved_model.load(store.path(f"{job_uri}/model")).signatures["serving_default"](
        examples=tf.constant(records)
    )
    assert served["probabilities"].shape == (4, 2)

    again = run_task(task_args(fake_gcs, job_uri, train_steps=40))
    assert again.returncode == 0, again.stderr[-3000:]
    assert store.read_json(f"{job_uri}/model/metrics.json") != metrics
    assert sorted(store.listdir(job_uri)) == ["checkpoints", "logs", "model"]  # no partials


# Storage faults (issue 31), injected at the storage boundary in-process: TensorFlow's
# GCS filesystem raises UnavailableError once its own retries of a 429 or 503 are spent.
STORAGE_FLAGS = dict(train_steps=60, steps_per_loop=10, checkpoint_every_steps=20, seed=7)


def injected(text: str = "503 Service Unavailable (injected)") -> Exception:
    return tf.errors.UnavailableError(None, None, text)


def test_transient_storage_errors_are_retried_to_the_same_model(
    fake_gcs, job_uri, store, monkeypatch, caplog
):
    clean = f"{job_uri}-clean"
    run_job(make_config(fake_gcs, clean, **STORAGE_FLAGS))

    from trainer.serving import export

    monkeypatch.setattr(storage_lib, "RETRY_BASE_DELAY_S", 0.0)
    saves = []
    real_save = tf.train.CheckpointManager.save

    def flaky_save(self, *args, **kwargs):  # the 2nd and 3rd writes fail, then all pass
        saves.append(1)
        if len(saves) in (2, 3):
            raise injected()
        return real_save(self, *args, **kwargs)

    exports = []
    real_export = export.write_saved_model

    def flaky_export(*args, **kwargs):  # the first export fails half-way
        exports.append(1)
        if len(exports) == 1:
            real_export(*args, **kwargs)
            raise injected("429 Too Many Requests (injected)")
        return real_export(*args, **kwargs)

    failed_reads: set[str] = set()
    real_gfile = tf.io.gfile.GFile

    class FlakyReads(real_gfile):  # every JSON file's first read fails
        def read(self, *args, **kwargs):
            if self.name.endswith(".json") and self.name not in failed_reads:
                failed_reads.add(self.name)
                raise injected()
            return super().read(*args, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", flaky_save)
    monkeypatch.setattr(export, "write_saved_model", flaky_export)
    monkeypatch.setattr(tf.io.gfile, "GFile", FlakyReads)
    with caplog.at_level(logging.WARNING):
        run_job(make_config(fake_gcs, job_uri, **STORAGE_FLAGS))
    assert len(exports) == 2 and len(saves) >= 5 and failed_reads
    assert "saving the checkpoint of step 40" in caplog.text and "retrying in" in caplog.text
    assert f"exporting the model to {job_uri}/model failed (429" in caplog.text
    assert_same_weights(
        final_weights(store, f"{job_uri}/checkpoints"),
        final_weights(store, f"{clean}/checkpoints"),
        0,
    )
    assert store.read_json(f"{job_uri}/model/metrics.json")["logLoss"] == pytest.approx(
        store.read_json(f"{clean}/model/metrics.json")["logLoss"], abs=1e-7
    )
    assert sorted(store.listdir(job_uri)) == ["checkpoints", "logs", "model"]  # no partials


def test_a_permanent_storage_failure_loses_no_earlier_checkpoint_or_export(
    fake_gcs, job_uri, store, monkeypatch
):
    run_job(make_config(fake_gcs, job_uri, **STORAGE_FLAGS))  # checkpoint and export at 60
    exported = store.read_json(f"{job_uri}/model/metrics.json")
    monkeypatch.setattr(storage_lib, "RETRY_BASE_DELAY_S", 0.0)
    monkeypatch.setattr(
        tf.train.CheckpointManager, "save", lambda self, *a, **k: (_ for _ in ()).throw(injected())
    )
    longer = dict(STORAGE_FLAGS, train_steps=100)
    with pytest.raises(storage_lib.StorageError) as e:
        run_job(make_config(fake_gcs, job_uri, **longer))
    assert str(e.value) == (
        f"saving the checkpoint of step 80 to {job_uri}/checkpoints: "
        "503 Service Unavailable (injected) (after 5 attempts)"
    )
    # What was there is whole: the checkpoint of step 60 restores, the export serves.
    latest = tf.train.latest_checkpoint(store.path(f"{job_uri}/checkpoints"))
    assert latest.endswith("ckpt-60")
    tf.train.load_checkpoint(latest).get_variable_to_shape_map()
    assert store.read_json(f"{job_uri}/model/metrics.json") == exported
    records = read_records(store, data_globs("binary")[1], 2)
    model = tf.saved_model.load(store.path(f"{job_uri}/model"))
    assert model.signatures["serving_default"](examples=tf.constant(records))[
        "probabilities"
    ].shape == (2, 2)
    monkeypatch.undo()  # storage is back: the job resumes from step 60
    result = run_job(make_config(fake_gcs, job_uri, **longer))
    assert result.step == 100 and store.read_json(f"{job_uri}/model/metrics.json")["step"] == 100


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MiB tmpfs: a disk that can fill up for real (mounting needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_loses_nothing_and_the_next_run_resumes(fake_gcs, store, small_disk):
    import shutil

    shutil.copytree(os.path.join(fake_gcs, BUCKET, "binary"), small_disk / BUCKET / "binary")
    job_uri = f"gs://{BUCKET}/jobs/full-disk"
    disk = storage_lib.Storage(str(small_disk))
    flags = dict(RESUME_FLAGS, train_steps=200, checkpoint_every_steps=100)
    first = run_task(task_args(str(small_disk), job_uri, **flags))
    assert first.returncode == 0, first.stderr[-3000:]
    exported = disk.read_json(f"{job_uri}/model/metrics.json")
    # Fill the disk, all but 64 KiB.
    free = shutil.disk_usage(small_disk).free
    with open(small_disk / "filler", "wb") as f:
        f.write(b"\0" * (free - (64 << 10)))
    more = dict(flags, train_steps=400)
    full = run_task(task_args(str(small_disk), job_uri, **more))
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr[-3000:]
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "No space left on device" in last, last
    # The newest whole checkpoint restores (which write met the full disk depends on the
    # sizes: one of step 300 may still have fitted), the export of step 200 serves.
    latest = tf.train.latest_checkpoint(disk.path(f"{job_uri}/checkpoints"))
    kept = int(latest.rsplit("-", 1)[1])
    assert kept in (200, 300), latest
    tf.train.load_checkpoint(latest).get_variable_to_shape_map()
    assert disk.read_json(f"{job_uri}/model/metrics.json") == exported
    records = read_records(disk, f"gs://{BUCKET}/binary/eval-*.tfrecord", 2)
    model = tf.saved_model.load(disk.path(f"{job_uri}/model"))
    assert model.signatures["serving_default"](examples=tf.constant(records))[
        "probabilities"
    ].shape == (2, 2)
    os.remove(small_disk / "filler")
    again = run_task(task_args(str(small_disk), job_uri, **more))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming at step {kept}" in again.stderr
    assert disk.read_json(f"{job_uri}/model/metrics.json")["step"] == 400


@pytest.fixture(scope="module")
def bad_data(fake_gcs, store) -> dict[str, str]:
    """One folder per kind of bad input, each with a schema.json fitting the good data."""
    good = read_records(store, data_globs("binary")[0], 64)
    schema = {
        "label": {"name": "label", "dtype": "int", "classes": [0, 1]},
        "features": [
            {"name": "age", "dtype": "float"},
            {"name": "scores", "dtype": "float", "size": 3},
            {"name": "color", "dtype": "string", "vocabulary": ["red"]},
        ],
    }
    cases = {
        "nolabel": good + [example(age=1.0)] + good,
        "labeltype": good + [example(age=1.0, label="yes")],
        "unknownclass": good + [example(age=1.0, label=7)],
        "featuretype": good + [example(age="old", label=1)],
        "featureshape": good + [example(scores=[1.0, 2.0], label=1)],
        "nonfinite": good + [example(age=math.inf, label=0)],
    }
    folders = {}
    for name, records in cases.items():
        folder = f"gs://{BUCKET}/bad/{name}"
        store.makedirs(folder)
        with tf.io.TFRecordWriter(store.path(f"{folder}/part-0.tfrecord")) as w:
            for r in records:
                w.write(r)
        store.write_json(f"{folder}/schema.json", schema)
        folders[name] = folder
    data = bytearray(store.read_bytes(store.glob(data_globs("binary")[0])[0]))
    data[len(data) // 2 : len(data) // 2 + 8] = b"garbage!"
    store.write_bytes(f"gs://{BUCKET}/bad/corrupt/part-0.tfrecord", bytes(data))
    folders["corrupt"] = f"gs://{BUCKET}/bad/corrupt"
    return folders


def on(folder: str, schema: bool = True) -> dict:
    """Flags that train on a bad-data folder, with or without its schema."""
    return dict(
        train_data=f"{{{folder}}}/*.tfrecord",
        validation_data=None,
        batch_size=8,
        schema=f"{{{folder}}}/schema.json" if schema else None,
    )


B = "gs://" + BUCKET + "/bad"
CASES = [  # (case, flags, environment, expected last line starts with, exit code)
    (
        "no match",
        dict(train_data=f"gs://{BUCKET}/nothing/*.tfrecord"),
        {},
        f"error: no file matches 'gs://{BUCKET}/nothing/*.tfrecord' in bucket '{BUCKET}'",
        2,
    ),
    (
        "no bucket",
        dict(train_data="gs://missing-bucket/x/*.tfrecord"),
        {},
        "error: bucket 'missing-bucket' of 'gs://missing-bucket/x/*.tfrecord' does not exist",
        2,
    ),
    (
        "corrupt file",
        on("corrupt", schema=False),
        {},
        f"error: cannot read {B}/corrupt/part-0.tfrecord: corrupted record at ",
        2,
    ),
    (
        "label missing",
        on("nolabel"),
        {},
        f"error: {B}/nolabel/part-0.tfrecord record 64: Feature: label (data type: int64) is "
        "required but could not be found.",
        2,
    ),
    (
        "label type",
        on("labeltype"),
        {},
        f"error: {B}/labeltype/part-0.tfrecord record 64: Key: label, Index: 0.  Data types don't "
        "match. Data type: string but expected type: int64",
        2,
    ),
    (
        "unknown class",
        on("unknownclass"),
        {},
        f"error: {B}/unknownclass/part-0.tfrecord record 64: label 'label' has a value that is "
        "not one of the classes [0, 1] (the schema's: a class that the schema sample missed, as "
        "in data sorted by label, needs shuffled data, a larger --schema_sample_records or a "
        "--schema listing every class)",
        2,
    ),
    (
        "feature type",
        on("featuretype"),
        {},
        f"error: {B}/featuretype/part-0.tfrecord record 64: Key: age, Index: 0.  Data types don't "
        "match. Data type: string but expected type: float",
        2,
    ),
    (
        "feature shape",
        on("featureshape"),
        {},
        f"error: {B}/featureshape/part-0.tfrecord record 64: Key: scores, Index: 0.  Number of "
        "float values != expected.  Values size: 2 but output shape: [3]",
        2,
    ),
    (
        "non-finite",
        on("nonfinite"),
        {},
        f"error: {B}/nonfinite/part-0.tfrecord record 64: feature 'age' has a non-finite value",
        2,
    ),
    (
        "non-finite inferred",
        on("nonfinite", schema=False),
        {},
        f"error: {B}/nonfinite/part-0.tfrecord record 64: feature 'age' has a non-finite value",
        2,
    ),
    (
        "mixed types inferred",
        on("featuretype", schema=False),
        {},
        f"error: {B}/featuretype/part-0.tfrecord record 64: feature 'age' is a bytes_list",
        2,
    ),
    (
        "nan loss",
        dict(learning_rate=1e30, train_steps=200),
        {},
        "error: loss became nan in the steps up to ",
        2,
    ),
    ("zero steps", dict(train_steps=0), {}, "error: --train_steps=0: expected an integer >= 1", 2),
    # absl rejects it before main() runs; its message, as one line like every other.
    (
        "bad task",
        dict(task="ranking"),
        {},
        "error: flag --task=ranking: value should be one of <regression|binary|multiclass>",
        2,
    ),
    ("unknown flag", dict(trian_steps=5), {}, "error: Unknown command line flag 'trian_steps'", 2),
    (
        "replicas",
        dict(cpu_devices=2, batch_size=33),
        {},
        "error: --batch_size=33 does not divide evenly across 2 replicas",
        2,
    ),
    (
        "tf_config json",
        {},
        dict(TF_CONFIG='{"cluster": {"worker": ["localhost:1"]}'),
        "error: TF_CONFIG is not valid JSON",
        2,
    ),
    (
        "tf_config task",
        {},
        dict(TF_CONFIG='{"cluster": {"worker": ["localhost:1"]}}'),
        "error: TF_CONFIG has no 'task' with a 'type' and 'index'",
        2,
    ),
    (
        "tf_config index",
        {},
        dict(
            TF_CONFIG=json.dumps(
                {
                    "cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                    "task": {"type": "worker", "index": 1},
                }
            )
        ),
        "error: TF_CONFIG: task index 1 is out of range for 'worker', which has 1 tasks",
        2,
    ),
    (
        "evaluator",
        {},
        dict(
            CLUSTER_SPEC=json.dumps(
                {
                    "cluster": {"workerpool0": ["a:1"], "workerpool3": ["b:1"]},
                    "task": {"type": "workerpool3", "index": 0},
                }
            )
        ),
        "error: CLUSTER_SPEC: this task is an evaluator",
        2,
    ),
    (
        "mirrored in cluster",
        dict(strategy="mirrored"),
        dict(
            TF_CONFIG=json.dumps(
                {
                    "cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                    "task": {"type": "chief", "index": 0},
                }
            )
        ),
        "error: --strategy=mirrored runs in one process, but TF_CONFIG names 2 training task(s)",
        2,
    ),
]


# Names that would leave the fake Cloud Storage root (issue 31), for every flag that
# takes a URI: refused before anything is read or written.
ESCAPES = [
    "gs://../outside/x",
    f"gs://{BUCKET}/../../outside/x",
    "/gcs/../outside/x",
    "gs://Not_A_Bucket/x",
]
for i, name in enumerate(
    (
        "train_data",
        "validation_data",
        "test_data",
        "schema",
        "job_dir",
        "model_dir",
        "checkpoint_dir",
        "tensorboard_dir",
    )
):
    uri = ESCAPES[i % len(ESCAPES)]
    CASES.append(
        (f"escape {name}", {name: uri}, {}, f"error: --{name}: '{storage_lib.canonical(uri)}", 2)
    )
CASES.append(
    (
        "escape AIP_MODEL_DIR",
        dict(job_dir=None, model_dir=None),
        dict(
            AIP_MODEL_DIR=f"gs://{BUCKET}/jobs/../../../outside/m",
            AIP_CHECKPOINT_DIR=f"gs://{BUCKET}/c",
            AIP_TENSORBOARD_LOG_DIR=f"gs://{BUCKET}/l",
        ),
        f"error: --model_dir: 'gs://{BUCKET}/jobs/../../../outside/m': an object name",
        2,
    )
)


@pytest.mark.parametrize(
    "case, flags, env, expected, code", CASES, ids=[c[0].replace(" ", "_") for c in CASES]
)
def test_bad_input_is_one_line_naming_the_culprit(
    fake_gcs, job_uri, store, bad_data, case, flags, env, expected, code
):
    flags = {k: v.format(**bad_data) if isinstance(v, str) else v for k, v in flags.items()}
    proc = run_task(task_args(fake_gcs, job_uri, **flags), timeout=120, **env)
    assert proc.returncode == code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(expected) if code == 2 else expected in proc.stderr, last
    assert not store.exists(f"{job_uri}/model")  # nothing half-written
    assert not os.path.exists(os.path.join(os.path.dirname(fake_gcs), "outside"))


def test_skip_corrupt_records_logs_and_trains(fake_gcs, job_uri, store, bad_data):
    # The first half of the file is whole: enough to infer a schema and train on.
    flags = {
        k: v.format(**bad_data) if isinstance(v, str) else v
        for k, v in on("corrupt", schema=False).items()
    }
    proc = run_task(task_args(fake_gcs, job_uri, skip_corrupt_records=True, **flags))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        f"skipping the rest of a corrupt file: {B}/corrupt/part-0.tfrecord: corrupted record at "
    ) in proc.stderr
    assert store.exists(f"{job_uri}/model/saved_model.pb")


@pytest.mark.parametrize(
    "command, fragment",
    [
        (
            [
                "trainer.prepare",
                "--input=gs://bkt/../../outside.csv",
                "--label=y",
                "--output=gs://bkt/o",
            ],
            "error: --input: 'gs://bkt/../../outside.csv': an object name with '.' or '..'",
        ),
        (
            ["trainer.prepare", "--input=gs://bkt/x.csv", "--label=y", "--output=gs://../outside"],
            "error: --output: 'gs://../outside': '..' is not a Cloud Storage bucket name",
        ),
        (
            ["trainer.serve", "--model_dir=/gcs/bkt/../../outside"],
            "error: '/gcs/bkt/../../outside': an object name with '.' or '..'",
        ),
        (
            ["trainer.sample_data", "--output=gs://../outside", "--task=binary"],
            "error: 'gs://../outside': '..' is not a Cloud Storage bucket name",
        ),
    ],
)
def test_the_other_commands_refuse_names_that_leave_the_fake_root(tmp_path, command, fragment):
    root = tmp_path / "root"
    (root / "bkt").mkdir(parents=True)
    proc = run_python("-m", *command, f"--fake_gcs_root={root}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(fragment)
    assert sorted(os.listdir(tmp_path)) == ["root"]  # nothing written beside the root
