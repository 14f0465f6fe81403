"""The serving server under load, against the model called in-process, in one run.

    python -m benchmarks.serving --model_dir=DIR --examples='DIR/eval-*.tfrecord'
    python -m benchmarks.serving ... --endpoint=http://127.0.0.1:8080   # a running server

Drives `trainer.serve` over HTTP on loopback with 1, 8 and 64 concurrent clients (each a
keep-alive connection sending one request after another), bodies of 1 and of 100
serialized examples, for a fixed time each: requests/s, instances/s, p50/p99 latency.
The ceiling is the same model called in-process on the same batches (`serving_default`
on tensors, no HTTP, no JSON), in as many threads as the machine has cores. Without
--endpoint it starts one server per --server setting (processes, TensorFlow threads), so
they are compared in the same run. The clients run in this process and share the machine's
cores with the server: on 2 cores the figures are what one machine does for both.
"""

from __future__ import annotations

import base64
import concurrent.futures
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

from absl import app, flags

from trainer.base import contracts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "Export to serve and to call in-process.")
flags.DEFINE_string(
    "examples",
    None,
    "TFRecord glob whose records make the bodies; default: none, the bodies are empty Examples.",
)
flags.DEFINE_string("endpoint", None, "A running server to load instead of starting one.")
flags.DEFINE_list("clients", ["1", "8", "64"], "Concurrent clients.")
flags.DEFINE_list("instances", ["1", "100"], "Instances per request body.")
flags.DEFINE_multi_string(
    "server",
    ["processes=1", "processes=2 tf_threads=2", "processes=0"],
    "trainer.serve settings to compare (repeatable), each "
    "'flag=value flag=value'; processes=0 is the default, one per "
    "core with the cores shared out as TensorFlow threads.",
)
flags.DEFINE_bool(
    "cpr",
    False,
    "Also start the aiplatform SDK's Custom Prediction Routines "
    "server (benchmarks/cpr_predictor.py) with as many workers as cores.",
)
flags.DEFINE_float("duration_s", 4.0, "Seconds of load per row.")
flags.DEFINE_string("output", "benchmarks/results/serving.json", "JSON results.")


def load(endpoint: str, body: bytes, clients: int, duration_s: float) -> dict:
    """`clients` keep-alive connections POST `body` in a loop for `duration_s`.

    Returns:
      requests/s, p50/p99 latency in ms, and the count of answers that were not 200.
    """
    parts = urllib.parse.urlsplit(endpoint)
    path = parts.path if parts.path not in ("", "/") else contracts.PREDICT_ROUTE
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start_barrier = threading.Barrier(clients)

    def client() -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        mine, bad = [], 0
        start_barrier.wait()
        deadline = time.perf_counter() + duration_s
        while (now := time.perf_counter()) < deadline:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            mine.append(time.perf_counter() - now)
            bad += response.status != 200
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "errors": errors[0],
        "requests": len(latencies),
    }


def in_process(model, records: list[bytes], duration_s: float, threads: int) -> float:
    """Batches of `records` per second through serving_default, called directly."""
    import tensorflow as tf

    signature = model.signatures[contracts.SERVING_DEFAULT]
    examples = tf.constant(records)
    signature(examples=examples)  # warm-up
    counts = [0] * threads

    def worker(i: int) -> None:
        deadline = time.perf_counter() + duration_s
        while time.perf_counter() < deadline:
            signature(examples=examples)
            counts[i] += 1

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(worker, range(threads)))
    return sum(counts) / (time.perf_counter() - started)


def body_of(records: list[bytes]) -> bytes:
    return json.dumps(
        {"instances": [{"b64": base64.b64encode(r).decode()} for r in records]}
    ).encode()


def start_server(model_dir: str, settings: str) -> tuple[subprocess.Popen, str]:
    """`python -m trainer.serve` with `settings` ('flag=value flag=value') on a free
    loopback port, once ready."""
    extra = [f"--{s}" for s in settings.split()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.serve", f"--model_dir={model_dir}", "--port=0", *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    line = proc.stdout.readline()
    endpoint = "http://" + line.split()[2]
    wait_ready(endpoint)
    return proc, endpoint


def start_cpr(model_dir: str) -> tuple[subprocess.Popen, str]:
    """The SDK's model server (uvicorn, one worker per core) with TrainerPredictor."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "AIP_HTTP_PORT": str(port),
        "AIP_HEALTH_ROUTE": contracts.HEALTH_ROUTE,
        "AIP_PREDICT_ROUTE": contracts.PREDICT_ROUTE,
        "AIP_STORAGE_URI": model_dir,
        "HANDLER_MODULE": "google.cloud.aiplatform.prediction.handler",
        "HANDLER_CLASS": "PredictionHandler",
        "PREDICTOR_MODULE": "benchmarks.cpr_predictor",
        "PREDICTOR_CLASS": "TrainerPredictor",
        "VERTEX_CPR_WEB_CONCURRENCY": str(os.cpu_count() or 1),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "google.cloud.aiplatform.prediction.model_server"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    wait_ready(endpoint)
    return proc, endpoint


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(endpoint: str, timeout_s: float = 180, health: str = contracts.HEALTH_ROUTE) -> None:
    parts = urllib.parse.urlsplit(endpoint)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            conn.request("GET", health)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{endpoint}{health} did not answer 200 in {timeout_s:.0f} s")


def rows(
    endpoint: str,
    records: list[bytes],
    model,
    clients: list[int],
    instances: list[int],
    duration_s: float,
    label: str = "",
) -> list[dict]:
    """One row per (instances, clients) against `endpoint`, each beside the in-process
    ceiling for the same batch size."""
    out = []
    for n in instances:
        batch = (records * (n // max(1, len(records)) + 1))[:n]
        ceiling = in_process(model, batch, duration_s, os.cpu_count() or 1) if model else None
        for c in clients:
            r = load(endpoint, body_of(batch), c, duration_s)
            r.update(
                server=label,
                clients=c,
                instances=n,
                instances_per_s=r["requests_per_s"] * n,
                ceiling_instances_per_s=ceiling * n if ceiling else None,
            )
            out.append(r)
            print(format_row(r), flush=True)
    return out


def format_row(r: dict) -> str:
    ratio = (
        f"{r['instances_per_s'] / r['ceiling_instances_per_s']:6.2f}x ceiling"
        if r.get("ceiling_instances_per_s")
        else ""
    )
    ceiling = (
        f"{r['ceiling_instances_per_s']:>11,.0f}" if r.get("ceiling_instances_per_s") else " " * 11
    )
    return (
        f"{r['server']:<26} {r['instances']:>4} inst {r['clients']:>3} clients "
        f"{r['requests_per_s']:>9,.0f} req/s {r['instances_per_s']:>10,.0f} inst/s "
        f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
        f"ceiling {ceiling} inst/s {ratio}  errors {r['errors']}"
    )


def read_records(pattern: str | None, n: int = 100) -> list[bytes]:
    import tensorflow as tf

    if not pattern:
        return [tf.train.Example().SerializeToString()]
    files = sorted(tf.io.gfile.glob(pattern))
    return [r.numpy() for r in tf.data.TFRecordDataset(files).take(n)]


def main(argv: list[str]) -> int:
    del argv
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    model = tf.saved_model.load(FLAGS.model_dir) if FLAGS.model_dir else None
    records = read_records(FLAGS.examples)
    clients = [int(c) for c in FLAGS.clients]
    instances = [int(n) for n in FLAGS.instances]
    results = []
    if FLAGS.endpoint:
        results += rows(
            FLAGS.endpoint, records, model, clients, instances, FLAGS.duration_s, "endpoint"
        )
    else:
        starts = [
            (settings, lambda s=settings: start_server(FLAGS.model_dir, s))
            for settings in FLAGS.server
        ]
        if FLAGS.cpr:
            starts.append(("CPR (SDK server)", lambda: start_cpr(FLAGS.model_dir)))
        for label, start in starts:
            proc, endpoint = start()
            try:
                results += rows(
                    endpoint, records, model, clients, instances, FLAGS.duration_s, label
                )
            finally:
                proc.terminate()
                proc.wait()
    os.makedirs(os.path.dirname(FLAGS.output) or ".", exist_ok=True)
    with open(FLAGS.output, "w") as f:
        json.dump(
            {
                "rows": results,
                "cores": os.cpu_count(),
                "tensorflow": tf.__version__,
                "date": time.strftime("%Y-%m-%d"),
            },
            f,
            indent=2,
        )
    best = max(results, key=lambda r: r["instances_per_s"])
    print(
        f"best: {best['server']}, {best['instances']} instances x {best['clients']} "
        f"clients: {best['instances_per_s']:,.0f} instances/s "
        f"(median p50 over rows {statistics.median(r['p50_ms'] for r in results):.2f} ms)"
    )
    return 0


if __name__ == "__main__":
    flags.mark_flag_as_required("model_dir")
    app.run(main)
