"""Storage retries: transient errors retried with backoff and logged, the rest one line."""

from __future__ import annotations

import errno
import logging

import pytest
import tensorflow as tf

from trainer.base import retry
from trainer.base import storage as storage_lib


def flaky(failures: list[Exception], result="done"):
    """A call that raises `failures` in turn, then returns `result`."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return result

    return fn, calls


def unavailable(text: str = "503 Service Unavailable") -> Exception:
    return tf.errors.UnavailableError(None, None, text)


def test_transient_errors_are_retried_with_backoff_and_logged(caplog):
    fn, calls = flaky([unavailable(), tf.errors.DeadlineExceededError(None, None, "timeout")])
    sleeps: list[float] = []
    with caplog.at_level(logging.WARNING):
        assert retry.call("saving x", fn, sleep=sleeps.append) == "done"
    assert (len(calls), sleeps) == (3, [1.0, 2.0])
    assert "saving x failed (503 Service Unavailable); retrying in 1 s (attempt 2 of 5)" in (
        caplog.text
    )


def test_an_outage_longer_than_the_retries_is_one_line():
    fn, calls = flaky([unavailable("429 Too Many Requests\nmore")] * 9)
    sleeps: list[float] = []
    with pytest.raises(storage_lib.StorageError) as e:
        retry.call("saving x", fn, sleep=sleeps.append)
    assert str(e.value) == "saving x: 429 Too Many Requests (after 5 attempts)"
    assert (len(calls), sleeps) == (5, [1.0, 2.0, 4.0, 8.0])


@pytest.mark.parametrize(
    "error, line",
    [
        (
            tf.errors.ResourceExhaustedError(None, None, "No space left on device"),
            "saving x: No space left on device",
        ),
        (tf.errors.PermissionDeniedError(None, None, "403 Forbidden"), "saving x: 403 Forbidden"),
        (OSError(errno.ENOSPC, "No space left on device"), "saving x: [Errno 28] No space left"),
    ],
)
def test_other_failures_are_not_retried_and_are_one_line(error, line):
    fn, calls = flaky([error])
    sleeps: list[float] = []
    with pytest.raises(storage_lib.StorageError) as e:
        retry.call("saving x", fn, sleep=sleeps.append)
    assert str(e.value).startswith(line) and (len(calls), sleeps) == (1, [])


def test_one_attempt_in_a_cluster_still_names_the_failure():
    fn, calls = flaky([unavailable()])
    with pytest.raises(storage_lib.StorageError, match=r"saving x: 503 .*\(after 1 attempt\)"):
        retry.call("saving x", fn, attempts=1, sleep=lambda s: None)
    assert len(calls) == 1
