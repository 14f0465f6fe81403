"""The Vertex AI pipeline: its spec as kfp compiles it, the PipelineJob Vertex would get,
each step against stand-in clients, and the prepare and train steps for real on
kfp.local against the fake Cloud Storage root."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess

import pytest
import yaml
from google.cloud import aiplatform_v1 as v1
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from test_deploy import FakeServices

import trainer
from trainer.vertex import images, jobs, models, pipeline_steps

from conftest import run_python

PINNED = f"{trainer.__version__}-tf{images.IMAGE_TF_VERSION}"
VERTEX_FLAGS = [
    "--project=proj",
    "--region=europe-west4",
    "--job_dir=gs://b/jobs/run-1",
    "--display_name=run-1",
    "--input=gs://b/raw/*.csv",
    "--label=y",
    "--task=binary",
    "--machine_type=g2-standard-8",
    "--accelerator_type=NVIDIA_L4",
    "--accelerator_count=1",
    "--scheduling_strategy=FLEX_START",
    "--max_wait_duration=2h",
    "--experiment=churn",
    "--experiment_run=run-1",
    "--parent_model=123",
    "--endpoint=new",
]


def pipeline_command(*flags: str) -> subprocess.CompletedProcess:
    return run_python("scripts/pipeline.py", *flags, timeout=300)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, str]:
    """The compiled spec and the dry run's PipelineJob JSON, from one command."""
    path = tmp_path_factory.mktemp("pipeline") / "pipeline.yaml"
    proc = pipeline_command(
        *VERTEX_FLAGS, f"--compile={path}", "--submit", "--dry_run", "--", "--train_steps=500"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return yaml.safe_load(path.read_text()), proc.stdout


def test_the_spec_has_prepare_train_register_and_deploy_in_the_pinned_image(compiled):
    spec_dict, _ = compiled
    spec = json_format.ParseDict(spec_dict, pipeline_spec_pb2.PipelineSpec())
    tasks = spec.root.dag.tasks
    assert set(tasks) == {"prepare", "train", "register", "deploy"}
    # Each step waits for the one before: its input is that step's output.
    for task, upstream in (("train", "prepare"), ("register", "train"), ("deploy", "register")):
        inputs = tasks[task].inputs.parameters
        assert any(p.task_output_parameter.producer_task == upstream for p in inputs.values())
    executors = spec.deployment_spec["executors"]
    for name in tasks:
        image = executors[f"exec-{name}"]["container"]["image"]
        assert image.endswith(f"/train-cpu:{PINNED}"), image
    job = tasks["train"].inputs.parameters["job"].runtime_value.constant
    job = json_format.MessageToDict(job)
    assert (job["scheduling_strategy"], job["max_wait_s"]) == ("FLEX_START", 7200)
    assert (job["experiment"], job["experiment_run"]) == ("churn", "run-1")
    assert job["image"].endswith(f"/train-gpu:{PINNED}")
    assert job["trainer_args"] == ["--label=y", "--task=binary", "--train_steps=500"]
    deploy = json_format.MessageToDict(
        tasks["deploy"].inputs.parameters["deploy"].runtime_value.constant
    )
    assert (deploy["parent_model"], deploy["endpoint"]) == ("123", "new")
    assert deploy["serving_image"].endswith(f"/serve-cpu:{PINNED}")


def test_the_dry_run_prints_a_pipeline_job_vertex_accepts(compiled):
    spec_dict, printed = compiled
    job = v1.PipelineJob.from_json(printed)
    assert job.display_name == "run-1"
    assert job.runtime_config.gcs_output_directory == "gs://b/jobs/run-1/pipeline"
    assert json.loads(printed)["pipelineSpec"] == json.loads(json.dumps(spec_dict))


@pytest.mark.parametrize(
    "flags, line",
    [
        (
            ["--input=x", "--bigquery_table=p.d.t"],
            "error: give one of --input and --bigquery_table",
        ),
        (["--input=x"], "error: give --compile=FILE and/or --submit, or --run_local"),
        (["--input=x", "--run_local"], "error: --run_local needs --fake_gcs_root"),
        (
            ["--input=x", "--submit", "--dry_run", "--scheduling_strategy=FLEX_START"],
            "error: --scheduling_strategy=FLEX_START needs GPUs",
        ),
        (
            ["--input=x", "--submit", "--dry_run", "--pipeline_root=/tmp/p"],
            "error: --pipeline_root='/tmp/p': Vertex needs a gs:// location",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(flags, line):
    proc = pipeline_command(
        "--project=proj", "--job_dir=gs://b/j", "--label=y", "--task=binary", *flags
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr[-500:]
    assert "Traceback" not in proc.stderr


class FakeJobs:
    """A JobServiceClient stand-in: the created job, then its states."""

    def __init__(self, final=v1.JobState.JOB_STATE_SUCCEEDED):
        self.created, self.final = [], final

    def create_custom_job(self, parent, custom_job):
        self.created.append((parent, custom_job))
        return v1.CustomJob(name=f"{parent}/customJobs/77")

    def get_custom_job(self, name):
        return v1.CustomJob(name=name, state=self.final)


def job_spec(**overrides) -> jobs.JobSpec:
    values = dict(
        project="proj",
        region="europe-west4",
        display_name="run-1",
        package_uri=None,
        job_dir="gs://b/jobs/run-1",
        trainer_args=("--label=y", "--task=binary"),
        image=f"europe-west4-docker.pkg.dev/proj/trainer/train-cpu:{PINNED}",
        labels=(("team", "ml"),),
        scheduling_strategy="SPOT",
    )
    return jobs.JobSpec(**{**values, **overrides})


def test_the_train_step_runs_our_custom_job_on_the_prepared_records(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    fake = FakeJobs()
    as_json = pipeline_steps.to_json(job_spec())
    assert "executor_image" not in as_json  # unset fields travel as absent, not null
    model_dir = pipeline_steps.train_on_vertex(json.loads(json.dumps(as_json)), "gs://b/data", fake)
    assert model_dir == "gs://b/jobs/run-1/model"
    parent, job = fake.created[0]
    assert parent == "projects/proj/locations/europe-west4"
    pool = job.job_spec.worker_pool_specs[0]
    assert list(pool.container_spec.args) == [
        "--train_data=gs://b/data/train-*",
        "--validation_data=gs://b/data/validation-*",
        "--test_data=gs://b/data/test-*",
        "--label=y",
        "--task=binary",
    ]
    assert job.job_spec.scheduling.strategy == v1.Scheduling.Strategy.SPOT
    assert dict(job.labels) == {"team": "ml"}
    with pytest.raises(pipeline_steps.StepError, match="train: .*/customJobs/77 did not succeed"):
        pipeline_steps.train_on_vertex(
            as_json, "gs://b/data", FakeJobs(v1.JobState.JOB_STATE_FAILED)
        )


def test_the_register_and_deploy_steps_make_a_new_version_and_serve_it(store, exported):
    spec = models.DeploySpec(
        project="proj",
        region="europe-west4",
        model_dir="gs://b/jobs/run-1/model",  # replaced by the train step's output
        display_name="run-1",
        serving_image=f"europe-west4-docker.pkg.dev/proj/trainer/serve-cpu:{PINNED}",
        parent_model="123",
        endpoint="new",
    )
    as_json = json.loads(json.dumps(pipeline_steps.to_json(spec)))
    fake = FakeServices()
    model_dir = store.uri(exported["binary"])  # gs://, under the fake root
    name = pipeline_steps.register(as_json, model_dir, fake, store)
    parent = "projects/proj/locations/europe-west4"
    assert name == f"{parent}/models/42@2"
    upload = fake.calls[0][1]
    assert upload.parent_model == f"{parent}/models/123"
    assert upload.model.artifact_uri == model_dir
    assert fake.calls[1][0] == "import_model_evaluation"
    assert pipeline_steps.deploy(as_json, name, fake) == f"{parent}/endpoints/900"
    assert fake.calls[-1][2].model == name


def test_run_local_prepares_and_trains_on_kfp_local(tmp_path):
    root = tmp_path / "gcs"
    (root / "bkt" / "raw").mkdir(parents=True)
    rng = random.Random(0)
    with open(root / "bkt" / "raw" / "t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x", "z", "c", "y"])
        for _ in range(400):
            x, z, c = rng.random(), rng.random(), rng.choice("abc")
            w.writerow([x, z, c, int(x + z + 0.5 * (c == "a") + rng.gauss(0, 0.2) > 1.2)])
    proc = pipeline_command(
        "--project=proj",
        "--job_dir=/gcs/bkt/jobs/run-1",  # Vertex's mount path: the gs:// object
        "--input=gs://bkt/raw/*.csv",
        "--label=y",
        "--task=binary",
        "--run_local",
        f"--fake_gcs_root={root}",
        "--",
        "--train_steps=40",
        "--trees=off",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "gs://bkt/jobs/run-1/model"
    model = root / "bkt" / "jobs" / "run-1" / "model"
    assert (model / "saved_model.pb").is_file()
    metrics = json.loads((model / "metrics.json").read_text())
    assert metrics["examples"] > 0 and "auRoc" in metrics  # the test split, evaluated
    prepared = sorted(os.listdir(root / "bkt" / "jobs" / "run-1" / "data"))
    assert [n.split("-")[0] for n in prepared if n.endswith(".tfrecord")] == [
        "test",
        "train",
        "validation",
    ]


def test_a_failed_step_on_kfp_local_is_one_line_not_a_traceback(tmp_path):
    root = tmp_path / "gcs"
    (root / "bkt" / "raw").mkdir(parents=True)
    (root / "bkt" / "raw" / "t.csv").write_text("x,y\n1,0\n2,1\n")
    proc = pipeline_command(
        "--project=proj",
        "--job_dir=gs://bkt/jobs/run-1",
        "--input=gs://bkt/raw/*.csv",
        "--label=nope",
        "--task=binary",
        "--run_local",
        f"--fake_gcs_root={root}",
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: the pipeline's step 'prepare' failed; its log above ends with why"
    )
    # The step's own line names the culprit.
    assert "error: --label: 'nope' is not a column of gs://bkt/raw/t.csv" in proc.stdout
