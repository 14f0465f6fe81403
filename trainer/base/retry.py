"""Storage calls retried when they fail for a moment, and one line when they do not.

Cloud Storage answers 429 (too many requests) and 503 (backend unavailable) from time to
time; TensorFlow's GCS filesystem retries a request a few times itself and then raises
UnavailableError (as it does for 5xx and timeouts). A job of hours should not die of a
minute's outage: the calls that write checkpoints and exports, and read and write the
job's files, go through `call`, which retries those errors with exponential backoff
(1, 2, 4, 8 s) and logs each retry. Any other failure, or the last attempt's, becomes a
StorageError of one line naming what was being done: the caller's earlier checkpoints
and exports are left as they were (each is written whole or not at all).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from trainer.base import storage as storage_lib

T = TypeVar("T")
ATTEMPTS = 5
BASE_DELAY_S = 1.0


def _transient() -> tuple[type[BaseException], ...]:
    import tensorflow as tf

    return (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError)


def call(what: str, fn: Callable[[], T], *, attempts: int = ATTEMPTS, sleep=time.sleep) -> T:
    """`fn()`, retried on transient storage errors.

    Args:
      what: what `fn` does, for the log and the error ("saving checkpoint 300 to gs://...").

    Raises:
      storage.StorageError: naming `what`, when `fn` fails with another TensorFlow
        error (a full disk, a permission) or keeps failing.
    """
    import tensorflow as tf

    transient = _transient()
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except transient as e:
            if attempt == attempts:
                raise storage_lib.StorageError(
                    f"{what}: {storage_lib.first_line(e)} "
                    f"(after {attempts} attempt{'s' if attempts > 1 else ''})"
                ) from None
            delay = BASE_DELAY_S * 2 ** (attempt - 1)
            logging.warning(
                "%s failed (%s); retrying in %.0f s (attempt %d of %d)",
                what,
                storage_lib.first_line(e),
                delay,
                attempt + 1,
                attempts,
            )
            sleep(delay)
        except (tf.errors.OpError, OSError) as e:  # a full disk, a permission: for good
            raise storage_lib.StorageError(f"{what}: {storage_lib.first_line(e)}") from None
    raise AssertionError("unreachable")  # the loop returns or raises
