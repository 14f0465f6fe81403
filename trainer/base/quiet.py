"""Silence for TensorFlow's C++ start-up lines (oneDNN, CUDA probes), which it writes to
file descriptor 2 before its own log level applies: not for a reader of predictions or
a server's log. Standard library only: used before TensorFlow is imported."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile


@contextlib.contextmanager
def quiet_stderr():
    """Hides what native code prints to stderr inside the block; shows it after all if
    the block fails, so an import error keeps its explanation."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
