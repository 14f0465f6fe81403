"""A page in headless Chromium, driven over the DevTools protocol: loads it, reports the
requests it made, evaluates JavaScript in it and takes a screenshot."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time

from websockets.sync.client import connect

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1200,900",
    # Anything that tries the network goes to a closed port, and is recorded.
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
]


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Chromium is missing: scripts/test.sh installs it (apt-get install chromium)"
    return found


class Page:
    def __init__(self, url: str, timeout: float = 60) -> None:
        self.profile = tempfile.mkdtemp(prefix="chromium-")
        self.proc = subprocess.Popen(
            [
                browser(),
                *FLAGS,
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while not os.path.exists(port_file) or len(open(port_file).read().split()) < 2:
            assert time.monotonic() < deadline, "Chromium did not start"
            time.sleep(0.1)
        port = open(port_file).read().split()[0]
        self.requests: list[str] = []
        self._id = 0
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            connect(f"ws://127.0.0.1:{port}" + open(port_file).read().split()[1], max_size=None)
        )
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Network.enable", session=True)
        self.call("Page.enable", session=True)
        self.call("Page.navigate", url=url, session=True)
        self._wait("Page.loadEventFired", deadline)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = self._receive()
            if reply.get("id") == self._id:
                assert "error" not in reply, reply
                return reply["result"]

    def evaluate(self, expression: str):
        return self.call(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )["result"]["value"]

    def screenshot(self) -> bytes:
        return base64.b64decode(
            self.call(
                "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True
            )["data"]
        )

    def close(self) -> None:
        self._stack.close()
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _receive(self) -> dict:
        reply = json.loads(self.ws.recv())
        if reply.get("method") == "Network.requestWillBeSent":
            self.requests.append(reply["params"]["request"]["url"])
        return reply

    def _wait(self, event: str, deadline: float) -> None:
        while self._receive().get("method") != event:
            assert time.monotonic() < deadline, f"no {event}"
