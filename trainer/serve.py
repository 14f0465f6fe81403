"""Entry point of the serving image: `python -m trainer.serve --model_dir=DIR --port=PORT`.

Serves an export of `trainer.task` over HTTP with Vertex AI's custom-container contract
(see trainer/server.py). On Vertex, every default comes from the variables it sets:
`AIP_STORAGE_URI` (the model's copy), `AIP_HTTP_PORT`, `AIP_HEALTH_ROUTE`,
`AIP_PREDICT_ROUTE`; locally the routes are /health and /predict on 127.0.0.1.
A bad flag is one line and exit code 2; a model that does not load, one line and exit 1.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from absl import app, flags

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.base.cli import fail as _fail
from trainer.base.cli import parse_flags
from trainer.serving import server as server_lib

# TensorFlow's C++ start-up lines are not for a server's log; warnings still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

F = flags.FLAGS
flags.DEFINE_string(
    "model_dir",
    None,
    f"Export folder ({contracts.SAVED_MODEL} at its root), local or gs://. Default: "
    "$AIP_STORAGE_URI.",
)
flags.DEFINE_integer("port", None, f"Port. Default: $AIP_HTTP_PORT, else {contracts.HTTP_PORT}.")
flags.DEFINE_string(
    "host",
    None,
    "Address to listen on. Default: 0.0.0.0 on Vertex (AIP_HTTP_PORT set), else 127.0.0.1.",
)
flags.DEFINE_string(
    "health_route", None, f"Default: $AIP_HEALTH_ROUTE, else {contracts.HEALTH_ROUTE}."
)
flags.DEFINE_string(
    "predict_route", None, f"Default: $AIP_PREDICT_ROUTE, else {contracts.PREDICT_ROUTE}."
)
flags.DEFINE_integer(
    "max_body_bytes",
    server_lib.MAX_BODY_BYTES,
    "Larger bodies get 413 (Vertex's own limit on shared public endpoints is 1.5 MB).",
)
# Defaults chosen by benchmarks/serving.py on 2 cores (docs/guide/serving.md): one
# process per core with one TensorFlow thread each answered 1.9x the requests/s of one
# process (1-instance bodies, 8 clients) and cut p99 at 64 clients from 914 to 113 ms.
flags.DEFINE_integer(
    "processes", 0, "Server processes on the one port, each with the model; 0: one per core."
)
flags.DEFINE_integer(
    "tf_threads",
    0,
    "TensorFlow's threads per process, within one op "
    "(intra-op) and across ops (inter-op); 0: the cores shared out among "
    "the processes.",
)
flags.DEFINE_float(
    "client_timeout_s",
    server_lib.SOCKET_TIMEOUT_S,
    "A client silent this long, mid-request or idle between requests, is disconnected.",
)
flags.DEFINE_integer(
    "max_connections",
    server_lib.MAX_CONNECTIONS,
    "Connections served at once per process (a thread each); past it, 503 and closed.",
)
flags.DEFINE_string("fake_gcs_root", None, "Serve every gs://BUCKET/PATH from DIR/BUCKET/PATH.")


def make_config(env: dict) -> server_lib.ServerConfig:
    """The server's settings from the flags, with Vertex's variables as defaults.

    Raises:
      ValueError: naming the flag or variable at fault.
    """
    model_dir = F.model_dir or env.get("AIP_STORAGE_URI")
    if not model_dir:
        raise ValueError("--model_dir is required (or $AIP_STORAGE_URI, which Vertex sets)")
    path = storage_lib.Storage(F.fake_gcs_root).path(model_dir)
    if not storage_lib.is_gcs(path) and not os.path.isfile(
        os.path.join(path, contracts.SAVED_MODEL)
    ):
        raise ValueError(f"--model_dir={model_dir}: no {contracts.SAVED_MODEL} in {path}")
    port = F.port if F.port is not None else env.get("AIP_HTTP_PORT", str(contracts.HTTP_PORT))
    if not str(port).isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"port {port!r} (--port or $AIP_HTTP_PORT): expected 0-65535")
    routes = {}
    for name, var, default in (
        ("health_route", "AIP_HEALTH_ROUTE", contracts.HEALTH_ROUTE),
        ("predict_route", "AIP_PREDICT_ROUTE", contracts.PREDICT_ROUTE),
    ):
        routes[name] = F[name].value or env.get(var) or default
        if not routes[name].startswith("/"):
            raise ValueError(
                f"--{name}={routes[name]!r} (or ${var}): expected a path starting with /"
            )
    if F.max_body_bytes < 1:
        raise ValueError(f"--max_body_bytes={F.max_body_bytes}: expected 1 or more")
    if F.tf_threads < 0:
        raise ValueError(f"--tf_threads={F.tf_threads}: expected 0 or more")
    if F.processes < 0:
        raise ValueError(f"--processes={F.processes}: expected 0 (one per core) or more")
    if not F.client_timeout_s > 0:
        raise ValueError(f"--client_timeout_s={F.client_timeout_s}: expected more than 0")
    if F.max_connections < 1:
        raise ValueError(f"--max_connections={F.max_connections}: expected 1 or more")
    host = F.host or ("0.0.0.0" if env.get("AIP_HTTP_PORT") else "127.0.0.1")
    return server_lib.ServerConfig(
        model_dir=path,
        host=host,
        port=int(port),
        max_body_bytes=F.max_body_bytes,
        processes=F.processes or os.cpu_count() or 1,
        client_timeout_s=F.client_timeout_s,
        max_connections=F.max_connections,
        **routes,
    )


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        return _fail(f"unexpected arguments {argv[1:]}: every option is a --flag")
    # Progress to stdout, problems to stderr: Cloud Logging marks every stderr line ERROR.
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    logging.basicConfig(level=logging.INFO, format="%(message)s", handlers=[out, err], force=True)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    try:
        config = make_config(dict(os.environ))
    except (ValueError, storage_lib.StorageError) as e:
        return _fail(str(e))
    threads = F.tf_threads or max(1, (os.cpu_count() or 1) // config.processes)
    # Read by TensorFlow's runtime when it starts, which is after this (in the loader).
    os.environ["TF_NUM_INTRAOP_THREADS"] = str(threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = str(threads)
    # Vertex stops a container with SIGTERM: unwind, so worker processes are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        error = server_lib.serve(config)
    except OSError as e:
        return _fail(f"cannot listen on {config.host}:{config.port}: {e.strerror or e}")
    if error:
        return _fail(error, code=1)
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
