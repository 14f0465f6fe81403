"""Reports the final metric to Vertex AI hyperparameter tuning, when run as a trial.

Vertex reads trial metrics from a file of JSON lines, the convention of the
`cloudml-hypertune` package; writing it here spares every image that package.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping

DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"


def is_trial(env: Mapping[str, str]) -> bool:
    """Vertex sets CLOUD_ML_TRIAL_ID in the tasks of a hyperparameter tuning trial."""
    return bool(env.get("CLOUD_ML_TRIAL_ID"))


def report(metric: str, metrics: Mapping, env: Mapping[str, str]) -> str | None:
    """Appends the selected model's validation `metric` to the trial's metric file if
    this is a trial.

    Args:
      metrics: metrics.json's content. Tuning looks at validation figures (its
        "validation" part), never at test data; without validation data, the summary
        figures, or the training loss.

    Returns:
      The file written, or None outside a trial.
    """
    if not is_trial(env):
        return None
    chosen = metrics.get("validation") or metrics
    value = chosen.get(metric, metrics.get(f"train_{metric}"))
    if value is None:
        logging.warning("cannot report %s to hyperparameter tuning: no evaluation data", metric)
        return None
    path = env.get("CLOUD_ML_HP_METRIC_FILE", DEFAULT_METRIC_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    entry = {
        "timestamp": time.time(),
        "trial": str(env["CLOUD_ML_TRIAL_ID"]),
        metric: str(float(value)),
        "global_step": str(
            int((metrics.get("selection") or {}).get("step") or metrics.get("step", 0))
        ),
    }
    with open(path, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
    logging.info(
        "reported %s=%s to hyperparameter tuning (trial %s)", metric, entry[metric], entry["trial"]
    )
    return path
