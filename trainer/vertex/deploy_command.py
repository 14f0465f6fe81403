"""Registers an exported model in the Vertex AI Model Registry, with its evaluation, and
serves it: on an endpoint (--endpoint) and/or as a batch prediction job (--batch_input).

    trainer-deploy --project=P --region=us-central1 \
        --model_dir=gs://B/jobs/run-1/model --endpoint=new --dry_run

--dry_run checks everything, uploads and creates nothing, and prints every request as
REST JSON: {"model", "modelEvaluation", "deployedModel", "batchPredictionJob"}.
"""

from __future__ import annotations

import json
import logging
import sys

from absl import app, flags

from trainer.base import cli
from trainer.base import storage as storage_lib
from trainer.vertex import deploy, exports, images, jobs, models

FLAGS = flags.FLAGS
flags.DEFINE_string("project", None, "Google Cloud project.")
flags.DEFINE_string("region", "us-central1", "Vertex AI region (of the model and endpoint).")
flags.DEFINE_string("model_dir", None, "gs:// export of trainer.task, e.g. <job_dir>/model.")
flags.DEFINE_string("display_name", None, "Model name; default: the export folder's parent.")
flags.DEFINE_string("parent_model", None, "Model ID or resource name: upload a new version.")
flags.DEFINE_list("labels", [], "key=value labels.")
flags.DEFINE_string(
    "serving_image",
    None,
    "Prediction image; default: the package's own, "
    f"{exports.default_image('PROJECT', 'REGION', False)} (serve-gpu with "
    "--accelerator_type), built by containers/cloudbuild.yaml. A prebuilt TF "
    "image works until its end of availability, with a warning.",
)
flags.DEFINE_string(
    "repository", images.DEFAULT_REPOSITORY, "Artifact Registry repository of the default image."
)
flags.DEFINE_string("endpoint", None, "Endpoint ID or resource name to deploy to, or 'new'.")
flags.DEFINE_string("machine_type", "n1-standard-2", "Serving machine type.")
flags.DEFINE_integer("min_replicas", 1, "Serving replicas at least.")
flags.DEFINE_integer("max_replicas", 1, "Serving replicas at most (autoscaling).")
flags.DEFINE_string("accelerator_type", None, "e.g. NVIDIA_TESLA_T4, NVIDIA_L4.")
flags.DEFINE_integer("accelerator_count", 0, "GPUs per serving replica.")
flags.DEFINE_string("batch_input", None, "gs:// glob of TFRecord files to predict in batch.")
flags.DEFINE_string("batch_output", None, "gs:// folder for the batch predictions.")
flags.DEFINE_string(
    "examples",
    "gs://BUCKET/data/eval-*.tfrecord",
    "Examples named in the printed prediction commands.",
)
flags.DEFINE_string(
    "fake_gcs_root",
    None,
    "Serve every gs://BUCKET/PATH from DIR/BUCKET/PATH (to check a local export with --dry_run).",
)
flags.DEFINE_bool("dry_run", False, "Print the requests as JSON; upload and create nothing.")


def spec_from_flags() -> models.DeploySpec:
    model_dir = storage_lib.canonical(FLAGS.model_dir or "").rstrip("/")
    return models.DeploySpec(
        project=FLAGS.project,
        region=FLAGS.region,
        model_dir=model_dir,
        # gs://B/jobs/run-1/model is named run-1, after its job.
        display_name=FLAGS.display_name or model_dir.split("/")[-2],
        serving_image=FLAGS.serving_image
        or exports.default_image(
            FLAGS.project, FLAGS.region, bool(FLAGS.accelerator_type), FLAGS.repository
        ),
        parent_model=FLAGS.parent_model,
        labels=jobs.parse_labels(FLAGS.labels),
        endpoint=FLAGS.endpoint,
        machine_type=FLAGS.machine_type,
        min_replicas=FLAGS.min_replicas,
        max_replicas=FLAGS.max_replicas,
        accelerator_type=FLAGS.accelerator_type,
        accelerator_count=FLAGS.accelerator_count,
        batch_input=FLAGS.batch_input and storage_lib.canonical(FLAGS.batch_input),
        batch_output=FLAGS.batch_output and storage_lib.canonical(FLAGS.batch_output),
    )


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(logging.INFO)
    try:
        spec = spec_from_flags()
        export = deploy.prepare(spec, storage_lib.Storage(FLAGS.fake_gcs_root))
        if FLAGS.dry_run:
            print(json.dumps(models.dry_run(spec, export), indent=2, sort_keys=True))
            return 0
        result = deploy.run(spec, export, *deploy.clients(spec.region))
    except (jobs.JobError, exports.ExportError, storage_lib.StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"model: {result.model}\nevaluation: {result.evaluation}")
    if result.endpoint:
        print(f"endpoint: {result.endpoint}\nto predict:")
        for command in deploy.prediction_commands(spec, result.endpoint, FLAGS.examples):
            print(f"  {command}")
    if result.batch_prediction_job:
        print(
            f"batch prediction job: {result.batch_prediction_job} "
            f"(predictions to {spec.batch_output})"
        )
    return 0


def run() -> None:
    """The console command."""
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
