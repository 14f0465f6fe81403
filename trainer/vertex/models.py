"""Vertex AI serving requests for an export: Model, ModelEvaluation, DeployedModel and
BatchPredictionJob protos.

Pure functions of a `DeploySpec` and an `exports.Export`: nothing here talks to Google
Cloud, so every field can be checked in tests and printed by `--dry_run`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

from google.cloud import aiplatform_v1 as v1

from trainer.base import contracts
from trainer.vertex import exports, images, jobs

EVALUATION_SCHEMA = {
    "classification": contracts.CLASSIFICATION_SCHEMA,
    "regression": contracts.REGRESSION_SCHEMA,
}
# Where a request is not yet known to a dry run: the model the upload will create.
UPLOADED_MODEL = "projects/{project}/locations/{region}/models/UPLOADED_MODEL_ID"


@dataclasses.dataclass(frozen=True)
class DeploySpec:
    """What to register, deploy and predict, and where."""

    project: str
    region: str
    model_dir: str
    display_name: str
    serving_image: str
    parent_model: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    endpoint: str | None = None  # an endpoint ID or resource name, or "new"
    machine_type: str = "n1-standard-2"
    min_replicas: int = 1
    max_replicas: int = 1
    accelerator_type: str | None = None
    accelerator_count: int = 0
    batch_input: str | None = None  # a gs:// glob of TFRecord files
    batch_output: str | None = None  # a gs:// folder

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    def resource(self, kind: str, name: str) -> str:
        """`name` as a full resource name of `kind` (endpoints, models) in this region."""
        if name.startswith("projects/"):
            return name
        return f"{self.parent}/{kind}/{name}"


def check(spec: DeploySpec) -> None:
    """Checks what needs no network; raises jobs.JobError naming the flag."""
    for flag in ("project", "region", "model_dir"):
        if not getattr(spec, flag):
            raise jobs.JobError(f"--{flag} is required")
    if not spec.model_dir.startswith("gs://"):
        raise jobs.JobError(f"--model_dir={spec.model_dir!r}: Vertex needs a gs:// location")
    for flag, kind in (("endpoint", "endpoints"), ("parent_model", "models")):
        value = getattr(spec, flag)
        if not value or value == "new" and flag == "endpoint":
            continue
        m = re.fullmatch(rf"projects/[^/]+/locations/([^/]+)/{kind}/[^/]+", value)
        if value.startswith("projects/") and not m:
            raise jobs.JobError(
                f"--{flag}={value!r}: expected an ID or projects/P/locations/R/{kind}/ID"
            )
        if m and m[1] != spec.region:
            raise jobs.JobError(
                f"--{flag}={value!r} is in region {m[1]}, not --region="
                f"{spec.region}: a model is served in the region it is "
                "registered in"
            )
    if bool(spec.batch_input) != bool(spec.batch_output):
        raise jobs.JobError("--batch_input and --batch_output go together")
    for flag in ("batch_input", "batch_output"):
        value = getattr(spec, flag)
        if value and not value.startswith("gs://"):
            raise jobs.JobError(f"--{flag}={value!r}: batch prediction needs a gs:// location")
    if not 1 <= spec.min_replicas <= spec.max_replicas:
        raise jobs.JobError(
            f"--min_replicas={spec.min_replicas} --max_replicas="
            f"{spec.max_replicas}: expected 1 <= min <= max"
        )
    if spec.accelerator_type and spec.accelerator_type not in v1.AcceleratorType.__members__:
        raise jobs.JobError(
            f"--accelerator_type={spec.accelerator_type!r} is not a Vertex "
            "accelerator (e.g. NVIDIA_TESLA_T4, NVIDIA_L4)"
        )
    if bool(spec.accelerator_type) != (spec.accelerator_count > 0):
        raise jobs.JobError(
            f"--accelerator_type={spec.accelerator_type!r} and "
            f"--accelerator_count={spec.accelerator_count} disagree: give "
            "both, or neither"
        )


def container_spec(image: str) -> v1.ModelContainerSpec:
    """How Vertex runs the serving image: the package's server (any image but Google's
    prebuilt ones, whose TF Serving has its own routes) on its port and routes, which
    Vertex hands back to it as AIP_HTTP_PORT, AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE."""
    if images.prebuilt(image, "prediction"):
        return v1.ModelContainerSpec(image_uri=image)
    return v1.ModelContainerSpec(
        image_uri=image,
        ports=[v1.Port(container_port=contracts.HTTP_PORT)],
        health_route=contracts.HEALTH_ROUTE,
        predict_route=contracts.PREDICT_ROUTE,
    )


def model(spec: DeploySpec) -> v1.Model:
    """The Model Registry entry: the export at `artifact_uri`, served by the image."""
    return v1.Model(
        display_name=spec.display_name,
        artifact_uri=spec.model_dir,
        container_spec=container_spec(spec.serving_image),
        labels=dict(spec.labels),
    )


def upload_request(spec: DeploySpec) -> v1.UploadModelRequest:
    request = v1.UploadModelRequest(parent=spec.parent, model=model(spec))
    if spec.parent_model:
        request.parent_model = spec.resource("models", spec.parent_model)
    return request


def evaluation(export: exports.Export) -> v1.ModelEvaluation:
    """The export's evaluation as a ModelEvaluation: evaluation.json (curves, confusion
    matrix) with feature_importance.json as its modelExplanation, or, for an export
    without them, metrics.json's figures in Vertex's metric names.

    Vertex-named metrics pass through; the trainer's short names (loss, mae, rmse) are
    renamed; anything else (accuracy, examples) has no place in Vertex's schema.
    """
    kind = "regression" if export.task == "regression" else "classification"
    metrics = {}
    for name, value in export.metrics.items():
        vertex_name = contracts.SHORT_NAMES[kind].get(name, name)
        if (
            vertex_name in contracts.SCHEMA_METRICS[kind]
            and isinstance(value, (int, float))
            and math.isfinite(value)
        ):
            metrics[vertex_name] = float(value)
    if export.evaluation:
        metrics.update(export.evaluation["metrics"])
    explanation = None
    if export.importance:
        explanation = v1.ModelExplanation(
            mean_attributions=[
                v1.Attribution(
                    feature_attributions={
                        row["name"]: row["importance"] for row in export.importance["features"]
                    }
                )
            ]
        )
    return v1.ModelEvaluation(
        display_name=f"trainer evaluation at step {export.metrics.get('step', '?')}",
        metrics_schema_uri=EVALUATION_SCHEMA[kind],
        metrics=metrics,
        model_explanation=explanation,
    )


def deployed_model(spec: DeploySpec, model_name: str) -> v1.DeployedModel:
    return v1.DeployedModel(
        model=model_name,
        display_name=spec.display_name,
        dedicated_resources=v1.DedicatedResources(
            machine_spec=jobs.machine_spec(spec),
            min_replica_count=spec.min_replicas,
            max_replica_count=spec.max_replicas,
        ),
    )


def batch_prediction_job(spec: DeploySpec, model_name: str) -> v1.BatchPredictionJob:
    """Each record of --batch_input goes base64-encoded to `serving_default`."""
    return v1.BatchPredictionJob(
        display_name=f"{spec.display_name}-batch",
        model=model_name,
        input_config=v1.BatchPredictionJob.InputConfig(
            instances_format="tf-record", gcs_source=v1.GcsSource(uris=[spec.batch_input])
        ),
        output_config=v1.BatchPredictionJob.OutputConfig(
            predictions_format="jsonl",
            gcs_destination=v1.GcsDestination(output_uri_prefix=spec.batch_output),
        ),
        dedicated_resources=v1.BatchDedicatedResources(
            machine_spec=jobs.machine_spec(spec),
            starting_replica_count=spec.min_replicas,
            max_replica_count=spec.max_replicas,
        ),
        labels=dict(spec.labels),
    )


def dry_run(spec: DeploySpec, export: exports.Export) -> dict:
    """Every request the deployment would send, in REST JSON shape, keyed as docs/guide/vertex.md
    says: model, modelEvaluation, and deployedModel / batchPredictionJob when asked."""
    model_name = UPLOADED_MODEL.format(project=spec.project, region=spec.region)
    out = {"model": _json(model(spec)), "modelEvaluation": _json(evaluation(export))}
    if spec.endpoint:
        out["deployedModel"] = _json(deployed_model(spec, model_name))
    if spec.batch_input:
        out["batchPredictionJob"] = _json(batch_prediction_job(spec, model_name))
    return out


def _json(message) -> dict:
    return json.loads(jobs.to_json(message))
