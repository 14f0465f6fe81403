"""The serving image's HTTP server: Vertex AI's custom-container contract over an export.

Vertex sends health checks to `AIP_HEALTH_ROUTE` and predict, rawPredict and batch
prediction bodies to `AIP_PREDICT_ROUTE`, on `AIP_HTTP_PORT`. The server listens at once
and loads the model in the background: health answers 503 until the model is loaded and
warmed up, 200 after. A body is answered by `trainer.serving.bodies`, as `trainer.predict
--body` answers it offline. Every error is one JSON line, `{"error": "..."}`: 400 for a
body that cannot be answered (naming the instance or input), 411/413 for a body without a
length or over `max_body_bytes`, 404 for another route, 503 while loading.

Built on the standard library's threading HTTP server: one thread per connection, the
model called concurrently (TensorFlow runs a signature outside the GIL), no dependency
beyond TensorFlow in the serving image.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import logging
import os
import socket
import sys
import threading
import time

from trainer.base import contracts
from trainer.serving import prefork

# The contract the serving image declares to Vertex (trainer/vertex/models.py) and the local
# defaults; on Vertex the AIP_* variables carry them.
# Vertex AI's limit on a request to a shared public endpoint.
MAX_BODY_BYTES = 1_500_000
# A client that stops sending mid-request, or keeps an idle connection open, frees its
# thread after this long (--client_timeout_s).
SOCKET_TIMEOUT_S = 30.0
# Connections served at once (a thread each); past it a new one gets a 503 and is
# closed, so idle keep-alive connections cannot take every thread (--max_connections).
MAX_CONNECTIONS = 1000
_BUSY_BODY = json.dumps({"error": "the server has too many connections; retry later"}).encode()
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
# How long a server whose worker died waits for its own model load to end, to report it.
LOADER_JOIN_S = 300.0
TOO_DEEP = "the body nests deeper than the parser allows"
# A body too large to answer is still read (and dropped) up to this size.
DRAIN_LIMIT_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Where the export is and how the server answers."""

    model_dir: str  # a path TensorFlow can open (gs:// included)
    host: str = "127.0.0.1"
    port: int = contracts.HTTP_PORT
    health_route: str = contracts.HEALTH_ROUTE
    predict_route: str = contracts.PREDICT_ROUTE
    max_body_bytes: int = MAX_BODY_BYTES
    processes: int = 1  # worker processes on the one socket (prefork.py)
    client_timeout_s: float = SOCKET_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS


class ModelSlot:
    """The model, once loaded: `get()` is None until then. Loading happens in a thread so
    the server answers health checks (503) meanwhile; `readiness` tells whether every
    process of the server has its model."""

    def __init__(self, readiness: prefork.Readiness):
        self._model = None
        self.error: str | None = None
        self.readiness = readiness

    def get(self):
        return self._model

    def load(self, model_dir: str) -> None:
        """Loads and warms up the SavedModel; on failure records one line in `error`."""
        from trainer.base.quiet import quiet_stderr

        with quiet_stderr():
            import tensorflow as tf  # here: the server listens before TensorFlow starts

            tf.constant(0)  # the runtime starts (and prints) on the first op

        from trainer.model import arithmetic
        from trainer.serving import bodies

        arithmetic.compile_as_eager()  # as the job and trainer.predict compute

        started = time.monotonic()
        try:
            model = tf.saved_model.load(model_dir)
            if bodies.DEFAULT_SIGNATURE not in model.signatures:
                raise ValueError(
                    f"the SavedModel has no {bodies.DEFAULT_SIGNATURE!r} "
                    "signature; export it with trainer.task"
                )
        except Exception as e:  # noqa: BLE001  any failure ends the server: report it
            lines = (getattr(e, "message", "") or str(e)).strip().splitlines()
            self.error = f"cannot load the model in {model_dir}: " + (
                lines[0] if lines else type(e).__name__
            )
            return
        try:
            # The first call of a signature builds its runtime state: pay it before the
            # first request. An empty batch has nothing to predict but runs the graph.
            model.signatures[bodies.DEFAULT_SIGNATURE](examples=tf.constant([], tf.string))
        except Exception as e:  # noqa: BLE001  a model that needs a real example
            logging.warning(
                "warm-up call failed (%s); the first request pays it instead", type(e).__name__
            )
        self._model = model
        self.readiness.set()
        if self.readiness.index == 0:
            logging.info(
                "model %s loaded in %.1f s; serving", model_dir, time.monotonic() - started
            )


class Handler(http.server.BaseHTTPRequestHandler):
    """One connection; keep-alive (HTTP/1.1), since Vertex's front end reuses them."""

    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        # A silent client (mid-request, or idle between requests) is dropped after this.
        self.connection.settimeout(self.server.config.client_timeout_s)

    def do_GET(self) -> None:
        if self.path != self.server.config.health_route:
            return self._send(
                404, {"error": f"no route {self.path}; health is {self.server.config.health_route}"}
            )
        if self.server.slot.get() is None or not self.server.slot.readiness.all():
            return self._send(503, {"error": "the model is loading"})
        self._send(200, {"status": "ready"})

    def do_POST(self) -> None:
        config = self.server.config
        if self.path != config.predict_route:
            self._discard_body()
            return self._send(
                404, {"error": f"no route {self.path}; predictions are {config.predict_route}"}
            )
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            return self._send(411, {"error": "the request needs a Content-Length header"})
        if int(length) > config.max_body_bytes:
            self._discard_body()
            return self._send(
                413,
                {
                    "error": f"the body has {int(length):,} bytes; at most "
                    f"{config.max_body_bytes:,} are accepted"
                },
            )
        data = self.rfile.read(int(length))
        if len(data) < int(length):
            self.close_connection = True  # the client went away mid-body
            return
        model = self.server.slot.get()
        if model is None:
            return self._send(503, {"error": "the model is loading"})
        from trainer.serving import bodies  # TensorFlow is loaded by now

        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            return self._send(400, {"error": f"the body is not valid JSON: {e}"})
        except RecursionError:  # thousands of '[': json.loads recurses once per level
            return self._send(400, {"error": TOO_DEEP})
        try:
            answer = bodies.answer(body, model)
        except bodies.BodyError as e:
            return self._send(400, {"error": str(e)})
        except RecursionError:  # nested lists just shallow enough for json.loads
            return self._send(400, {"error": TOO_DEEP})
        except Exception as e:  # noqa: BLE001  a server error, still one line
            logging.exception("predict failed")
            return self._send(500, {"error": f"{type(e).__name__}: {e}".splitlines()[0]})
        self._send(200, answer)

    def _discard_body(self) -> None:
        """Reads a body that will not be answered, so the client can read the error
        (closing with unread data would reset the connection under it); a body beyond
        DRAIN_LIMIT_BYTES is not worth reading, and its connection is closed instead."""
        length = self.headers.get("Content-Length", "")
        left = int(length) if length.isdigit() else DRAIN_LIMIT_BYTES + 1
        if left > DRAIN_LIMIT_BYTES:
            self.close_connection = True
            return
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                self.close_connection = True
                return
            left -= len(chunk)

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the base's name)
        """Access lines stay out of the log (one per request would bury it); errors are
        answered to the client, who can act on them."""


class Server(http.server.ThreadingHTTPServer):
    """A thread per connection; `slot` holds the model shared by all of them."""

    daemon_threads = True
    request_queue_size = 256  # connections waiting to be accepted under load

    def __init__(self, config: ServerConfig, slot: ModelSlot):
        self.config = config
        self.slot = slot
        self._open = 0  # connections with a thread
        self._open_lock = threading.Lock()
        super().__init__((config.host, config.port), Handler)

    def process_request(self, request, client_address) -> None:
        """A thread for the connection, unless max_connections have one: then a 503,
        written from the accepting thread, and the connection closed."""
        with self._open_lock:
            busy = self._open >= self.config.max_connections
            self._open += not busy
        if busy:
            with contextlib.suppress(OSError):  # it may be gone already
                request.sendall(BUSY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open -= 1

    def handle_error(self, request, client_address) -> None:
        """A client that went away is no error of the server's; anything else is one
        line, not socketserver's traceback on stderr."""
        kind, error = sys.exc_info()[:2]
        if kind and issubclass(kind, (ConnectionError, TimeoutError)):
            return
        logging.error(
            "connection from %s:%s failed: %s: %s",
            *client_address[:2],
            getattr(kind, "__name__", kind),
            error,
        )

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()


def serve(config: ServerConfig) -> str | None:
    """Listens on config.port with config.processes processes, each loading the model and
    answering, until a model fails to load or the server is stopped (SIGTERM).

    Returns:
      None when stopped; one line if the model could not load or a worker process
      ended. Worker processes never return: they exit.
    """
    readiness = prefork.Readiness(config.processes)
    slot = ModelSlot(readiness)
    server = Server(config, slot)
    logging.info(
        "listening on %s:%d (health %s, predict %s)",
        config.host,
        server.server_address[1],
        config.health_route,
        config.predict_route,
    )
    workers = prefork.Workers(readiness)
    child_error: list[str] = []

    def on_child_exit(index: int, code: int) -> None:
        child_error.append(f"worker process {index} of {config.processes} exited with code {code}")
        threading.Thread(target=server.shutdown, daemon=True).start()

    workers.fork(config.processes, on_child_exit)

    def load_then_check() -> None:
        slot.load(config.model_dir)
        if slot.error:
            server.shutdown()

    loader = threading.Thread(target=load_then_check, daemon=True, name="load-model")
    loader.start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        workers.stop()
        if not workers.is_parent:  # the parent speaks for the server
            os._exit(1 if slot.error else 0)
    if child_error:
        # The loader may still be starting TensorFlow with stderr silenced (quiet.py): a
        # line written now would vanish. Its own error, if any, says more than the
        # child's exit code does.
        loader.join(timeout=LOADER_JOIN_S)
    return slot.error or (child_error[0] if child_error else None)
