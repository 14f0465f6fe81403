"""SIGTERM handling: finish the current inner loop, checkpoint, exit for a restart.

Vertex AI sends SIGTERM before it moves a worker for maintenance or a Spot VM is
preempted, and restarts workers that exit non-zero. The handler only sets a flag: the
outer loop sees it between inner loops, all workers agree on it (one all-reduce per
loop), save a checkpoint together and exit with 128 + SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

EXIT_CODE = 128 + signal.SIGTERM


class Preempted(Exception):
    """The job saved a checkpoint after SIGTERM and should exit with EXIT_CODE."""


class StopRequest:
    """Context manager that turns SIGTERM into a flag, restoring the old handler after."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._previous: Any = None  # the handler before ours

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def _handle(self, signum, frame) -> None:
        del frame
        logging.warning("received signal %d: stopping after the current loop", signum)
        self._event.set()

    def __enter__(self) -> StopRequest:
        # Signal handlers can only be installed from the main thread (tests may not be).
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
