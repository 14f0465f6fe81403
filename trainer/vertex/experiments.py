"""Vertex AI Experiments at submission: the experiment and run a job logs to exist
before it starts (trainer.train.experiment logs to them from inside the job)."""

from __future__ import annotations

import logging
from typing import Any

from trainer.vertex import jobs


def ensure_run(spec: jobs.JobSpec, sdk: Any = None) -> None:
    """Creates the spec's experiment, and its run, where missing.

    Args:
      sdk: `google.cloud.aiplatform` (tests pass a stand-in: the boundary with Google).

    Raises:
      jobs.JobError: naming the experiment or run the service refused.
    """
    if not spec.experiment:
        return
    if sdk is None:
        from google.cloud import aiplatform as sdk
    where = {"project": spec.project, "location": spec.region}
    try:
        sdk.Experiment.get_or_create(spec.experiment, **where)
        if (
            spec.experiment_run
            and sdk.ExperimentRun.get(spec.experiment_run, experiment=spec.experiment, **where)
            is None
        ):
            sdk.ExperimentRun.create(spec.experiment_run, experiment=spec.experiment, **where)
            logging.info("created run %r of experiment %r", spec.experiment_run, spec.experiment)
    except Exception as e:  # noqa: BLE001  # the SDK's errors are many; one line names the run
        what = f"run {spec.experiment_run!r} of " if spec.experiment_run else ""
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise jobs.JobError(
            f"--experiment: cannot create {what}experiment {spec.experiment!r}: {first}"
        ) from None
