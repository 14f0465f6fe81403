"""Deployment: register the export with its evaluation, then serve it online or in batch.

The aiplatform_v1 clients are passed in (ModelService, EndpointService, JobService), so
tests intercept every request at the client boundary.
"""

from __future__ import annotations

import dataclasses
import logging

from google.cloud import aiplatform_v1 as v1

from trainer.vertex import exports, models


@dataclasses.dataclass
class Deployed:
    """Resource names of what was created."""

    model: str
    evaluation: str
    endpoint: str | None = None
    batch_prediction_job: str | None = None


def register(spec: models.DeploySpec, export: exports.Export, model_client) -> tuple[str, str]:
    """Uploads the model (a new version with --parent_model) and imports its evaluation.

    Returns:
      The model's resource name (with its version) and the evaluation's.
    """
    response = model_client.upload_model(request=models.upload_request(spec)).result()
    name = response.model
    if response.model_version_id:
        name = f"{name}@{response.model_version_id}"
    logging.info("registered %s", name)
    evaluation = model_client.import_model_evaluation(
        parent=response.model, model_evaluation=models.evaluation(export)
    )
    logging.info("imported its evaluation %s", evaluation.name)
    return name, evaluation.name


def deploy(spec: models.DeploySpec, model_name: str, endpoint_client) -> str:
    """Deploys the model to --endpoint (created when 'new') with all the traffic.

    Returns:
      The endpoint's resource name.
    """
    if spec.endpoint == "new":
        endpoint = endpoint_client.create_endpoint(
            parent=spec.parent, endpoint=v1.Endpoint(display_name=spec.display_name)
        ).result()
        name = endpoint.name
        logging.info("created endpoint %s", name)
    else:
        assert spec.endpoint  # checked with the flags
        name = spec.resource("endpoints", spec.endpoint)
    # "0" is the model being deployed here: it takes 100% of the endpoint's traffic.
    endpoint_client.deploy_model(
        endpoint=name,
        deployed_model=models.deployed_model(spec, model_name),
        traffic_split={"0": 100},
    ).result()
    logging.info("deployed %s to %s", model_name, name)
    return name


def batch_predict(spec: models.DeploySpec, model_name: str, job_client) -> str:
    job = job_client.create_batch_prediction_job(
        parent=spec.parent, batch_prediction_job=models.batch_prediction_job(spec, model_name)
    )
    logging.info("created batch prediction job %s", job.name)
    return job.name


def run(
    spec: models.DeploySpec,
    export: exports.Export,
    model_client,
    endpoint_client=None,
    job_client=None,
) -> Deployed:
    """Registers the export, then deploys and/or starts batch prediction as `spec` asks."""
    model_name, evaluation = register(spec, export, model_client)
    result = Deployed(model=model_name, evaluation=evaluation)
    if spec.endpoint:
        result.endpoint = deploy(spec, model_name, endpoint_client)
    if spec.batch_input:
        result.batch_prediction_job = batch_predict(spec, model_name, job_client)
    return result


def register_job_model(
    project: str,
    region: str,
    job_dir: str,
    display_name: str,
    labels: tuple[tuple[str, str], ...],
    storage,
    model_client,
) -> tuple[str, str]:
    """After a training job succeeded: registers its export, `<job_dir>/model`, with its
    evaluation, served by the default CPU image (trainer-submit --deploy)."""
    spec = models.DeploySpec(
        project=project,
        region=region,
        model_dir=f"{job_dir.rstrip('/')}/model",
        display_name=display_name,
        labels=labels,
        serving_image=exports.default_image(project, region, gpu=False),
    )
    return register(spec, prepare(spec, storage), model_client)


def prepare(spec: models.DeploySpec, storage) -> exports.Export:
    """Every check that needs no Vertex call: flags, the export, the serving image.

    Raises:
      jobs.JobError, exports.ExportError, storage.StorageError: naming the culprit.
    """
    models.check(spec)
    export = exports.inspect(storage, spec.model_dir)
    warning = exports.check_image(spec.serving_image, export, gpu=bool(spec.accelerator_type))
    if warning:
        logging.warning("%s", warning)
    return export


def clients(region: str):
    """The (model, endpoint, job) service clients of `region`'s API endpoint."""
    options = {"api_endpoint": f"{region}-aiplatform.googleapis.com"}
    return (
        v1.ModelServiceClient(client_options=options),
        v1.EndpointServiceClient(client_options=options),
        v1.JobServiceClient(client_options=options),
    )


def prediction_commands(spec: models.DeploySpec, endpoint: str, examples: str) -> list[str]:
    """Ready-to-run commands: request bodies from TFRecord examples, then the two calls
    (online prediction of serving_default, and rawPredict of the predict signature)."""
    endpoint_id = endpoint.rsplit("/", 1)[1]
    where = f"--model_dir={spec.model_dir} --examples='{examples}'"
    return [
        f"python -m trainer.predict {where} --request=vertex > body.json",
        f"gcloud ai endpoints predict {endpoint_id} --region={spec.region} "
        "--json-request=body.json",
        f"python -m trainer.predict {where} --request=raw > raw.json",
        f"gcloud ai endpoints raw-predict {endpoint_id} --region={spec.region} --request=@raw.json",
    ]
