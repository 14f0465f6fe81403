"""The flags that describe a training job on Vertex AI, shared by trainer-submit and
the pipeline command (trainer/vertex/pipeline_command.py), and the JobSpec they make."""

from __future__ import annotations

import datetime

from absl import flags

from trainer.base import storage as storage_lib
from trainer.vertex import checks, images, jobs

FLAGS = flags.FLAGS
flags.DEFINE_string("project", None, "Google Cloud project.")
flags.DEFINE_string("region", "us-central1", "Vertex AI region.")
flags.DEFINE_string(
    "job_dir",
    None,
    "gs:// base output directory of the job (model/, checkpoints/, logs/ below it).",
)
flags.DEFINE_string("display_name", None, "Job name; default trainer-<timestamp>.")
flags.DEFINE_string("machine_type", "n1-standard-8", "Machine type of every training VM.")
flags.DEFINE_string("accelerator_type", None, "e.g. NVIDIA_TESLA_T4, NVIDIA_L4.")
flags.DEFINE_integer("accelerator_count", 0, "GPUs per training VM.")
flags.DEFINE_integer("workers", 1, "Training VMs, chief included.")
flags.DEFINE_integer("reduction_servers", 0, "Reduction Server replicas (pool 2).")
flags.DEFINE_string("reduction_server_machine_type", "n1-highcpu-16", "Their machine type.")
flags.DEFINE_string(
    "image",
    None,
    "Training image; default: the package's own, "
    f"{images.own_image('PROJECT', 'REGION', 'train', False)} (train-gpu "
    "with accelerators), built by containers/cloudbuild.yaml.",
)
flags.DEFINE_string(
    "repository", images.DEFAULT_REPOSITORY, "Artifact Registry repository of the default images."
)
flags.DEFINE_string("service_account", None, "Service account the job runs as.")
flags.DEFINE_list("labels", [], "key=value labels.")
flags.DEFINE_string(
    "timeout", None, "Longest the job may run, e.g. 3600, 90m, 12h, 2d; unset: Vertex's 7 days."
)
flags.DEFINE_alias("timeout_s", "timeout")
flags.DEFINE_bool(
    "restart_job_on_worker_restart",
    None,
    "Restart every worker when one restarts; default: on for multi-worker jobs.",
)
flags.DEFINE_enum(
    "scheduling_strategy",
    None,
    list(checks.STRATEGIES),
    "STANDARD: on-demand VMs; SPOT: cheaper, preemptible; FLEX_START: Dynamic "
    "Workload Scheduler, GPUs when capacity frees up (A100, H100, H200, B200, L4; the "
    "same machine in every pool; at most 7 days). Unset: Vertex's default.",
    case_sensitive=False,
)
flags.DEFINE_bool("spot", False, "Same as --scheduling_strategy=SPOT.")
flags.DEFINE_string(
    "max_wait_duration",
    None,
    "FLEX_START: how long to wait for the machines, e.g. 2h, 30m, 3600; unset: 24 h.",
)
flags.DEFINE_bool(
    "disable_retries", False, "Fail the job at the first error instead of Vertex's retries."
)
flags.DEFINE_string(
    "persistent_resource_id",
    None,
    "Run on this Vertex AI persistent resource (reserved machines, no VM start-up).",
)
flags.DEFINE_string(
    "experiment", None, "Vertex AI Experiments experiment the job belongs to (created if missing)."
)
flags.DEFINE_string(
    "experiment_run",
    None,
    "Run of --experiment the job logs its plan and final metrics to (created if missing).",
)
flags.DEFINE_string("tensorboard", None, "Vertex TensorBoard instance resource name.")


def display_name() -> str:
    """--display_name, or trainer-<timestamp>."""
    return FLAGS.display_name or datetime.datetime.now().strftime("trainer-%Y%m%d-%H%M%S")


def scheduling_strategy() -> str | None:
    """--scheduling_strategy, with --spot as its SPOT."""
    if FLAGS.spot and FLAGS.scheduling_strategy not in (None, "SPOT"):
        raise jobs.JobError(
            f"--spot and --scheduling_strategy={FLAGS.scheduling_strategy} disagree: give one"
        )
    return "SPOT" if FLAGS.spot else FLAGS.scheduling_strategy


def spec_from_flags(
    name: str, package_uri: str | None, trainer_args: tuple, executor_image: str | None = None
) -> jobs.JobSpec:
    """The job the flags describe, named `name`, installing the sdist at `package_uri`
    if given."""
    image = FLAGS.image or images.own_image(
        FLAGS.project, FLAGS.region, "train", bool(FLAGS.accelerator_count), FLAGS.repository
    )
    return jobs.JobSpec(
        project=FLAGS.project,
        region=FLAGS.region,
        display_name=name,
        package_uri=package_uri,
        job_dir=storage_lib.canonical(FLAGS.job_dir),
        trainer_args=trainer_args,
        image=image,
        executor_image=executor_image,
        machine_type=FLAGS.machine_type,
        accelerator_type=FLAGS.accelerator_type,
        accelerator_count=FLAGS.accelerator_count,
        workers=FLAGS.workers,
        reduction_servers=FLAGS.reduction_servers,
        reduction_server_machine_type=FLAGS.reduction_server_machine_type,
        service_account=FLAGS.service_account,
        labels=jobs.parse_labels(FLAGS.labels),
        timeout_s=jobs.parse_duration("timeout", FLAGS.timeout) if FLAGS.timeout else None,
        restart_job_on_worker_restart=FLAGS.restart_job_on_worker_restart,
        scheduling_strategy=scheduling_strategy(),
        max_wait_s=(
            jobs.parse_duration("max_wait_duration", FLAGS.max_wait_duration)
            if FLAGS.max_wait_duration
            else None
        ),
        disable_retries=FLAGS.disable_retries,
        persistent_resource_id=FLAGS.persistent_resource_id,
        experiment=FLAGS.experiment,
        experiment_run=FLAGS.experiment_run,
        tensorboard=FLAGS.tensorboard,
    )
