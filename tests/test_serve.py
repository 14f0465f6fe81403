"""trainer.serve: the serving image's server, as real processes on loopback.

Vertex's contract (AIP_* variables, health 503 until loaded), the same predictions as the
model called in-process for every task and both signatures, and the fault list: each bad
request answered in one line, good requests answered after 1,000 bad ones, no leak.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from test_predict import predict, records_with_a_missing_feature

from conftest import BUCKET, REPO, TASKS, data_globs, read_records, run_python, subprocess_env

TOLERANCE = 1e-6  # server against the model called in-process
# RSS growth allowed over 1,000 bad requests: Python's allocator keeps freed arenas, so
# a few MB come and go; a leak of one error's tensors per request would be far above it.
LEAK_BOUND_MB = 25


class Server:
    """`python -m trainer.serve` in a child process; the port is the one it reports."""

    def __init__(self, *flags: str, **env: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainer.serve", *flags],
            cwd=REPO,
            env=subprocess_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line + self.proc.stderr.read()[-2000:]
        self.port = int(line.split()[2].split(":")[1])
        self.health_statuses: list[int] = []

    def wait_ready(self, route: str = "/health", timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read()[-2000:]
            status, _ = self.request("GET", route)
            self.health_statuses.append(status)
            if status == 200:
                return
            time.sleep(0.1)
        pytest.fail("the server did not become ready")

    def request(self, method: str, path: str, body=None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            data = body if isinstance(body, bytes) or body is None else json.dumps(body)
            conn.request(method, path, body=data)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb / 1024

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def servers(exported) -> dict[str, Server]:
    """task -> a ready server of its export. The binary one is configured as Vertex
    configures a container: every setting from AIP_* variables, the model from gs://."""
    gcs_root = exported["binary"].split(f"/{BUCKET}/")[0]
    # One process each (the default is one per core): every request of the leak test
    # reaches the process whose memory is measured.
    binary = Server(
        f"--fake_gcs_root={gcs_root}",
        "--processes=1",
        AIP_HTTP_PORT="0",
        AIP_STORAGE_URI=f"gs://{BUCKET}/jobs/exported-binary/model",
        AIP_HEALTH_ROUTE="/v1/health",
        AIP_PREDICT_ROUTE="/v1/models/m:predict",
    )
    # At once: it listens before TensorFlow has started, which takes seconds.
    binary.health_statuses.append(binary.request("GET", "/v1/health")[0])
    started = {
        task: Server(f"--model_dir={exported[task]}", "--port=0", "--processes=1")
        for task in TASKS
        if task != "binary"
    }
    started["binary"] = binary
    try:
        for task, server in started.items():
            server.wait_ready("/v1/health" if task == "binary" else "/health")
        yield started
    finally:
        for server in started.values():
            server.stop()


def route(task: str) -> str:
    return "/v1/models/m:predict" if task == "binary" else "/predict"


def test_vertex_variables_configure_it_and_health_waits_for_the_model(servers):
    binary = servers["binary"]
    # TensorFlow takes seconds to start: the first health checks came while it loaded.
    assert binary.health_statuses[0] == 503 and binary.health_statuses[-1] == 200
    assert binary.request("GET", "/health")[0] == 404  # the route is AIP_HEALTH_ROUTE's
    status, answer = binary.request("POST", "/predict", {"instances": [1]})
    assert status == 404 and "/v1/models/m:predict" in answer["error"]


def flat(predictions: list) -> tuple[list, np.ndarray]:
    classes, numbers = [], []
    for p in predictions:
        if isinstance(p, dict):
            classes.append(p["predictions"])
            numbers.append(p["probabilities"])
        else:
            numbers.append([p])
    return classes, np.array(numbers, dtype=np.float64)


def in_process(model, name: str, inputs: dict) -> tuple[list, np.ndarray]:
    out = model.signatures[name](**inputs)
    values = out["probabilities"] if "probabilities" in out else out["predictions"][:, None]
    classes = (
        [c.decode() if isinstance(c, bytes) else c for c in out["predictions"].numpy().tolist()]
        if "probabilities" in out
        else []
    )
    return classes, values.numpy().astype(np.float64)


@pytest.mark.parametrize("task", TASKS)
def test_answers_match_the_model_in_process(store, exported, servers, task):
    model = tf.saved_model.load(exported[task])
    records = records_with_a_missing_feature(store, task)
    vertex = predict.vertex_body(records)
    raw = predict.raw_body(records, exported[task], model)
    # Online predict passes on "instances" and "parameters" only; rawPredict any body.
    online_raw = {"instances": raw["instances"], "parameters": {"signature_name": "predict"}}
    expected_examples = in_process(model, "serving_default", {"examples": tf.constant(records)})
    specs = model.signatures["predict"].structured_input_signature[1]
    columns = {
        k: tf.constant([i[k] for i in raw["instances"]], dtype=s.dtype) for k, s in specs.items()
    }
    expected_features = in_process(model, "predict", columns)
    for body, expected in (
        (vertex, expected_examples),
        (raw, expected_features),
        (online_raw, expected_features),
    ):
        status, answer = servers[task].request("POST", route(task), body)
        assert status == 200, answer
        assert answer == predict.answer(json.loads(json.dumps(body)), model)  # = offline
        classes, values = flat(answer["predictions"])
        assert classes == expected[0]
        assert np.max(np.abs(values - expected[1])) <= TOLERANCE


def bad_bodies(records: list[bytes], model_dir: str, model) -> list[tuple[bytes, int, str]]:
    """(body, status, what the one-line error must say) for the fault list."""
    example = predict.vertex_body(records[:1])["instances"][0]
    raw = predict.raw_body(records[:1], model_dir, model)
    unknown = json.loads(json.dumps(raw))
    unknown["instances"][0]["shoe_size"] = 44
    missing = json.loads(json.dumps(raw))
    del missing["instances"][0]["age"]
    wrong_type = json.loads(json.dumps(raw))
    wrong_type["instances"][0]["age"] = "thirty"
    wrong_shape = json.loads(json.dumps(raw))
    wrong_shape["instances"][0]["scores"] = 0.5
    return [
        (b'{"instances": [', 400, "not valid JSON"),
        (b"\xff\xfe", 400, "not valid JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (json.dumps({"rows": [example]}).encode(), 400, 'neither "instances" nor "inputs"'),
        (json.dumps(unknown).encode(), 400, "unknown ['shoe_size']"),
        (json.dumps(missing).encode(), 400, "missing ['age']"),
        (json.dumps(wrong_type).encode(), 400, "instances[0] input 'age': 'thirty' is not"),
        (json.dumps(wrong_shape).encode(), 400, "input 'scores': expected a list of 3"),
        (json.dumps({"instances": [example, {"b64": "%%%"}]}).encode(), 400, "is not valid base64"),
        (
            json.dumps({"instances": [example, {"b64": "AAAA"}]}).encode(),
            400,
            "instances[1]: not a serialized tf.Example",
        ),
        (
            json.dumps({"instances": [example], "parameters": {"signature_name": "x"}}).encode(),
            400,
            "signature_name 'x' is not in the model",
        ),
        (b"x" * 1_500_001, 413, "at most 1,500,000"),
    ]


def test_faults_are_one_line_and_the_server_stays_healthy(store, exported, servers):
    server = servers["multiclass"]
    records = read_records(store, data_globs("multiclass")[1], 4)
    good = predict.vertex_body(records)
    status, expected = server.request("POST", "/predict", good)
    assert status == 200
    faults = bad_bodies(
        records, exported["multiclass"], tf.saved_model.load(exported["multiclass"])
    )
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)

    def send(body: bytes) -> tuple[int, dict]:
        nonlocal conn
        conn.request("POST", "/predict", body=body)
        response = conn.getresponse()
        answer = json.loads(response.read())
        if response.getheader("Connection") == "close":
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        return response.status, answer

    for body, want_status, fragment in faults:
        status, answer = send(body)
        assert (status, fragment in answer.get("error", "")) == (want_status, True), answer
        assert "\n" not in answer["error"]
    # A request without a length, and clients that go away mid-request.
    assert raw_exchange(server.port, b"POST /predict HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
        b"HTTP/1.1 411"
    )
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(
                b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
                b'{"instances": ['
            )
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(b"POST /predi")
    before = server.rss_mb()
    started = time.monotonic()
    for i in range(1000):
        body, want_status, _ = faults[i % len(faults)]
        assert send(body)[0] == want_status
    took = time.monotonic() - started
    after = server.rss_mb()
    assert send(json.dumps(good).encode()) == (200, expected)
    conn.close()
    assert after - before <= LEAK_BOUND_MB, (before, after)
    print(f"1,000 bad requests in {took:.1f} s; RSS {before:.0f} -> {after:.0f} MB")


def corrupted(record: bytes, seed: int) -> bytes:
    """`record` with a few bytes overwritten: a serialized tf.Example no longer, whose
    parse error carries bytes that are not UTF-8."""
    rng = np.random.default_rng(seed)
    data = bytearray(record)
    for at in rng.integers(0, len(data), 5):
        data[at] = int(rng.integers(0, 256))
    return bytes(data)


def test_corrupted_examples_and_deep_nesting_are_400s_not_500s_or_dropped(store, servers):
    """Two faults fuzzing found (issue 31): TensorFlow's parse error of a corrupted
    Example holds non-UTF-8 bytes and raised UnicodeDecodeError in the handler (500); a
    body of thousands of '[' raised RecursionError in json.loads (connection dropped)."""
    server = servers["multiclass"]
    records = read_records(store, data_globs("multiclass")[1], 4)
    good = predict.vertex_body(records)
    status, expected = server.request("POST", "/predict", good)
    assert status == 200
    answers = []
    for seed in range(40):
        bad = predict.vertex_body([records[0], corrupted(records[1], seed)])
        answers.append(server.request("POST", "/predict", bad))
    # Some corruptions still parse (a changed value); none may be a server error.
    assert {status for status, _ in answers} <= {200, 400}
    assert any(
        "instances[1]: not a serialized tf.Example" in a.get("error", "") for _, a in answers
    )
    for body in (b"[" * 5000, b'{"instances": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        status, answer = server.request("POST", "/predict", body)
        assert status == 400 and "nests deeper" in answer["error"], answer
    assert server.request("POST", "/predict", good) == (200, expected)


def started(exported, *flags: str):
    server = Server(f"--model_dir={exported['regression']}", "--port=0", "--processes=1", *flags)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def strict_server(exported) -> Server:
    """A server that drops a client silent for 1 s."""
    yield from started(exported, "--client_timeout_s=1")


@pytest.fixture(scope="module")
def capped_server(exported) -> Server:
    """A server that serves 40 connections at most."""
    yield from started(exported, "--max_connections=40")


def closed_after(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closes `sock` (recv returns b"", or the connection is
    reset), at most `limit`."""
    started = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_a_stalled_client_is_dropped_after_the_timeout(store, strict_server):
    body = json.dumps(predict.vertex_body(read_records(store, data_globs("regression")[1], 1)))
    with (
        socket.create_connection(("127.0.0.1", strict_server.port)) as mid_body,
        socket.create_connection(("127.0.0.1", strict_server.port)) as idle,
    ):
        mid_body.sendall(
            b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
            + body.encode()[:50]
        )
        # Meanwhile the server answers others.
        assert strict_server.request("POST", "/predict", json.loads(body))[0] == 200
        assert 0.5 <= closed_after(mid_body, 10) <= 5
        assert closed_after(idle, 10) <= 5  # idle between requests: the same timeout


def test_connections_past_the_cap_get_a_503_line_and_the_server_recovers(store, capped_server):
    body = predict.vertex_body(read_records(store, data_globs("regression")[1], 1))
    idle = [socket.create_connection(("127.0.0.1", capped_server.port)) for _ in range(40)]
    try:
        time.sleep(0.2)  # accepted, each with its thread
        # The 503 is written as the connection is accepted, before any request is read:
        # read it without sending (a request sent after the server closed its side
        # would fail to send, which on a loaded machine raced the answer).
        with socket.create_connection(("127.0.0.1", capped_server.port), timeout=10) as s:
            answer = b"".join(iter(lambda: s.recv(65536), b""))
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[0].split()[1] == b"503", head
        assert json.loads(payload) == {"error": "the server has too many connections; retry later"}
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 10
    while capped_server.request("POST", "/predict", body)[0] != 200:
        assert time.monotonic() < deadline, "connections were not freed"
        time.sleep(0.1)


def test_500_idle_connections_do_not_delay_a_good_request(store, servers):
    server = servers["regression"]
    body = predict.vertex_body(read_records(store, data_globs("regression")[1], 1))
    assert server.request("POST", "/predict", body)[0] == 200
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(500)]
    try:
        time.sleep(0.5)
        started = time.monotonic()
        status, _ = server.request("POST", "/predict", body)
        took = time.monotonic() - started
    finally:
        for s in idle:
            s.close()
    assert status == 200 and took <= 1.0, took
    print(f"a request beside 500 idle connections: {took * 1000:.0f} ms")


SOAK_S = float(os.environ.get("TRAINER_SOAK_S", "60"))
SOAK_CLIENTS = 64  # the highest concurrency of benchmarks/serving.py
SOAK_RSS_BOUND_MB = 50


def test_a_soak_at_the_highest_concurrency_ends_without_errors_or_growth(store, servers):
    import concurrent.futures

    server = servers["regression"]
    body = json.dumps(predict.vertex_body(read_records(store, data_globs("regression")[1], 4)))

    def client(until: float) -> tuple[int, list[int], list[float]]:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        done, bad, latencies = 0, [], []
        while time.monotonic() < until:
            started = time.monotonic()
            conn.request("POST", "/predict", body=body)
            response = conn.getresponse()
            response.read()
            latencies.append(time.monotonic() - started)
            if response.status != 200:
                bad.append(response.status)
            done += 1
        conn.close()
        return done, bad, latencies

    with concurrent.futures.ThreadPoolExecutor(SOAK_CLIENTS) as pool:
        warm = time.monotonic() + 5
        list(pool.map(client, [warm] * SOAK_CLIENTS))  # threads, TF's pools, allocator
        before = server.rss_mb()
        until = time.monotonic() + SOAK_S
        results = list(pool.map(client, [until] * SOAK_CLIENTS))
    after = server.rss_mb()
    requests = sum(r[0] for r in results)
    errors = [status for r in results for status in r[1]]
    latencies = np.sort([t for r in results for t in r[2]])
    p99 = latencies[int(0.99 * (len(latencies) - 1))] * 1000
    print(
        f"soak: {SOAK_CLIENTS} clients for {SOAK_S:.0f} s, {requests:,} requests "
        f"({requests / SOAK_S:,.0f}/s), p99 {p99:.0f} ms, {len(errors)} errors, "
        f"RSS {before:.0f} -> {after:.0f} MB"
    )
    assert not errors and requests > SOAK_CLIENTS
    assert after - before <= SOAK_RSS_BOUND_MB, (before, after)


def raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        return s.recv(4096)


def test_predict_script_sends_its_bodies_to_the_server(store, exported, servers, tmp_path):
    examples = store.path(data_globs("regression")[1])
    endpoint = f"http://127.0.0.1:{servers['regression'].port}"
    model = tf.saved_model.load(exported["regression"])
    records = read_records(store, data_globs("regression")[1], 3)
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/predict.py",
            f"--model_dir={exported['regression']}",
            f"--examples={examples}",
            "--num=3",
            "--request=raw",
            f"--endpoint={endpoint}",
        ],
        cwd=REPO,
        env={**subprocess_env(), "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    offline = predict.answer(predict.raw_body(records, exported["regression"], model), model)
    assert json.loads(proc.stdout) == offline
    with pytest.raises(predict.BodyError, match=r"/predict answered 400: .*instances"):
        predict.send(endpoint, {"instances": []})
    with pytest.raises(predict.BodyError, match="cannot reach http://127.0.0.1:1/predict"):
        predict.send("http://127.0.0.1:1", {"instances": [1]})


def run_serve(*flags: str) -> subprocess.CompletedProcess:
    return run_python("-m", "trainer.serve", *flags)


@pytest.mark.parametrize(
    "flags, message",
    [
        ((), "error: --model_dir is required (or $AIP_STORAGE_URI, which Vertex sets)"),
        (
            ("--model_dir=/nonexistent",),
            "error: --model_dir=/nonexistent: no saved_model.pb in /nonexistent",
        ),
        (("--model_dir=.", "--port=70000"), None),
        (("--model_dir=.", "--predict_route=predict"), None),
        (("--bogus=1",), "error: Unknown command line flag 'bogus'"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(exported, flags, message):
    flags = tuple(f.replace("--model_dir=.", f"--model_dir={exported['binary']}") for f in flags)
    proc = run_serve(*flags)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    if message:
        assert lines[0] == message


def test_a_model_that_does_not_load_ends_the_server_with_one_line(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"not a SavedModel")
    proc = run_serve(f"--model_dir={tmp_path}", "--port=0")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot load the model in {tmp_path}: "
    ), proc.stderr
    assert os.path.basename(str(tmp_path)) in lines[0]


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_processes_share_the_port_and_stop_together(exported, store):
    server = Server(f"--model_dir={exported['multiclass']}", "--port=0")  # one per core
    assert os.cpu_count() >= 2, "needs two cores to fork a second process"
    try:
        server.wait_ready()
        (child,) = children_of(server.proc.pid)
        body = predict.vertex_body(read_records(store, data_globs("multiclass")[1], 3))
        answers = [server.request("POST", "/predict", body) for _ in range(20)]
        assert all(a == answers[0] for a in answers) and answers[0][0] == 200
    finally:
        server.stop()  # SIGTERM to the parent
    assert server.proc.returncode == 0
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{child}"), "the worker process outlived its parent"
    assert "Traceback" not in server.proc.stderr.read()


def test_a_model_that_does_not_load_in_two_processes_is_still_one_line(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"not a SavedModel")
    proc = run_serve(f"--model_dir={tmp_path}", "--port=0", "--processes=2")
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: cannot load the model in ")
