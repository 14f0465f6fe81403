"""Submits the trainer to Vertex AI as a custom job (or hyperparameter tuning job).

    trainer-submit --project=P --region=us-central1 \
        --staging_dir=gs://B/staging --job_dir=gs://B/jobs/run-1 \
        --machine_type=n1-standard-8 --accelerator_type=NVIDIA_TESLA_T4 \
        --accelerator_count=1 --workers=1 --dry_run -- \
        --train_data='gs://B/data/train-*' --label=y --task=binary

Flags after `--` go to `trainer.task`. The pools run the package's training image
(containers/; its name follows from --project, --region and --repository), which
installs the sdist of the current code, staged under --staging_dir, when it starts.
--dry_run builds and checks everything, uploads nothing and prints the job as REST JSON.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app, flags

from trainer.base import cli
from trainer.base import storage as storage_lib
from trainer.vertex import checks, experiments, images, job_flags, jobs, staging
from trainer.vertex import submit as submit_lib

FLAGS = flags.FLAGS
# The job's flags (trainer.vertex.job_flags) are this command's own, in --help too.
flags.adopt_module_key_flags(job_flags)
flags.DEFINE_string("staging_dir", None, "gs:// folder for the package.")
flags.DEFINE_bool(
    "stage_package",
    True,
    "Stage the current code's sdist and install it "
    "when the job starts (seconds); --nostage_package runs the code built "
    "into --image.",
)
flags.DEFINE_string(
    "executor_image",
    None,
    "Run in a prebuilt training image as a python "
    "package instead (refused past its end of availability, see "
    "trainer/vertex/images.py).",
)
flags.DEFINE_string("hptune_config", None, "YAML or JSON study: makes it a tuning job.")
flags.DEFINE_bool("dry_run", False, "Print the job as JSON; upload and submit nothing.")
flags.DEFINE_bool("stream", False, "After submitting, log the job's state until it ends.")
flags.DEFINE_bool(
    "deploy",
    False,
    "With --stream: once the job succeeds, register its model "
    "with its evaluation, as trainer-deploy does.",
)


def load_config(path: str) -> dict:
    import yaml  # JSON is YAML too

    try:
        with open(path) as f:
            return yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise jobs.JobError(f"--hptune_config={path}: {e}") from None


def spec_from_flags(name: str, sdist: str | None, trainer_args: tuple) -> jobs.JobSpec:
    """The job the flags describe, named `name`, installing `sdist` if given."""
    staging_dir = storage_lib.canonical(FLAGS.staging_dir or "")
    package_uri = f"{staging_dir.rstrip('/')}/{name}/{os.path.basename(sdist)}" if sdist else None
    return job_flags.spec_from_flags(name, package_uri, trainer_args, FLAGS.executor_image)


def main(argv: list[str]) -> int:
    logging.getLogger().setLevel(logging.INFO)
    try:
        for name in ("project", "job_dir") + (("staging_dir",) if FLAGS.stage_package else ()):
            if not FLAGS[name].value:
                raise jobs.JobError(f"--{name} is required")
        if FLAGS.deploy and not (FLAGS.stream or FLAGS.dry_run):
            raise jobs.JobError(
                "--deploy needs --stream: the model exists once the job has succeeded"
            )
        name = job_flags.display_name()
        sdist = staging.build_sdist() if FLAGS.stage_package else None
        spec = spec_from_flags(name, sdist, tuple(argv[1:]))
        checks.check_all(spec, tuning=bool(FLAGS.hptune_config))
        mismatch = images.version_mismatch(spec.image, sdist) if not spec.executor_image else None
        if mismatch:
            logging.warning("%s", mismatch)
        job = (
            jobs.hptune_job(spec, load_config(FLAGS.hptune_config), FLAGS.hptune_config)
            if FLAGS.hptune_config
            else jobs.custom_job(spec)
        )
        if FLAGS.dry_run:
            print(jobs.to_json(job))
            return 0
        from google.cloud import aiplatform_v1
        from google.cloud.storage import Client

        job_client = aiplatform_v1.JobServiceClient(
            client_options={"api_endpoint": f"{FLAGS.region}-aiplatform.googleapis.com"}
        )
        experiments.ensure_run(spec)
        resource = submit_lib.submit(spec, job, sdist, Client(project=FLAGS.project), job_client)
    except jobs.JobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(resource)
    print(submit_lib.console_link(resource, FLAGS.project))
    if not FLAGS.stream:
        return 0
    code = submit_lib.stream(job_client, resource)
    if code or not FLAGS.deploy:
        return code
    return register(spec)


def register(spec: jobs.JobSpec) -> int:
    """--deploy: the finished job's model into the Model Registry."""
    from trainer.base import storage as storage_lib
    from trainer.vertex import deploy, exports

    try:
        model, evaluation = deploy.register_job_model(
            spec.project,
            spec.region,
            spec.job_dir,
            spec.display_name,
            spec.labels,
            storage_lib.Storage(),
            deploy.clients(spec.region)[0],
        )
    except (jobs.JobError, exports.ExportError, storage_lib.StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"model: {model}\nevaluation: {evaluation}")
    return 0


def run() -> None:
    """The console command."""
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
