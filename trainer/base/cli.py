"""What the command-line entry points (task, serve, prepare, bootstrap) share: how lines
are written, and a user mistake as one line and an exit code, never absl's FATAL lines
or a stack trace.

Log format (`--log_format`): `text` is absl's lines on stderr; `json` is one JSON object
per line on stdout with `severity` and `message`, the form Cloud Logging parses. Vertex
AI marks every stderr line of a custom job as ERROR, so `auto` (the default) is `json`
when the job runs on Vertex (`CLOUD_ML_JOB_ID` is set in every custom job) and `text`
otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from absl import flags

EXIT_USER_ERROR = 2  # flags, data or environment: fix and run again
FORMATS = ("auto", "text", "json")
ON_VERTEX = "CLOUD_ML_JOB_ID"
_SEVERITY = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}
_format = None  # set by use_format; before that, from the environment


def resolve(log_format: str, env=os.environ) -> str:
    """`text` or `json` for a --log_format value."""
    if log_format == "auto":
        return "json" if env.get(ON_VERTEX) else "text"
    return log_format


def json_lines() -> bool:
    return (_format or resolve("auto")) == "json"


class JsonFormatter(logging.Formatter):
    """One Cloud Logging structured entry per record."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return json.dumps(
            {
                "severity": _SEVERITY.get(record.levelno, "DEFAULT"),
                "message": message,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                + f".{int(record.msecs):03d}Z",
                "logging.googleapis.com/sourceLocation": {
                    "file": record.pathname,
                    "line": str(record.lineno),
                    "function": record.funcName,
                },
            }
        )


def use_format(log_format: str) -> str:
    """Sends every log record (absl's, Python warnings, TensorFlow's Python logger) the
    way `log_format` says; returns `text` or `json`."""
    global _format
    _format = resolve(log_format)
    if _format == "json":
        from absl import logging as absl_logging

        root = logging.getLogger()
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(JsonFormatter())
        for old in list(root.handlers):  # absl's handler writes to stderr
            if isinstance(old, absl_logging.ABSLHandler):
                for f in old.filters:
                    handler.addFilter(f)
            root.removeHandler(old)
        root.addHandler(handler)
        logging.captureWarnings(True)
        # TensorFlow's C++ INFO and WARNING lines go to file descriptor 2 on their own.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return _format


def add_filter(f) -> None:
    """Adds a filter to the handler that writes log lines (absl's or ours)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(f)


def say(message: str) -> None:
    """A line for the user outside logging (before it is set up)."""
    if json_lines():
        print(json.dumps({"severity": "INFO", "message": message}), flush=True)
    else:
        print(message, flush=True)


def fail(message: str, code: int = EXIT_USER_ERROR) -> int:
    """Writes `error: MESSAGE` (stderr, or a JSON line of severity ERROR on stdout) and
    returns `code`, for `main` to return."""
    line = f"error: {message}"
    if json_lines():
        print(json.dumps({"severity": "ERROR", "message": line}), flush=True)
    else:
        print(line, file=sys.stderr, flush=True)
    return code


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parser, with its errors (unknown flag, bad enum value, missing required
    flag) as one line and exit code 2 like every other bad flag, and --help (which absl
    ends with exit code 1) ending with 0."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        sys.exit(fail(str(e)))
    except SystemExit as e:
        if e.code == 1 and any(a in ("--help", "-h", "--helpshort", "--helpfull") for a in argv):
            sys.exit(0)
        raise
