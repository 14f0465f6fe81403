"""Vertex AI submission: job protos field by field for the four job shapes, the checks,
staging against a real local GCS emulator, failure paths, the dry run, and Cloud Build."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import tarfile
from unittest import mock

import pytest
import requests
import yaml
from google.api_core import exceptions as gexc
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1 as v1
from google.cloud import storage as gcs

import trainer
from trainer.base import contracts
from trainer.vertex import checks, images, jobs, staging
from trainer.vertex import submit as submit_lib

from conftest import REPO, free_ports, run_python

# The default tag: the package's version and the TensorFlow its images install.
PINNED = f"{trainer.__version__}-tf{images.IMAGE_TF_VERSION}"
CPU_IMAGE = images.own_image("proj", "europe-west4", "train", gpu=False)
GPU_IMAGE = images.own_image("proj", "europe-west4", "train", gpu=True)
RETIRED_IMAGE = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"
BASE = dict(
    project="proj",
    region="europe-west4",
    display_name="run-1",
    package_uri="gs://stage/run-1/trainer-0.1.0.tar.gz",
    job_dir="gs://out/run-1",
    trainer_args=("--train_data=gs://data/train-*", "--label=y", "--task=binary"),
    image=CPU_IMAGE,
)
SHAPES = {
    "one_gpu": dict(
        machine_type="n1-standard-8",
        accelerator_type="NVIDIA_TESLA_T4",
        accelerator_count=1,
        image=GPU_IMAGE,
    ),
    "four_gpus": dict(
        machine_type="a2-highgpu-4g",
        accelerator_type="NVIDIA_TESLA_A100",
        accelerator_count=4,
        image=GPU_IMAGE,
    ),
    "chief_and_3_workers": dict(machine_type="n1-standard-16", workers=4),
    "reduction_server": dict(
        machine_type="g2-standard-12",
        accelerator_type="NVIDIA_L4",
        accelerator_count=1,
        workers=2,
        reduction_servers=3,
        image=GPU_IMAGE,
    ),
}


def spec(shape: str, **overrides) -> jobs.JobSpec:
    return jobs.JobSpec(**{**BASE, **SHAPES[shape], **overrides})


def test_one_gpu_job_field_by_field():
    job = jobs.custom_job(
        spec(
            "one_gpu",
            service_account="sa@proj.iam.gserviceaccount.com",
            labels=(("team", "ml"),),
            timeout_s=7200,
            scheduling_strategy="SPOT",
            tensorboard="projects/proj/locations/europe-west4/tensorboards/1",
        )
    )
    assert job.display_name == "run-1" and dict(job.labels) == {"team": "ml"}
    js = job.job_spec
    assert len(js.worker_pool_specs) == 1
    pool = js.worker_pool_specs[0]
    assert pool.replica_count == 1
    assert pool.machine_spec.machine_type == "n1-standard-8"
    assert pool.machine_spec.accelerator_type == v1.AcceleratorType.NVIDIA_TESLA_T4
    assert pool.machine_spec.accelerator_count == 1
    container = pool.container_spec
    # Pinned to the package and the TensorFlow of its image, never `latest`.
    assert container.image_uri == f"europe-west4-docker.pkg.dev/proj/trainer/train-gpu:{PINNED}"
    assert not container.command  # the image's entry point: install the package, train
    assert list(container.args) == list(BASE["trainer_args"])
    assert [(e.name, e.value) for e in container.env] == [
        (contracts.PACKAGE_ENV, "gs://stage/run-1/trainer-0.1.0.tar.gz")
    ]
    assert not pool.python_package_spec.python_module
    assert js.base_output_directory.output_uri_prefix == "gs://out/run-1"
    assert js.service_account == "sa@proj.iam.gserviceaccount.com"
    assert js.tensorboard.endswith("/tensorboards/1")
    assert js.scheduling.timeout.total_seconds() == 7200
    assert js.scheduling.strategy == v1.Scheduling.Strategy.SPOT
    assert not js.scheduling.restart_job_on_worker_restart  # one machine: no need


def test_four_gpu_job():
    pools = jobs.custom_job(spec("four_gpus")).job_spec.worker_pool_specs
    assert len(pools) == 1 and pools[0].replica_count == 1
    assert (pools[0].machine_spec.machine_type, pools[0].machine_spec.accelerator_count) == (
        "a2-highgpu-4g",
        4,
    )


def test_chief_and_three_workers_in_vertex_pool_order():
    js = jobs.custom_job(spec("chief_and_3_workers")).job_spec
    chief, workers = js.worker_pool_specs
    assert (chief.replica_count, workers.replica_count) == (1, 3)
    assert chief.container_spec == workers.container_spec
    assert workers.machine_spec.machine_type == "n1-standard-16"
    assert js.scheduling.restart_job_on_worker_restart  # collectives cannot be rejoined


def test_reduction_server_is_pool_two():
    chief, workers, reducers = jobs.custom_job(spec("reduction_server")).job_spec.worker_pool_specs
    assert (chief.replica_count, workers.replica_count, reducers.replica_count) == (1, 1, 3)
    assert reducers.container_spec.image_uri == jobs.REDUCTION_SERVER_IMAGE
    assert reducers.machine_spec.machine_type == "n1-highcpu-16"
    assert not reducers.python_package_spec.python_module


@pytest.mark.parametrize("shape", SHAPES)
def test_rest_json_round_trips_through_from_json(shape):
    job = jobs.custom_job(spec(shape))
    text = jobs.to_json(job)
    assert v1.CustomJob.from_json(text) == job
    assert '"acceleratorType": "NVIDIA' in text or shape == "chief_and_3_workers"


def test_hyperparameter_tuning_job():
    config = {
        "metric": "accuracy",
        "max_trials": 12,
        "parallel_trials": 3,
        "parameters": [
            {"name": "learning_rate", "type": "double", "min": 1e-4, "max": 0.1, "scale": "log"},
            {"name": "hidden_units", "type": "categorical", "values": ["64,32", "256,128"]},
            {"name": "batch_size", "type": "discrete", "values": [64, 256]},
        ],
    }
    job = jobs.hptune_job(spec("one_gpu"), config)
    metric = job.study_spec.metrics[0]
    assert (metric.metric_id, metric.goal) == (
        "accuracy",
        v1.StudySpec.MetricSpec.GoalType.MAXIMIZE,
    )
    lr, hidden, batch = job.study_spec.parameters
    assert (lr.parameter_id, lr.double_value_spec.min_value, lr.double_value_spec.max_value) == (
        "learning_rate",
        1e-4,
        0.1,
    )
    assert lr.scale_type == v1.StudySpec.ParameterSpec.ScaleType.UNIT_LOG_SCALE
    assert list(hidden.categorical_value_spec.values) == ["64,32", "256,128"]
    assert list(batch.discrete_value_spec.values) == [64.0, 256.0]
    assert (job.max_trial_count, job.parallel_trial_count) == (12, 3)
    args = list(job.trial_job_spec.worker_pool_specs[0].container_spec.args)
    assert args[-1] == "--hptune_metric=accuracy"  # the trainer reports what is tuned
    assert v1.HyperparameterTuningJob.from_json(jobs.to_json(job)) == job


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"parameters": [{"name": "x", "type": "double", "min": 0, "max": 1}]}, 'no "metric"'),
        ({"metric": "loss"}, 'no "parameters"'),
        ({"metric": "loss", "parameters": [{"name": "x", "type": "float"}]}, "type 'float'"),
        (
            {"metric": "loss", "parameters": [{"name": "x", "type": "double", "min": 0}]},
            "parameter 'x' (double) needs 'max'",
        ),
        ({"metric": "loss", "goal": "up", "parameters": []}, '"goal" must be one of'),
    ],
)
def test_bad_tuning_config_is_named(config, fragment):
    with pytest.raises(jobs.JobError, match="^hp.yaml: ") as e:
        jobs.hptune_job(spec("one_gpu"), config, "hp.yaml")
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (
            dict(
                machine_type="a2-highgpu-4g",
                accelerator_type="NVIDIA_TESLA_A100",
                accelerator_count=2,
            ),
            "a2-highgpu-4g carries 4 x NVIDIA_TESLA_A100",
        ),
        (
            dict(
                machine_type="n1-standard-8",
                accelerator_type="NVIDIA_TESLA_T4",
                accelerator_count=3,
            ),
            "NVIDIA_TESLA_T4 on n1 machines comes in counts of 1, 2, 4",
        ),
        (
            dict(
                machine_type="e2-standard-8",
                accelerator_type="NVIDIA_TESLA_T4",
                accelerator_count=1,
            ),
            "--machine_type=e2-standard-8 takes no NVIDIA_TESLA_T4",
        ),
        (dict(accelerator_type="NVIDIA_TESLA_T4", accelerator_count=0), "disagree"),
        (dict(accelerator_type="NVIDIA_GTX_1080", accelerator_count=1), "not a Vertex accelerator"),
        (dict(workers=0), "--workers=0"),
        (dict(workers=1, reduction_servers=2), "--reduction_servers needs --workers >= 2"),
        (
            dict(executor_image=RETIRED_IMAGE),
            f"--executor_image={RETIRED_IMAGE} reached its end "
            "of availability on 2026-07-11 and Vertex AI no longer accepts it",
        ),
        (
            dict(executor_image="us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-15.py310:latest"),
            "reached its end of availability by 2026-06-28",
        ),
        (
            dict(image="us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-16.py310:latest"),
            "--image=us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-16.py310:latest reached its end "
            "of availability on 2026-06-28",
        ),
        (
            dict(
                machine_type="n1-standard-8",
                accelerator_type="NVIDIA_TESLA_T4",
                accelerator_count=1,
            ),
            f"train-cpu:{PINNED} is a CPU image but the job asks for GPUs",
        ),
        (
            dict(image=images.own_image("proj", "europe-west4", "serve", False)),
            "is the package's serving image",
        ),
        (dict(executor_image=RETIRED_IMAGE, package_uri=None), "needs --stage_package"),
        (dict(job_dir="/local/out"), "--job_dir='/local/out': Vertex needs a gs:// location"),
        (dict(scheduling_strategy="LOW"), "--scheduling_strategy='LOW': expected one of"),
        (
            dict(scheduling_strategy="FLEX_START"),
            "FLEX_START needs GPUs Dynamic Workload Scheduler provisions",
        ),
        (
            dict(SHAPES["one_gpu"], scheduling_strategy="FLEX_START"),
            "(NVIDIA_TESLA_A100, NVIDIA_A100_80GB, NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB, "
            "NVIDIA_H200_141GB, NVIDIA_B200, NVIDIA_L4), not NVIDIA_TESLA_T4",
        ),
        (
            dict(SHAPES["reduction_server"], scheduling_strategy="FLEX_START"),
            "needs the same machine in every pool: --reduction_servers runs n1-highcpu-16, "
            "the workers g2-standard-12",
        ),
        (
            dict(SHAPES["four_gpus"], scheduling_strategy="FLEX_START", timeout_s=8 * 86400),
            "a FLEX_START job runs at most 7 days",
        ),
        (dict(max_wait_s=3600), "--max_wait_duration is how long FLEX_START waits"),
        (
            dict(scheduling_strategy="SPOT", max_wait_s=3600),
            "needs --scheduling_strategy=FLEX_START, not SPOT",
        ),
        (dict(experiment_run="r1"), "--experiment_run needs --experiment"),
        (dict(experiment="My_Experiment"), "--experiment='My_Experiment': expected lower-case"),
        (dict(experiment="e", experiment_run="-r"), "--experiment_run='-r': expected lower-case"),
    ],
)
def test_checks_reject_what_vertex_would(overrides, fragment):
    with pytest.raises(jobs.JobError) as e:
        checks.check_all(jobs.JobSpec(**{**BASE, **overrides}))
    assert fragment in str(e.value)


@pytest.mark.parametrize("shape", SHAPES)
def test_checks_accept_the_four_shapes(shape):
    checks.check_all(spec(shape))


def test_a_tuning_job_cannot_send_every_trial_to_one_experiment_run():
    both = spec("one_gpu", experiment="e", experiment_run="r")
    checks.check_all(both)
    with pytest.raises(jobs.JobError, match="every trial would log to the same run"):
        checks.check_all(both, tuning=True)
    checks.check_all(spec("one_gpu", experiment="e"), tuning=True)


@pytest.mark.parametrize(
    "text, seconds",
    [("3600", 3600), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("7d", 604800)],
)
def test_durations(text, seconds):
    assert jobs.parse_duration("timeout", text) == seconds


@pytest.mark.parametrize("text", ["", "2x", "h", "1.5h", "-5", "0", "0m", "2h 30m"])
def test_bad_durations_name_the_flag(text):
    with pytest.raises(jobs.JobError, match=r"^--max_wait_duration="):
        jobs.parse_duration("max_wait_duration", text)


def test_prebuilt_images_until_their_date_and_the_python_package_spec():
    """--executor_image keeps the python package spec; a prebuilt image passed the checks
    until its end of availability, and fails from that day on."""
    s = spec("chief_and_3_workers", executor_image=RETIRED_IMAGE)
    checks.check_image(s, today=datetime.date(2026, 7, 10))
    with pytest.raises(jobs.JobError, match="on 2026-07-11"):
        checks.check_image(s, today=datetime.date(2026, 7, 11))
    pool = jobs.custom_job(s).job_spec.worker_pool_specs[1]
    pkg = pool.python_package_spec
    assert (pkg.executor_image_uri, list(pkg.package_uris), pkg.python_module) == (
        RETIRED_IMAGE,
        [BASE["package_uri"]],
        "trainer.task",
    )
    assert list(pkg.args) == list(BASE["trainer_args"]) and not pool.container_spec.image_uri
    gpu = spec("one_gpu", executor_image=RETIRED_IMAGE)
    with pytest.raises(jobs.JobError, match="is a CPU image but the job asks for GPUs"):
        checks.check_image(gpu, today=datetime.date(2026, 1, 1))
    assert images.end_of_availability(
        "europe-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest", "prediction"
    ) == datetime.date(2027, 1, 14)
    assert images.end_of_availability(CPU_IMAGE, "training") is None  # ours: no date


def test_without_a_staged_package_the_image_runs_its_own_copy():
    container = (
        jobs.custom_job(spec("one_gpu", package_uri=None))
        .job_spec.worker_pool_specs[0]
        .container_spec
    )
    assert not container.env and container.image_uri == GPU_IMAGE
    checks.check_all(spec("one_gpu", package_uri=None))


def test_sdist_holds_every_trainer_module(tmp_path):
    archive = staging.build_sdist(out_dir=str(tmp_path))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(n.endswith("trainer/task.py") for n in names)
    assert not any("/vertex/" in n or "/tests/" in n for n in names)
    # A module the archive lacks is caught before anything is uploaded.
    (tmp_path / "repo" / "trainer").mkdir(parents=True)
    (tmp_path / "repo" / "trainer" / "extra.py").write_text("")
    with pytest.raises(jobs.JobError, match="lacks trainer/extra.py"):
        staging.check_sdist(archive, str(tmp_path / "repo"))


@pytest.fixture(scope="module")
def gcs_emulator():
    """A real local GCS emulator (gcp-storage-emulator) on a free port, for the module."""
    port = free_ports(1)[0]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, gcp_storage_emulator.server as s; "
            "srv = s.create_server('localhost', int(sys.argv[1]), in_memory=True); "
            "srv.run()",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    host = f"http://localhost:{port}"
    try:
        for _ in range(100):
            try:
                requests.get(host, timeout=1)
                break
            except requests.ConnectionError:
                import time

                time.sleep(0.1)
        with mock.patch.dict(os.environ, {"STORAGE_EMULATOR_HOST": host}):
            client = gcs.Client(project="test", credentials=AnonymousCredentials())
            for bucket in ("stage", "data"):
                client.create_bucket(bucket)
            yield client
    finally:
        proc.kill()
        proc.wait()


def test_upload_and_data_check_against_the_emulator(gcs_emulator, tmp_path):
    sdist = tmp_path / "trainer-0.1.0.tar.gz"
    sdist.write_bytes(b"package")
    uri = staging.upload(gcs_emulator, str(sdist), "gs://stage/run-1")
    assert uri == "gs://stage/run-1/trainer-0.1.0.tar.gz"
    assert (
        gcs_emulator.bucket("stage").blob("run-1/trainer-0.1.0.tar.gz").download_as_bytes()
        == b"package"
    )
    for name in ("t/train-0.tfrecord", "t/train-1.tfrecord", "t/eval-0.tfrecord"):
        gcs_emulator.bucket("data").blob(name).upload_from_string(b"x")
    assert staging.glob_matches(gcs_emulator, "gs://data/t/train-*") == [
        "gs://data/t/train-0.tfrecord",
        "gs://data/t/train-1.tfrecord",
    ]
    assert staging.check_data(gcs_emulator, "gs://data/t/*.tfrecord") == 3
    with pytest.raises(
        jobs.JobError,
        match=r"no object matches --train_data=gs://data/x/\* "
        "in bucket 'data'",
    ):
        staging.check_data(gcs_emulator, "gs://data/x/*")


def test_submit_stages_then_creates_the_job(gcs_emulator, tmp_path):
    gcs_emulator.bucket("data").blob("d/train-0.tfrecord").upload_from_string(b"x")
    sdist = tmp_path / "trainer-0.1.0.tar.gz"
    sdist.write_bytes(b"pkg")
    s = spec(
        "chief_and_3_workers",
        trainer_args=("--train_data=gs://data/d/train-*",),
        package_uri="gs://stage/run-2/trainer-0.1.0.tar.gz",
    )
    job = jobs.custom_job(s)
    client = mock.Mock()  # the Vertex API is the boundary we cannot reach
    client.create_custom_job.return_value = v1.CustomJob(
        name="projects/proj/locations/europe-west4/customJobs/123"
    )
    name = submit_lib.submit(s, job, str(sdist), gcs_emulator, client)
    assert name.endswith("/customJobs/123")
    client.create_custom_job.assert_called_once_with(
        parent="projects/proj/locations/europe-west4", custom_job=job
    )
    assert gcs_emulator.bucket("stage").blob("run-2/trainer-0.1.0.tar.gz").exists()
    assert submit_lib.console_link(name, "proj") == (
        "https://console.cloud.google.com/vertex-ai/locations/europe-west4/training/123"
        "?project=proj"
    )


def test_submit_without_a_staged_package_uploads_nothing(gcs_emulator):
    s = spec("one_gpu", trainer_args=(), package_uri=None, display_name="baked")
    client = mock.Mock()
    client.create_custom_job.return_value = v1.CustomJob(name="projects/p/locations/r/customJobs/9")
    assert submit_lib.submit(s, jobs.custom_job(s), None, gcs_emulator, client).endswith("/9")
    assert not list(gcs_emulator.list_blobs("stage", prefix="baked"))


def test_submit_stops_before_creating_a_job_when_data_is_missing(gcs_emulator, tmp_path):
    sdist = tmp_path / "trainer-0.1.0.tar.gz"
    sdist.write_bytes(b"pkg")
    client = mock.Mock()
    s = spec("one_gpu", trainer_args=("--train_data=gs://data/none/*",))
    with pytest.raises(jobs.JobError, match="no object matches"):
        submit_lib.submit(s, jobs.custom_job(s), str(sdist), gcs_emulator, client)
    client.create_custom_job.assert_not_called()


@pytest.mark.parametrize(
    "error, fragment",
    [
        (gexc.Forbidden("denied"), "permission denied (403)"),
        (gexc.NotFound("no bucket"), "not found (404)"),
        (requests.ConnectionError("connection refused"), "network error (ConnectionError)"),
    ],
)
def test_storage_failures_are_explained(tmp_path, error, fragment):
    """Failure modes the emulator cannot produce: mocked at the client boundary."""
    client = mock.Mock()
    client.bucket.return_value.blob.return_value.upload_from_filename.side_effect = error
    client.list_blobs.side_effect = error
    with pytest.raises(jobs.JobError) as e:
        staging.upload(client, str(tmp_path / "p.tar.gz"), "gs://stage/x")
    assert str(e.value).startswith("cannot upload the package to gs://stage/x/p.tar.gz: ")
    assert fragment in str(e.value)
    with pytest.raises(jobs.JobError, match="^cannot list gs://data/t/\\*: "):
        staging.glob_matches(client, "gs://data/t/*")


def test_stream_follows_the_job_to_its_end():
    states = iter(
        [
            v1.JobState.JOB_STATE_PENDING,
            v1.JobState.JOB_STATE_RUNNING,
            v1.JobState.JOB_STATE_RUNNING,
            v1.JobState.JOB_STATE_SUCCEEDED,
        ]
    )
    client = mock.Mock()
    client.get_custom_job.side_effect = lambda name: v1.CustomJob(name=name, state=next(states))
    waits = []
    assert (
        submit_lib.stream(client, "projects/p/locations/r/customJobs/1", 5, clock=waits.append) == 0
    )
    assert waits == [5, 5, 5]


def submit_command(*args: str) -> subprocess.CompletedProcess:
    return run_python("scripts/submit.py", *args)


def dry_run(*flags: str) -> subprocess.CompletedProcess:
    return submit_command(
        "--project=proj",
        "--region=europe-west4",
        "--staging_dir=gs://stage",
        "--job_dir=gs://out/run-1",
        "--display_name=run-1",
        "--dry_run",
        *flags,
        "--",
        "--train_data=gs://data/train-*",
        "--label=y",
        "--task=binary",
    )


@pytest.mark.parametrize(
    "shape, flags, pools",
    [
        ("one_gpu", ["--accelerator_type=NVIDIA_TESLA_T4", "--accelerator_count=1"], [1]),
        (
            "four_gpus",
            [
                "--machine_type=a2-highgpu-4g",
                "--accelerator_type=NVIDIA_TESLA_A100",
                "--accelerator_count=4",
            ],
            [1],
        ),
        ("chief_and_3_workers", ["--workers=4"], [1, 3]),
        (
            "reduction_server",
            [
                "--machine_type=g2-standard-12",
                "--accelerator_type=NVIDIA_L4",
                "--accelerator_count=1",
                "--workers=2",
                "--reduction_servers=3",
            ],
            [1, 1, 3],
        ),
    ],
)
def test_dry_run_prints_json_vertex_accepts(shape, flags, pools):
    proc = dry_run(*flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = v1.CustomJob.from_json(proc.stdout)
    assert [p.replica_count for p in job.job_spec.worker_pool_specs] == pools
    chief = job.job_spec.worker_pool_specs[0].container_spec
    gpu = "cpu" if shape == "chief_and_3_workers" else "gpu"
    # No image flag: the package's own image, named after --project and --region.
    assert chief.image_uri == f"europe-west4-docker.pkg.dev/proj/trainer/train-{gpu}:{PINNED}"
    assert [(e.name, e.value) for e in chief.env] == [
        (contracts.PACKAGE_ENV, "gs://stage/run-1/trainer-0.1.0.tar.gz")
    ]
    assert list(chief.args) == ["--train_data=gs://data/train-*", "--label=y", "--task=binary"]
    assert json.loads(proc.stdout)["jobSpec"]["baseOutputDirectory"] == {
        "outputUriPrefix": "gs://out/run-1"
    }


def test_dry_run_sets_scheduling_persistent_resource_and_experiment_with_a_pinned_image():
    proc = submit_command(
        "--project=proj",
        "--region=europe-west4",
        "--staging_dir=/gcs/stage",  # Vertex's mount path is its gs:// twin
        "--job_dir=/gcs/out/run-1",
        "--display_name=run-1",
        "--machine_type=a3-highgpu-1g",
        "--accelerator_type=NVIDIA_H100_80GB",
        "--accelerator_count=1",
        "--scheduling_strategy=FLEX_START",
        "--max_wait_duration=2h",
        "--timeout=3d",
        "--disable_retries",
        "--persistent_resource_id=pool-1",
        "--experiment=churn",
        "--experiment_run=run-1",
        "--dry_run",
        "--",
        "--train_data=/gcs/data/train-*",
        "--label=y",
        "--task=binary",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = v1.CustomJob.from_json(proc.stdout)
    spec_ = job.job_spec
    assert spec_.scheduling.strategy == v1.Scheduling.Strategy.FLEX_START
    assert spec_.scheduling.max_wait_duration.total_seconds() == 7200
    assert spec_.scheduling.timeout.total_seconds() == 3 * 86400
    assert spec_.scheduling.disable_retries
    assert spec_.persistent_resource_id == "pool-1"
    contexts = "projects/proj/locations/europe-west4/metadataStores/default/contexts"
    assert (spec_.experiment, spec_.experiment_run) == (
        f"{contexts}/churn",
        f"{contexts}/churn-run-1",
    )
    assert spec_.base_output_directory.output_uri_prefix == "gs://out/run-1"
    container = spec_.worker_pool_specs[0].container_spec
    assert container.image_uri == f"europe-west4-docker.pkg.dev/proj/trainer/train-gpu:{PINNED}"
    assert container.env[0].value == "gs://stage/run-1/trainer-0.1.0.tar.gz"
    # The trainer's own flags pass as given: trainer.task reads /gcs/ paths too.
    assert list(container.args)[0] == "--train_data=/gcs/data/train-*"


@pytest.mark.parametrize(
    "flags, line",
    [
        (
            ["--scheduling_strategy=FLEX_START"],
            "error: --scheduling_strategy=FLEX_START needs GPUs Dynamic Workload Scheduler "
            "provisions",
        ),
        (["--max_wait_duration=2h"], "error: --max_wait_duration is how long FLEX_START waits"),
        (["--spot", "--scheduling_strategy=STANDARD"], "error: --spot and"),
        (["--timeout=soon"], "error: --timeout='soon': expected a duration"),
        (["--experiment_run=r"], "error: --experiment_run needs --experiment"),
    ],
)
def test_bad_scheduling_and_experiment_flags_are_one_line_and_exit_2(flags, line):
    proc = dry_run(*flags)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr[-500:]
    assert "Traceback" not in proc.stderr


class FakeExperiments:
    """google.cloud.aiplatform's Experiments calls, recorded (the boundary with Google)."""

    def __init__(self, runs=(), fail: Exception | None = None):
        self.runs, self.fail, self.calls = set(runs), fail, []
        self.Experiment = mock.Mock()
        self.Experiment.get_or_create.side_effect = self._experiment
        self.ExperimentRun = mock.Mock()
        self.ExperimentRun.get.side_effect = lambda run, **kw: run if run in self.runs else None
        self.ExperimentRun.create.side_effect = self._create

    def _experiment(self, name, **where):
        if self.fail:
            raise self.fail
        self.calls.append(("experiment", name, where))

    def _create(self, run, experiment, **where):
        self.calls.append(("create run", run, experiment, where))
        self.runs.add(run)


def test_submission_creates_the_missing_experiment_run_once():
    from trainer.vertex import experiments

    sdk = FakeExperiments()
    both = spec("one_gpu", experiment="churn", experiment_run="r1")
    experiments.ensure_run(both, sdk)
    experiments.ensure_run(both, sdk)
    where = {"project": "proj", "location": "europe-west4"}
    assert sdk.calls == [
        ("experiment", "churn", where),
        ("create run", "r1", "churn", where),
        ("experiment", "churn", where),
    ]
    experiments.ensure_run(spec("one_gpu"), sdk)  # no experiment: nothing asked
    assert len(sdk.calls) == 3
    denied = FakeExperiments(
        fail=gexc.PermissionDenied("caller lacks aiplatform.metadataStores\nmore")
    )
    with pytest.raises(jobs.JobError) as e:
        experiments.ensure_run(both, denied)
    assert str(e.value) == (
        "--experiment: cannot create run 'r1' of experiment 'churn': "
        "403 caller lacks aiplatform.metadataStores"
    )


def test_dry_run_with_tuning_config_and_errors(tmp_path):
    config = tmp_path / "hp.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "metric": "accuracy",
                "parameters": [
                    {"name": "learning_rate", "type": "double", "min": 0.001, "max": 0.1}
                ],
            }
        )
    )
    proc = dry_run(f"--hptune_config={config}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    job = v1.HyperparameterTuningJob.from_json(proc.stdout)
    assert job.study_spec.metrics[0].metric_id == "accuracy"
    bad = dry_run("--accelerator_type=NVIDIA_TESLA_T4", "--accelerator_count=3")
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .startswith("error: NVIDIA_TESLA_T4 on n1 machines comes in counts of")
    )
    retired = dry_run(f"--executor_image={RETIRED_IMAGE}")
    assert retired.returncode == 2
    assert retired.stderr.strip() == (
        f"error: --executor_image={RETIRED_IMAGE} reached its end of availability on "
        f"2026-07-11 and Vertex AI no longer accepts it ({images.SOURCE}); use the "
        "package's own image (see containers/), the default without --executor_image"
    )
    baked = dry_run("--nostage_package", "--image=europe-west4-docker.pkg.dev/p/r/mine:v2")
    assert baked.returncode == 0, baked.stderr[-2000:]
    container = v1.CustomJob.from_json(baked.stdout).job_spec.worker_pool_specs[0].container_spec
    assert container.image_uri.endswith("/mine:v2") and not container.env


def test_cloudbuild_steps_run_commands_of_this_repository():
    with open(os.path.join(REPO, "cloudbuild.yaml")) as f:
        build = yaml.safe_load(f)
    steps = build["steps"]
    assert [s["id"] for s in steps] == ["test", "submit"]
    for step in steps:
        script = " ".join(step.get("args", []))
        paths = [w for w in script.replace(";", " ").split() if w.startswith(("scripts/", ".ci/"))]
        assert paths, step["id"]
        for path in paths:
            assert os.path.exists(os.path.join(REPO, path)), path
    substitutions = set(build["substitutions"])
    assert {"_REGION", "_BUCKET", "_REPOSITORY"} <= substitutions
    used = {w for s in steps for a in s.get("args", []) for w in a.split("$")}
    for name in substitutions:
        assert any(u.startswith("{" + name + "}") for u in used), name


def test_container_build_pushes_the_images_submit_and_deploy_name():
    with open(os.path.join(REPO, "containers", "cloudbuild.yaml")) as f:
        build = yaml.safe_load(f)
    # The build's pinned tag is the one submit and deploy name by default.
    assert build["substitutions"]["_PINNED_TAG"] == images.PINNED_TAG == PINNED
    values = {
        "${_REGION}": "r",
        "$PROJECT_ID": "p",
        "${_TAG}": "latest",
        "${_PINNED_TAG}": PINNED,
        "${_REPOSITORY}": images.DEFAULT_REPOSITORY,
    }

    def resolve(text: str) -> str:
        for key, value in values.items():
            text = text.replace(key, value)
        return text

    defaults = {
        images.own_image("p", "r", role, gpu) for role in images.ROLES for gpu in (False, True)
    }
    latest = {i.replace(f":{PINNED}", ":latest") for i in defaults}
    assert {resolve(i) for i in build["images"]} == defaults | latest
    for step in build["steps"]:
        args = step["args"]
        target = args[args.index("--target") + 1]
        variant = args[args.index("--build-arg") + 1].split("=")[1]
        tags = {resolve(args[i + 1]) for i, a in enumerate(args) if a == "-t"}
        assert len(tags) == 2 and tags <= defaults | latest
        for tag in tags:
            assert images.own_kind(tag) == (target, variant)  # the image is what it is named
        assert args[args.index("-f") + 1] == "containers/Dockerfile"


def test_the_pinned_tag_names_the_tensorflow_the_images_install():
    with open(os.path.join(REPO, "containers", "Dockerfile")) as f:
        dockerfile = f.read()
    assert f"ARG TF_VERSION={images.IMAGE_TF_VERSION}\n" in dockerfile
    printed = subprocess.run(
        [sys.executable, "-m", "trainer.vertex.images"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert printed == PINNED == f"{trainer.__version__}-tf{images.IMAGE_TF_VERSION}"
    with open(os.path.join(REPO, "setup.py")) as f:
        assert f'version="{trainer.__version__}"' in f.read()


@pytest.mark.parametrize(
    "image, sdist, warned",
    [
        (
            "r-docker.pkg.dev/p/trainer/train-cpu:0.0.9-tf2.21.0",
            "/tmp/x/trainer-0.1.0.tar.gz",
            True,
        ),
        (
            "r-docker.pkg.dev/p/trainer/train-cpu:0.1.0-tf2.21.0",
            "/tmp/x/trainer-0.1.0.tar.gz",
            False,
        ),
        ("r-docker.pkg.dev/p/trainer/train-cpu:latest", "/tmp/x/trainer-0.1.0.tar.gz", False),
        ("r-docker.pkg.dev/p/trainer/train-cpu:0.0.9-tf2.21.0", None, False),
    ],
)
def test_a_staged_package_of_another_version_than_the_image_is_named(image, sdist, warned):
    line = images.version_mismatch(image, sdist)
    assert bool(line) == warned
    if warned:
        assert "trainer 0.1.0" in line and "trainer 0.0.9 (TensorFlow 2.21.0)" in line


def test_labels_are_key_value_pairs_and_a_bad_one_is_named():
    assert jobs.parse_labels(["team=ml", "run=a=b"]) == (("team", "ml"), ("run", "a=b"))
    with pytest.raises(jobs.JobError, match="--labels: 'oops' is not key=value"):
        jobs.parse_labels(["team=ml", "oops"])
