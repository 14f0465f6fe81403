"""Shared fixtures: tiny datasets on a fake GCS root, configs, and subprocess helpers.

The CPU is split into two logical devices before TensorFlow starts, so in-process tests
can compare one replica with two under MirroredStrategy without a GPU.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from trainer import sample_data
from trainer.base import config as config_lib
from trainer.base import storage as storage_lib
from trainer.model import arithmetic

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "test-bucket"
TASKS = ("regression", "binary", "multiclass")


@pytest.fixture(scope="session", autouse=True)
def eager_arithmetic() -> None:
    """This process computes as the package's processes do (`trainer.model.arithmetic`),
    whichever test runs first: the servers' answers are compared with it bit for bit."""
    arithmetic.compile_as_eager()


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory) -> str:
    """A fake Cloud Storage root with bucket `test-bucket` and a tiny dataset per task
    at gs://test-bucket/<task>/{train,eval}-*.tfrecord."""
    root = str(tmp_path_factory.mktemp("gcs"))
    os.makedirs(os.path.join(root, BUCKET))
    store = storage_lib.Storage(root)
    for i, task in enumerate(TASKS):
        sample_data.write_dataset(
            store,
            f"gs://{BUCKET}/{task}",
            task,
            train_examples=512,
            eval_examples=128,
            num_shards=4,
            seed=i,
        )
    return root


@pytest.fixture(scope="session")
def mirrored_two_cpus() -> tf.distribute.MirroredStrategy:
    """One MirroredStrategy over the two logical CPUs for the whole session.

    Two strategy objects in one process reuse collective instance keys, and TensorFlow
    then mixes up their all-reduces ("Shape mismatch in the collective instance"); a job
    creates exactly one strategy, and so do the tests.
    """
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="session")
def store(fake_gcs) -> storage_lib.Storage:
    return storage_lib.Storage(fake_gcs)


@pytest.fixture(scope="session")
def exported(fake_gcs, store) -> dict[str, str]:
    """task -> local path of a small export of that task (trained once per session)."""
    dirs = {}
    for task in TASKS:
        job_dir = f"gs://{BUCKET}/jobs/exported-{task}"
        run_job(make_config(fake_gcs, job_dir, task))
        dirs[task] = store.path(f"{job_dir}/model")
    return dirs


@pytest.fixture
def job_uri(fake_gcs, request) -> str:
    """A fresh gs:// job folder per test, under the fake root."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    return f"gs://{BUCKET}/jobs/{name}-{time.monotonic_ns()}"


def data_globs(task: str) -> tuple[str, str]:
    return (f"gs://{BUCKET}/{task}/train-*.tfrecord", f"gs://{BUCKET}/{task}/eval-*.tfrecord")


def job_values(fake_gcs: str, job_uri: str, task: str, **overrides) -> dict:
    """A small, fast job on the tiny dataset of `task`, as flag values."""
    train, evaluation = data_globs(task)
    values = dict(
        train_data=train,
        validation_data=evaluation,
        label="label",
        task=task,
        job_dir=job_uri,
        fake_gcs_root=fake_gcs,
        batch_size=32,
        train_steps=20,
        steps_per_loop=10,
        hidden_units="16,8",
        seed=7,
        shuffle_buffer=256,
        # Trees cost a job test about 40% more (tests/test_export.py: 72 s against 56 s);
        # the tests of the default's own paths ask for them (trees="auto").
        trees="off",
    )
    values.update(overrides)
    return values


def make_config(fake_gcs: str, job_uri: str, task: str = "binary", **overrides):
    return config_lib.make_config(env={}, **job_values(fake_gcs, job_uri, task, **overrides))


def task_args(fake_gcs: str, job_uri: str, task: str = "binary", **flags) -> list[str]:
    """Command-line flags for `python -m trainer.task` on the tiny dataset."""
    values = job_values(fake_gcs, job_uri, task, **flags)
    return [f"--{k}={v}" for k, v in values.items() if v is not None]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CONFIG", "CLUSTER_SPEC") and not k.startswith("AIP_")
    }
    env.update({"PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2", **extra})
    return env


def run_python(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Runs `python ARGS` (a script, or `-m` and a module) in the checkout, with the
    test environment plus `env`, and returns the finished process."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_task(args: list[str], timeout: float = 180, **env) -> subprocess.CompletedProcess:
    """Runs `python -m trainer.task ARGS` and returns the finished process."""
    return run_python("-m", "trainer.task", *args, timeout=timeout, **env)


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_cluster(args: list[str], envs: list[dict[str, str]], timeout: float = 240) -> list[str]:
    """Starts one `trainer.task` process per env, waits for all, and returns their logs.

    Fails fast: when any process exits non-zero, or the timeout passes, every process
    of the cluster is killed (their whole process groups) and the test fails with the logs.
    """
    # The cluster's processes share this machine's cores, as Vertex's replicas do not:
    # OpenMP's spin-waiting in one process's LightGBM fit would starve the others (two
    # processes' 2-thread fits of a 512-record table take 7.4 s instead of 0.06 s). A
    # thread that waits sleeps instead (0.08 s), which on a machine of its own would slow
    # real fits 9-14x (2026-12-07, docs/limitations.md).
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "trainer.task", *args],
            cwd=REPO,
            env=subprocess_env(**{"OMP_WAIT_POLICY": "PASSIVE", **env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for env in envs
    ]
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        logs = [p.communicate()[0] for p in procs]
    codes = [p.returncode for p in procs]
    if any(codes):
        pytest.fail(
            f"cluster processes exited with {codes}:\n"
            + "\n----\n".join(log[-3000:] for log in logs)
        )
    return logs


def tf_config(cluster: dict, task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def predict_in_subprocess(model_dir: str, records: list[bytes]) -> dict:
    """Loads a SavedModel in a fresh Python with TensorFlow only and serves `records`.

    Returns:
      The outputs of `serving_default` as lists.
    """
    code = (
        "import json, sys, base64\n"
        "assert 'trainer' not in sys.modules\n"
        "import tensorflow as tf\n"
        "records = [base64.b64decode(r) for r in json.load(sys.stdin)]\n"
        f"model = tf.saved_model.load({model_dir!r})\n"
        "out = model.signatures['serving_default'](examples=tf.constant(records))\n"
        "decode = lambda v: v.decode() if isinstance(v, bytes) else v\n"
        "print(json.dumps({k: [decode(x) for x in v.numpy().tolist()] "
        "for k, v in out.items()}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([base64.b64encode(r).decode() for r in records]),
        cwd="/",
        env={**subprocess_env(), "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_job(config, strategy: tf.distribute.Strategy | None = None, cluster=None):
    """Plans the job of `config` and runs it (as trainer.task does), under `strategy`
    (default: the default strategy)."""
    from trainer.plan import plan as plan_lib
    from trainer.train import job

    strategy = strategy or tf.distribute.get_strategy()
    return job.run(plan_lib.make_plan(config, strategy.num_replicas_in_sync), strategy, cluster)


def linear_model(schema, num_outputs, config):
    """A --model_fn builder: the default preprocessing, then one Dense layer (additive in
    the model's inputs). Tests register it as a module of their own."""
    import keras

    from trainer.model import tabular as model_lib

    inputs = model_lib.feature_inputs(schema)
    return keras.Model(
        inputs, keras.layers.Dense(num_outputs)(model_lib.preprocess(inputs, schema))
    )


def read_records(store: storage_lib.Storage, glob: str, n: int) -> list[bytes]:
    files = [store.path(f) for f in store.glob(glob)]
    return [r.numpy() for r in tf.data.TFRecordDataset(files).take(n)]
