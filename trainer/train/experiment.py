"""Logs the job's plan and final metrics to its Vertex AI Experiments run.

A job submitted with `trainer-submit --experiment=E --experiment_run=R` has both set on
its CustomJob; Vertex then names them to the job in AIP_EXPERIMENT_NAME and
AIP_EXPERIMENT_RUN_NAME (resource names or plain names; the SDK reads the same two), and
the chief logs through the Vertex AI SDK (google-cloud-aiplatform, in the package's
training image). The model is exported before this runs: a failure to log is a warning,
never a failed job.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

EXPERIMENT_ENV = "AIP_EXPERIMENT_NAME"
RUN_ENV = "AIP_EXPERIMENT_RUN_NAME"
_RESOURCE = re.compile(r"projects/([^/]+)/locations/([^/]+)/metadataStores/[^/]+/contexts/(.+)")


def target(env: Mapping[str, str]) -> tuple[str, str, dict[str, str]] | None:
    """(experiment, run, SDK init arguments) named by the environment, or None when the
    job has no run to log to."""
    experiment, run = env.get(EXPERIMENT_ENV), env.get(RUN_ENV)
    if not experiment or not run:
        return None
    where: dict[str, str] = {}
    m = _RESOURCE.fullmatch(experiment)
    if m:
        where = {"project": m[1], "location": m[2]}
        experiment = m[3]
    m = _RESOURCE.fullmatch(run)
    run = m[3] if m else run
    # A run's context is named <experiment>-<run>.
    run = run.removeprefix(f"{experiment}-")
    return experiment, run, where


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys; numbers and strings as they are, None
    dropped, anything else as JSON (Experiments takes numbers and strings only)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, bool):
            flat[name] = str(value).lower()
        elif isinstance(value, (int, float, str)):
            flat[name] = value
        elif value is not None:
            flat[name] = json.dumps(value, sort_keys=True)
    return flat


def log(env: Mapping[str, str], params: Mapping, metrics: Mapping, sdk: Any = None) -> bool:
    """Logs `params` (the plan) and the numbers of `metrics` (metrics.json) to the run
    the environment names. Returns whether it did.

    Args:
      sdk: `google.cloud.aiplatform` (tests pass a stand-in: the boundary with Google).
    """
    found = target(env)
    if found is None:
        return False
    experiment, run, where = found
    try:
        if sdk is None:
            from google.cloud import aiplatform as sdk
        sdk.init(experiment=experiment, **where)
        try:
            sdk.start_run(run, resume=True)
        except Exception:  # noqa: BLE001  # the submitter creates the run; a job run without it creates it
            sdk.start_run(run)
        flat = flatten(params)
        sdk.log_params(flat)
        numbers = {k: v for k, v in flatten(metrics).items() if isinstance(v, (int, float))}
        sdk.log_metrics(numbers)
        sdk.end_run()
    except Exception as e:  # noqa: BLE001  # the model is exported; the run is a report of it
        logging.warning(
            "could not log to Vertex AI Experiments run %r of %r: %s",
            run,
            experiment,
            str(e).splitlines()[0] if str(e) else type(e).__name__,
        )
        return False
    logging.info(
        "logged %d parameters and %d metrics to Vertex AI Experiments run %r of %r",
        len(flat),
        len(numbers),
        run,
        experiment,
    )
    return True
