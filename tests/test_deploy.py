"""Serving on Vertex AI: export checks, request protos field by field (the aiplatform
calls intercepted at the client boundary), and scripts/deploy.py --dry_run JSON read back
by the real aiplatform_v1 types."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from google.cloud import aiplatform_v1 as v1

import trainer
from trainer.base import storage as storage_lib
from trainer.vertex import deploy, exports, images, jobs, models

from conftest import BUCKET, REPO, make_config, run_job, subprocess_env


@pytest.fixture(scope="module")
def exported(fake_gcs) -> dict[str, str]:
    """A small export per task under the fake GCS root: task -> gs:// model_dir."""
    dirs = {}
    for task in ("binary", "regression"):
        job_dir = f"gs://{BUCKET}/jobs/deploy-{task}"
        run_job(make_config(fake_gcs, job_dir, task))
        dirs[task] = f"{job_dir}/model"
    return dirs


def spec(model_dir: str, **overrides) -> models.DeploySpec:
    values = dict(
        project="proj",
        region="europe-west4",
        model_dir=model_dir,
        display_name="churn",
        serving_image=exports.default_image("proj", "europe-west4", False),
        labels=(("team", "ml"),),
    )
    values.update(overrides)
    return models.DeploySpec(**values)


def test_inspect_reads_signatures_version_task_and_metrics(store, exported):
    export = exports.inspect(store, exported["binary"])
    assert export.tensorflow_version == tf.__version__
    assert export.signatures["serving_default"] == ("examples",)
    assert {"age", "city", "color", "scores"} <= set(export.features)
    assert export.task == "binary" and export.metrics["step"] == 20


def test_inspect_names_a_folder_without_a_saved_model(store, exported):
    with pytest.raises(
        exports.ExportError,
        match=r"no saved_model.pb at its root; Vertex "
        r"needs the export folder itself",
    ):
        exports.inspect(store, exported["binary"].rsplit("/", 1)[0])


# The serving image's default tag: the package's version and its image's TensorFlow.
PINNED = f"{trainer.__version__}-tf{images.IMAGE_TF_VERSION}"
PREBUILT_CPU = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
PREBUILT_GPU = "us-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest"
BEFORE_ITS_DATE = datetime.date(2027, 1, 13)


@pytest.mark.parametrize(
    "image, gpu, fragment",
    [
        (
            "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-12:latest",
            False,
            "reached its end of availability on 2025-06-30",
        ),
        (PREBUILT_CPU, True, "is a CPU image"),
        (PREBUILT_GPU, False, "is a GPU image"),
        (exports.default_image("proj", "europe-west4", False), True, "is a CPU image"),
        (
            "europe-west4-docker.pkg.dev/proj/trainer/train-gpu:latest",
            True,
            "is the package's training image",
        ),
    ],
)
def test_serving_image_must_serve_the_export(store, exported, image, gpu, fragment):
    export = exports.inspect(store, exported["binary"])
    with pytest.raises(exports.ExportError, match=fragment):
        exports.check_image(image, export, gpu, today=BEFORE_ITS_DATE)
    # The defaults fit and need no warning; so does a custom image.
    assert exports.check_image(exports.default_image("p", "us-east1", gpu), export, gpu) is None
    assert exports.check_image("europe-docker.pkg.dev/p/r/my-server:1", export, gpu) is None


def test_prebuilt_serving_image_warns_until_its_date_then_is_refused(store, exported):
    export = exports.inspect(store, exported["binary"])
    warning = exports.check_image(PREBUILT_CPU, export, False, today=BEFORE_ITS_DATE)
    assert warning.startswith(
        f"--serving_image={PREBUILT_CPU} reaches its end of availability on 2027-01-14"
    )
    with pytest.raises(
        exports.ExportError,
        match=f"--serving_image={PREBUILT_CPU} reached its end of availability on 2027-01-14",
    ):
        exports.check_image(PREBUILT_CPU, export, False, today=datetime.date(2027, 1, 14))
    # A prebuilt image is served as TF Serving is: no routes of ours.
    assert models.container_spec(PREBUILT_CPU) == v1.ModelContainerSpec(image_uri=PREBUILT_CPU)


def test_upload_request_field_by_field(exported):
    request = models.upload_request(spec(exported["binary"], parent_model="123"))
    assert request.parent == "projects/proj/locations/europe-west4"
    assert request.parent_model == "projects/proj/locations/europe-west4/models/123"
    m = request.model
    assert (m.display_name, m.artifact_uri) == ("churn", exported["binary"])
    assert m.container_spec.image_uri == (
        f"europe-west4-docker.pkg.dev/proj/trainer/serve-cpu:{PINNED}"
    )
    assert [p.container_port for p in m.container_spec.ports] == [8080]
    assert (m.container_spec.health_route, m.container_spec.predict_route) == (
        "/health",
        "/predict",
    )
    assert dict(m.labels) == {"team": "ml"}


@pytest.mark.parametrize(
    "task, schema, expected",
    [
        (
            "binary",
            "classification_metrics_1.0.0.yaml",
            {"auRoc", "auPrc", "logLoss", "confidenceMetrics", "confusionMatrix"},
        ),
        (
            "regression",
            "regression_metrics_1.0.0.yaml",
            {
                "meanAbsoluteError",
                "rootMeanSquaredError",
                "rSquared",
                "meanAbsolutePercentageError",
            },
        ),  # negative labels: no rootMeanSquaredLogError
    ],
)
def test_evaluation_in_vertex_metric_names(store, exported, task, schema, expected):
    export = exports.inspect(store, exported[task])
    evaluation = models.evaluation(export)
    assert evaluation.metrics_schema_uri == (
        f"gs://google-cloud-aiplatform/schema/modelevaluation/{schema}"
    )
    metrics = dict(evaluation.metrics)
    assert set(metrics) == expected
    for name in expected & set(export.metrics):
        assert metrics[name] == pytest.approx(export.metrics[name], rel=1e-12)


def test_evaluation_of_an_older_export_renames_its_short_metrics(store, exported):
    export = exports.inspect(store, exported["regression"])
    old = dataclasses.replace(
        export,
        metrics={"loss": 0.3, "mae": 1.5, "rmse": 2.0, "examples": 10, "step": 5},
        evaluation=None,
        importance=None,
    )
    assert dict(models.evaluation(old).metrics) == {
        "meanAbsoluteError": 1.5,
        "rootMeanSquaredError": 2.0,
    }


class Operation:
    def __init__(self, result):
        self._result = result

    def result(self):
        return self._result


class FakeServices:
    """Model, endpoint and job service clients that record every request."""

    def __init__(self):
        self.calls = []

    def upload_model(self, request):
        self.calls.append(("upload_model", request))
        return Operation(
            v1.UploadModelResponse(model=f"{request.parent}/models/42", model_version_id="2")
        )

    def import_model_evaluation(self, parent, model_evaluation):
        self.calls.append(("import_model_evaluation", parent, model_evaluation))
        return v1.ModelEvaluation(name=f"{parent}/evaluations/7")

    def create_endpoint(self, parent, endpoint):
        self.calls.append(("create_endpoint", parent, endpoint))
        return Operation(v1.Endpoint(name=f"{parent}/endpoints/900"))

    def deploy_model(self, endpoint, deployed_model, traffic_split):
        self.calls.append(("deploy_model", endpoint, deployed_model, traffic_split))
        return Operation(v1.DeployModelResponse())

    def create_batch_prediction_job(self, parent, batch_prediction_job):
        self.calls.append(("create_batch_prediction_job", parent, batch_prediction_job))
        return v1.BatchPredictionJob(name=f"{parent}/batchPredictionJobs/5")


def test_register_and_deploy_to_a_new_endpoint(store, exported):
    s = spec(
        exported["binary"],
        endpoint="new",
        machine_type="n1-standard-4",
        min_replicas=1,
        max_replicas=3,
        accelerator_type="NVIDIA_TESLA_T4",
        accelerator_count=1,
        serving_image=exports.default_image("proj", "europe-west4", True),
    )
    export = deploy.prepare(s, store)
    fake = FakeServices()
    result = deploy.run(s, export, fake, fake, fake)
    parent = "projects/proj/locations/europe-west4"
    assert [c[0] for c in fake.calls] == [
        "upload_model",
        "import_model_evaluation",
        "create_endpoint",
        "deploy_model",
    ]
    assert fake.calls[1][1] == f"{parent}/models/42"  # the evaluation of the new model
    assert fake.calls[2][2].display_name == "churn"
    _, endpoint, deployed, traffic = fake.calls[3]
    assert endpoint == f"{parent}/endpoints/900" and traffic == {"0": 100}
    assert deployed.model == f"{parent}/models/42@2"
    resources = deployed.dedicated_resources
    assert (resources.min_replica_count, resources.max_replica_count) == (1, 3)
    assert resources.machine_spec.machine_type == "n1-standard-4"
    assert resources.machine_spec.accelerator_type == v1.AcceleratorType.NVIDIA_TESLA_T4
    assert resources.machine_spec.accelerator_count == 1
    assert (result.model, result.endpoint) == (f"{parent}/models/42@2", f"{parent}/endpoints/900")
    commands = deploy.prediction_commands(s, result.endpoint, "gs://b/eval-*")
    assert "gcloud ai endpoints predict 900 --region=europe-west4" in commands[1]
    assert "gcloud ai endpoints raw-predict 900 --region=europe-west4" in commands[3]


def test_deploy_to_an_existing_endpoint_and_batch_predict(store, exported):
    s = spec(
        exported["binary"],
        endpoint="314",
        batch_input="gs://b/data/test-*.tfrecord",
        batch_output="gs://b/predictions",
        max_replicas=4,
    )
    fake = FakeServices()
    result = deploy.run(s, deploy.prepare(s, store), fake, fake, fake)
    parent = "projects/proj/locations/europe-west4"
    assert [c[0] for c in fake.calls] == [
        "upload_model",
        "import_model_evaluation",
        "deploy_model",
        "create_batch_prediction_job",
    ]
    assert fake.calls[2][1] == f"{parent}/endpoints/314"
    _, batch_parent, batch = fake.calls[3]
    assert batch_parent == parent and batch.model == f"{parent}/models/42@2"
    assert batch.input_config.instances_format == "tf-record"
    assert list(batch.input_config.gcs_source.uris) == ["gs://b/data/test-*.tfrecord"]
    assert batch.output_config.predictions_format == "jsonl"
    assert batch.output_config.gcs_destination.output_uri_prefix == "gs://b/predictions"
    assert batch.dedicated_resources.max_replica_count == 4
    assert result.batch_prediction_job == f"{parent}/batchPredictionJobs/5"


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            dict(endpoint="projects/proj/locations/us-east1/endpoints/3"),
            "is in region us-east1, not --region=europe-west4",
        ),
        (dict(parent_model="projects/proj/locations/us-east1/models/3"), "is in region us-east1"),
        (dict(batch_input="gs://b/x-*"), "--batch_input and --batch_output go together"),
        (dict(batch_input="data/*", batch_output="gs://b/out"), "needs a gs:// location"),
        (dict(min_replicas=3, max_replicas=2), "expected 1 <= min <= max"),
        (dict(accelerator_type="NVIDIA_TESLA_T4"), "disagree"),
    ],
)
def test_checks_name_the_flag(exported, overrides, fragment):
    with pytest.raises(jobs.JobError, match=fragment):
        models.check(spec(exported["binary"], **overrides))


def deploy_dry_run(fake_gcs, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "scripts/deploy.py",
            "--project=proj",
            "--region=europe-west4",
            f"--fake_gcs_root={fake_gcs}",
            "--dry_run",
            *flags,
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "flags, keys",
    [
        ([], {"model", "modelEvaluation"}),
        (["--endpoint=new", "--max_replicas=2"], {"model", "modelEvaluation", "deployedModel"}),
        (
            ["--batch_input=gs://b/test-*", "--batch_output=gs://b/out"],
            {"model", "modelEvaluation", "batchPredictionJob"},
        ),
    ],
)
def test_dry_run_prints_requests_the_real_types_accept(fake_gcs, exported, flags, keys):
    proc = deploy_dry_run(fake_gcs, f"--model_dir={exported['binary']}", *flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert set(out) == keys
    types = {
        "model": v1.Model,
        "modelEvaluation": v1.ModelEvaluation,
        "deployedModel": v1.DeployedModel,
        "batchPredictionJob": v1.BatchPredictionJob,
    }
    parsed = {k: types[k].from_json(json.dumps(v)) for k, v in out.items()}
    assert parsed["model"].artifact_uri == exported["binary"]
    # No image flag: the package's serving image, its port and its routes.
    assert out["model"]["containerSpec"] == {
        "imageUri": f"europe-west4-docker.pkg.dev/proj/trainer/serve-cpu:{PINNED}",
        "ports": [{"containerPort": 8080}],
        "healthRoute": "/health",
        "predictRoute": "/predict",
    }
    assert parsed["model"].display_name == "deploy-binary"  # the job folder's name
    evaluation = out["modelEvaluation"]
    assert "logLoss" in evaluation["metrics"]
    # The full evaluation (evaluation.json) and feature importance (as modelExplanation).
    local = storage_lib.Storage(fake_gcs).path(exported["binary"])
    saved = json.load(open(os.path.join(local, "evaluation.json")))
    assert evaluation["metrics"]["confidenceMetrics"] == saved["metrics"]["confidenceMetrics"]
    assert (
        evaluation["metrics"]["confusionMatrix"]["rows"]
        == saved["metrics"]["confusionMatrix"]["rows"]
    )
    importance = json.load(open(os.path.join(local, "feature_importance.json")))
    attributions = evaluation["modelExplanation"]["meanAttributions"][0]["featureAttributions"]
    assert attributions == {r["name"]: r["importance"] for r in importance["features"]}
    assert len(parsed["modelEvaluation"].model_explanation.mean_attributions) == 1
    if "deployedModel" in parsed:
        assert parsed["deployedModel"].dedicated_resources.max_replica_count == 2
    if "batchPredictionJob" in parsed:
        assert parsed["batchPredictionJob"].input_config.instances_format == "tf-record"


def test_dry_run_errors_are_one_line(fake_gcs, exported):
    proc = deploy_dry_run(fake_gcs, f"--model_dir={exported['binary'].rsplit('/', 1)[0]}")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"error: --model_dir={exported['binary'].rsplit('/', 1)[0]}: no saved_model.pb")
    )


def test_submit_deploy_registers_the_finished_jobs_model(store, exported):
    fake = FakeServices()
    job_dir = exported["regression"].rsplit("/", 1)[0]
    model, evaluation = deploy.register_job_model(
        "proj", "europe-west4", job_dir, "run-7", (("team", "ml"),), store, fake
    )
    request = fake.calls[0][1]
    assert request.model.artifact_uri == f"{job_dir}/model"
    assert request.model.display_name == "run-7"
    assert fake.calls[1][2].metrics_schema_uri.endswith("regression_metrics_1.0.0.yaml")
    assert model.endswith("/models/42@2") and evaluation.endswith("/evaluations/7")


def test_submit_deploy_needs_stream():
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/submit.py",
            "--project=proj",
            "--staging_dir=gs://s",
            "--job_dir=gs://out/run-1",
            "--deploy",
            "--",
            "--train_data=gs://d/*",
            "--label=y",
            "--task=binary",
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: --deploy needs --stream: the model exists once the job has succeeded"
    )


def test_dry_run_with_a_prebuilt_image_names_its_date(fake_gcs, exported):
    proc = deploy_dry_run(
        fake_gcs, f"--model_dir={exported['binary']}", f"--serving_image={PREBUILT_CPU}"
    )
    if datetime.date.today() < datetime.date(2027, 1, 14):
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "reaches its end of availability on 2027-01-14" in proc.stderr
        assert json.loads(proc.stdout)["model"]["containerSpec"] == {"imageUri": PREBUILT_CPU}
    else:  # from that day on, refused
        assert proc.returncode == 2
        assert "reached its end of availability on 2027-01-14" in proc.stderr
