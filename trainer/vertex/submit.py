"""Submission: stage the package, create the job, report where to watch it.

The clients are passed in (google-cloud-storage and aiplatform_v1's JobServiceClient),
so tests use a local storage emulator and a fake job service.
"""

from __future__ import annotations

import logging
import time

from google.cloud import aiplatform_v1 as v1

from trainer.base import storage as storage_lib
from trainer.vertex import jobs, staging

TERMINAL = {
    v1.JobState.JOB_STATE_SUCCEEDED,
    v1.JobState.JOB_STATE_FAILED,
    v1.JobState.JOB_STATE_CANCELLED,
    v1.JobState.JOB_STATE_EXPIRED,
}


def train_data_flag(trainer_args) -> str | None:
    """The --train_data value among the trainer's flags, if given."""
    for arg in trainer_args:
        if arg.startswith("--train_data="):
            return storage_lib.canonical(arg.split("=", 1)[1])
    return None


def console_link(name: str, project: str) -> str:
    """Cloud console page of a job resource name projects/P/locations/R/<kind>/ID."""
    parts = name.split("/")
    region, kind, job_id = parts[3], parts[4], parts[5]
    page = "training" if kind == "customJobs" else "training/hyperparameter-tuning-jobs"
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{region}/{page}/"
        f"{job_id}?project={project}"
    )


def submit(spec: jobs.JobSpec, job, sdist: str | None, storage_client, job_client) -> str:
    """Checks the data, uploads the sdist to spec.package_uri (if the job installs one),
    creates `job`.

    Returns:
      The job's resource name.
    """
    data = train_data_flag(spec.trainer_args)
    if data and data.startswith("gs://"):
        n = staging.check_data(storage_client, data)
        logging.info("--train_data matches %d object(s)", n)
    if spec.package_uri:
        assert sdist, "a job that installs a package is given its sdist"
        staging.upload(storage_client, sdist, spec.package_uri.rsplit("/", 1)[0])
    if isinstance(job, v1.HyperparameterTuningJob):
        created = job_client.create_hyperparameter_tuning_job(
            parent=spec.parent, hyperparameter_tuning_job=job
        )
    else:
        created = job_client.create_custom_job(parent=spec.parent, custom_job=job)
    return created.name


def stream(job_client, name: str, poll_s: float = 30.0, clock=time.sleep) -> int:
    """Logs the job's state until it ends; returns 0 if it succeeded, 1 otherwise."""
    get = (
        job_client.get_hyperparameter_tuning_job
        if "/hyperparameterTuningJobs/" in name
        else job_client.get_custom_job
    )
    last = None
    while True:
        job = get(name=name)
        if job.state != last:
            logging.info("%s: %s", name, job.state.name)
            last = job.state
        if job.state in TERMINAL:
            if job.state != v1.JobState.JOB_STATE_SUCCEEDED and job.error.message:
                logging.error("%s", job.error.message)
            return 0 if job.state == v1.JobState.JOB_STATE_SUCCEEDED else 1
        clock(poll_s)
