"""The serving image, running: its entry point serves the exports the training image
made, as Vertex starts it (AIP_* variables), and answers like the model in-process.

Not collected by `scripts/test.sh` (its name does not start with test_): it needs the
images, which `scripts/test_images.sh` builds, trains with, and names in IMAGE_SERVE_*.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import signal
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf
from test_predict import predict
from test_serve import bad_bodies, flat, in_process

from benchmarks import serving as serving_bench

from conftest import TASKS, free_ports

TOLERANCE = 1e-5  # this TensorFlow against the image's tensorflow-cpu build of it
GCS = os.environ.get("IMAGE_GCS_ROOT", "")


class ImageServer:
    """The serving image's entry point in a container sharing loopback."""

    def __init__(self, task: str):
        self.port = free_ports(1)[0]
        prefix = shlex.split(os.environ["IMAGE_SERVE_PREFIX"])
        run, container = prefix[:-2], prefix[-2:]  # "... CONTAINER --"
        entrypoint = json.loads(os.environ["IMAGE_SERVE_ENTRYPOINT"])
        env = [f"AIP_STORAGE_URI=gs://bucket/jobs/{task}/model", f"AIP_HTTP_PORT={self.port}"]
        command = [
            *run,
            *[a for e in env for a in ("--env", e)],
            *container,
            *entrypoint,
            f"--fake_gcs_root={GCS}",
        ]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.endpoint = f"http://127.0.0.1:{self.port}"
        serving_bench.wait_ready(self.endpoint)

    def stop(self) -> str:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.communicate()[0]


@pytest.fixture(scope="module", autouse=True)
def needs_images():
    assert os.environ.get("IMAGE_SERVE_PREFIX") and GCS, (
        "run through scripts/test_images.sh, which builds the images and sets IMAGE_SERVE_*"
    )


def records(task: str, n: int) -> list[bytes]:
    files = sorted(tf.io.gfile.glob(f"{GCS}/bucket/{task}/eval-*.tfrecord"))
    return [r.numpy() for r in tf.data.TFRecordDataset(files).take(n)]


@pytest.mark.parametrize("task", TASKS)
def test_the_image_serves_the_training_images_export(task):
    model_dir = f"{GCS}/bucket/jobs/{task}/model"
    model = tf.saved_model.load(model_dir)
    sample = records(task, 16)
    vertex = predict.vertex_body(sample)
    raw = predict.raw_body(sample, model_dir, model)
    specs = model.signatures["predict"].structured_input_signature[1]
    columns = {
        k: tf.constant([i[k] for i in raw["instances"]], dtype=s.dtype) for k, s in specs.items()
    }
    server = ImageServer(task)
    try:
        for body, expected in (
            (vertex, in_process(model, "serving_default", {"examples": tf.constant(sample)})),
            (raw, in_process(model, "predict", columns)),
        ):
            answer = predict.send(server.endpoint, body)
            classes, values = flat(answer["predictions"])
            assert classes == expected[0]
            assert np.max(np.abs(values - expected[1])) <= TOLERANCE
        if task == "multiclass":
            faults_then_load(server, sample, model_dir, model)
    finally:
        log = server.stop()
    assert "Traceback" not in log, log[-3000:]


def faults_then_load(server: ImageServer, sample: list[bytes], model_dir: str, model) -> None:
    """The fault list, then the load rows, against the image."""
    good = predict.vertex_body(sample[:4])
    expected = predict.send(server.endpoint, good)
    for body, status, fragment in bad_bodies(sample, model_dir, model):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        conn.request("POST", "/predict", body=body)
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
        assert (response.status, fragment in answer["error"]) == (status, True), answer
    assert predict.send(server.endpoint, good) == expected
    started = time.monotonic()
    rows = serving_bench.rows(
        server.endpoint,
        sample,
        model,
        [1, 8, 64],
        [1, 100],
        duration_s=float(os.environ.get("IMAGE_LOAD_SECONDS", "2")),
        label="serving image",
    )
    assert all(r["errors"] == 0 and r["requests"] > 0 for r in rows)
    print(f"load rows in {time.monotonic() - started:.0f} s")
