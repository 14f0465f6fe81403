"""Processes that answer on one listening socket: the server forks its workers after it
binds and before TensorFlow starts (forking a process that runs TensorFlow is unsafe), and
each worker accepts connections on the inherited socket, with a model of its own.

Python spends most of a small request in its own code under the GIL (HTTP, JSON), so
processes, not threads, use more than one core. `Readiness` lets every process's health
check say 200 only once all of them have loaded their model.
"""

from __future__ import annotations

import mmap
import os
import signal
import threading
import time


class Readiness:
    """One byte per process in memory shared across fork: 1 once its model is loaded."""

    def __init__(self, processes: int):
        self._flags = mmap.mmap(-1, processes)
        self.index = 0  # this process's byte

    def set(self) -> None:
        self._flags[self.index] = 1

    def all(self) -> bool:
        return all(self._flags[:])


class Workers:
    """The forked workers of a server process.

    `fork(n)` returns in the parent and in every child; `is_parent` tells which. A child
    exits when its parent is gone; the parent, through `on_child_exit`, learns when a
    child ends (a model that did not load, a crash), and `stop()` ends them all.
    """

    def __init__(self, readiness: Readiness):
        self.readiness = readiness
        self.children: list[int] = []
        self.is_parent = True

    def fork(self, processes: int, on_child_exit) -> None:
        parent = os.getpid()
        for index in range(1, processes):
            pid = os.fork()
            if pid == 0:
                self.is_parent, self.children, self.readiness.index = False, [], index
                threading.Thread(
                    target=self._exit_with, args=(parent,), daemon=True, name="parent-watch"
                ).start()
                return
            self.children.append(pid)
        if self.children:
            threading.Thread(
                target=self._wait_children,
                args=(on_child_exit,),
                daemon=True,
                name="children-watch",
            ).start()

    def stop(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

    @staticmethod
    def _exit_with(parent: int) -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    def _wait_children(self, on_child_exit) -> None:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return
        on_child_exit(self.children.index(pid) + 1, os.waitstatus_to_exitcode(status))
