"""What each step of the Vertex AI pipeline does (trainer.vertex.pipeline wraps each in a
KFP component): plain functions of JSON-able values, so they run, and are tested, with
or without KFP.

    prepare   tables (files or BigQuery) to TFRecords: trainer.prepare
    train     trainer.task on those records: here (a local run) or as our CustomJob
    register  the export into the Model Registry, a new version of --parent_model, with
              its evaluation imported
    deploy    the registered version onto an endpoint, all traffic
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from typing import Any

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.vertex import jobs, models


class StepError(RuntimeError):
    """A step that failed; the message names it and why (the pipeline's UI shows it)."""


def data_flags(data: str) -> list[str]:
    """trainer.task's data flags for trainer.prepare's output folder."""
    return [f"--{split}_data={data.rstrip('/')}/{split}-*" for split in contracts.SPLITS]


def _run(step: str, args: list[str]) -> None:
    """Runs `python -m trainer.<module> ARGS`; its log is the step's log."""
    proc = subprocess.run([sys.executable, "-m", *args], check=False)
    if proc.returncode:
        raise StepError(f"{step}: {args[0]} exited with {proc.returncode} (its log is above)")


def prepare(
    output: str,
    label: str,
    input: str = "",
    bigquery_table: str = "",
    split: str = "random:0.8,0.1,0.1",
    fake_gcs_root: str = "",
) -> str:
    """Converts the table to TFRecords under `output`; returns `output`."""
    args = ["trainer.prepare", f"--output={output}", f"--label={label}", f"--split={split}"]
    args += [f"--input={input}"] if input else [f"--bigquery_table={bigquery_table}"]
    if fake_gcs_root:
        args.append(f"--fake_gcs_root={fake_gcs_root}")
    _run("prepare", args)
    return output


def train_here(data: str, job_dir: str, trainer_args: list[str], fake_gcs_root: str = "") -> str:
    """trainer.task in this process's environment on the prepared records; returns the
    export's folder."""
    args = ["trainer.task", *data_flags(data), f"--job_dir={job_dir}", *trainer_args]
    if fake_gcs_root:
        args.append(f"--fake_gcs_root={fake_gcs_root}")
    _run("train", args)
    return storage_lib.join(job_dir, "model")


def to_json(spec: Any) -> dict[str, Any]:
    """A JobSpec or DeploySpec as a pipeline parameter: JSON, unset fields left out
    (a pipeline parameter cannot be null; they take their defaults back)."""
    values = json.loads(json.dumps(dataclasses.asdict(spec)))
    return {k: v for k, v in values.items() if v is not None}


def job_spec_from_json(values: dict[str, Any], data: str) -> jobs.JobSpec:
    """The JobSpec back from `to_json`, its trainer reading the records in `data`."""
    return jobs.JobSpec(
        **{
            "package_uri": None,  # the image's own code (the only field with no default)
            **values,
            "trainer_args": (*data_flags(data), *values["trainer_args"]),
            "labels": tuple(tuple(pair) for pair in values["labels"]),
        }
    )


def train_on_vertex(
    job: dict[str, Any], data: str, job_client: Any = None, experiments_sdk: Any = None
) -> str:
    """Runs the job (our CustomJob: scheduling, experiment and all) until it ends;
    returns the export's folder.

    Args:
      job: `to_json` of the job, as trainer-submit would build it.
      job_client, experiments_sdk: an aiplatform_v1 JobServiceClient and
        google.cloud.aiplatform (tests pass stand-ins).
    """
    from trainer.vertex import experiments, submit

    spec = job_spec_from_json(job, data)
    if job_client is None:
        from google.cloud import aiplatform_v1

        job_client = aiplatform_v1.JobServiceClient(
            client_options={"api_endpoint": f"{spec.region}-aiplatform.googleapis.com"}
        )
    experiments.ensure_run(spec, experiments_sdk)
    created = job_client.create_custom_job(parent=spec.parent, custom_job=jobs.custom_job(spec))
    logging.info("created %s", created.name)
    if submit.stream(job_client, created.name):
        raise StepError(f"train: {created.name} did not succeed")
    return storage_lib.join(spec.job_dir, "model")


def _deploy_spec(values: dict[str, Any], model_dir: str) -> models.DeploySpec:
    return models.DeploySpec(
        **{
            **values,
            "model_dir": model_dir,
            "labels": tuple(tuple(pair) for pair in values["labels"]),
        }
    )


def register(deploy: dict[str, Any], model_dir: str, model_client: Any = None, storage=None) -> str:
    """Uploads the export (a new version of the spec's parent model, if any) and imports
    its evaluation; returns the model version's resource name."""
    from trainer.vertex import deploy as deploy_lib

    spec = _deploy_spec(deploy, model_dir)
    export = deploy_lib.prepare(spec, storage or storage_lib.Storage())
    if model_client is None:
        model_client = deploy_lib.clients(spec.region)[0]
    name, _ = deploy_lib.register(spec, export, model_client)
    return name


def deploy(deploy: dict[str, Any], model_name: str, endpoint_client: Any = None) -> str:
    """Deploys the registered version to the spec's endpoint; returns the endpoint."""
    from trainer.vertex import deploy as deploy_lib

    spec = _deploy_spec(deploy, deploy["model_dir"])
    if endpoint_client is None:
        endpoint_client = deploy_lib.clients(spec.region)[1]
    return deploy_lib.deploy(spec, model_name, endpoint_client)
