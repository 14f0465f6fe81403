"""Builds, runs or submits the package's Vertex AI pipeline: prepare -> train -> register
-> deploy (trainer/vertex/pipeline.py).

    python scripts/pipeline.py --project=P --region=us-central1 \
        --job_dir=gs://B/jobs/run-1 --pipeline_root=gs://B/pipelines \
        --input='gs://B/raw/*.csv' --label=y --task=binary \
        --scheduling_strategy=FLEX_START --machine_type=g2-standard-8 \
        --accelerator_type=NVIDIA_L4 --accelerator_count=1 \
        --parent_model=123 --endpoint=new --submit --dry_run -- --train_steps=5000

The training job takes every flag trainer-submit does (scheduling, experiment, machines),
and the flags after `--` go to trainer.task. --compile=FILE writes the pipeline spec;
--submit creates a PipelineJob (with --dry_run: prints it); --run_local runs the prepare
and train steps here, on kfp.local, against --fake_gcs_root.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile

from absl import app, flags

from trainer.base import cli
from trainer.base import config as config_lib
from trainer.base import storage as storage_lib
from trainer.vertex import checks, exports, images, job_flags, jobs, models

FLAGS = flags.FLAGS
# The job's flags (trainer.vertex.job_flags) are this command's own, in --help too.
flags.adopt_module_key_flags(job_flags)
flags.DEFINE_string("input", None, "CSV or Parquet files to prepare: a glob, gs://.")
flags.DEFINE_string("bigquery_table", None, "Or a BigQuery table, PROJECT.DATASET.TABLE.")
flags.DEFINE_string("label", None, "The target column.")
flags.DEFINE_enum("task", None, list(config_lib.TASKS), "What the label is.")
flags.DEFINE_string("split", "random:0.8,0.1,0.1", "trainer.prepare's --split.")
flags.DEFINE_string("data_dir", None, "Where the prepared TFRecords go; default <job_dir>/data.")
flags.DEFINE_string(
    "pipeline_root", None, "gs:// folder of the pipeline's own files; default <job_dir>/pipeline."
)
flags.DEFINE_string(
    "parent_model", None, "Register the model as a new version of this model (ID or name)."
)
flags.DEFINE_string(
    "endpoint", None, "Deploy to this endpoint (ID, name, or 'new'); unset: register only."
)
flags.DEFINE_string("serving_image", None, "Prediction image; default: the package's, pinned.")
flags.DEFINE_string("serving_machine_type", "n1-standard-2", "The endpoint's machine type.")
flags.DEFINE_bool("register", True, "Register (and with --endpoint deploy) the trained model.")
flags.DEFINE_string("compile", None, "Write the pipeline spec (YAML) to this local file.")
flags.DEFINE_bool("submit", False, "Create a Vertex AI PipelineJob that runs it.")
flags.DEFINE_bool("dry_run", False, "With --submit: print the PipelineJob; create nothing.")
flags.DEFINE_bool(
    "run_local", False, "Run the prepare and train steps here (kfp.local), on --fake_gcs_root."
)
flags.DEFINE_string(
    "fake_gcs_root", None, "Serve gs://BUCKET/PATH from DIR/BUCKET/PATH (with --run_local)."
)


def settings_from_flags(trainer_args: tuple[str, ...]):
    """The pipeline the flags describe.

    Raises:
      jobs.JobError: naming the flag at fault.
    """
    from trainer.vertex import pipeline

    for name in ("project", "job_dir", "label", "task"):
        if not FLAGS[name].value:
            raise jobs.JobError(f"--{name} is required")
    if bool(FLAGS.input) == bool(FLAGS.bigquery_table):
        raise jobs.JobError("give one of --input and --bigquery_table: the table to train on")
    actions = [FLAGS.compile, FLAGS.submit, FLAGS.run_local]
    if not any(actions) or (FLAGS.run_local and any(actions[:2])):
        raise jobs.JobError("give --compile=FILE and/or --submit, or --run_local")
    if FLAGS.run_local and not FLAGS.fake_gcs_root:
        raise jobs.JobError("--run_local needs --fake_gcs_root: the steps read and write there")
    name = job_flags.display_name()
    job = job_flags.spec_from_flags(
        name, None, (f"--label={FLAGS.label}", f"--task={FLAGS.task}", *trainer_args)
    )
    job_dir = job.job_dir.rstrip("/")
    deploy = None
    if FLAGS.register and not FLAGS.run_local:
        deploy = models.DeploySpec(
            project=FLAGS.project,
            region=FLAGS.region,
            model_dir=storage_lib.join(job_dir, "model"),
            display_name=name,
            serving_image=FLAGS.serving_image
            or exports.default_image(FLAGS.project, FLAGS.region, False, FLAGS.repository),
            parent_model=FLAGS.parent_model,
            labels=job.labels,
            endpoint=FLAGS.endpoint,
            machine_type=FLAGS.serving_machine_type,
        )
        models.check(deploy)
    if not FLAGS.run_local:
        checks.check_all(job)
    return pipeline.Settings(
        name=name,
        # The steps around the job need no GPU: the CPU twin of the training image.
        image=FLAGS.image
        or images.own_image(FLAGS.project, FLAGS.region, "train", False, FLAGS.repository),
        data=storage_lib.canonical(FLAGS.data_dir or storage_lib.join(job_dir, "data")),
        label=FLAGS.label,
        job=job,
        input=storage_lib.canonical(FLAGS.input or ""),
        bigquery_table=FLAGS.bigquery_table or "",
        split=FLAGS.split,
        deploy=deploy,
        local=FLAGS.run_local,
        fake_gcs_root=os.path.abspath(FLAGS.fake_gcs_root) if FLAGS.fake_gcs_root else "",
    )


def main(argv: list[str]) -> int:
    logging.getLogger().setLevel(logging.INFO)
    try:
        from trainer.vertex import pipeline
    except ImportError as e:
        print(f"error: {e.name} is missing: pip install '.[pipelines]'", file=sys.stderr)
        return 2
    try:
        settings = settings_from_flags(tuple(argv[1:]))
        pipeline_root = storage_lib.canonical(
            FLAGS.pipeline_root or storage_lib.join(settings.job.job_dir, "pipeline")
        )
        if FLAGS.run_local:
            store = storage_lib.Storage(settings.fake_gcs_root)
            try:
                pipeline.run_here(settings, store.path(pipeline_root))
            except RuntimeError as e:  # kfp's: the step's own error is in its log above
                step = re.search(r"Inner task failed: \W*(\w[\w-]*)", _plain(str(e)))
                print(
                    f"error: the pipeline's step {step[1] if step else '?'!r} failed; "
                    "its log above ends with why",
                    file=sys.stderr,
                )
                return 1
            print(storage_lib.join(settings.job.job_dir, "model"))
            return 0
        if FLAGS.compile:
            pipeline.compile_to(settings, FLAGS.compile)
            print(f"wrote {FLAGS.compile}", file=sys.stderr)
        if FLAGS.submit:
            return submit(settings, pipeline, pipeline_root)
    except (jobs.JobError, storage_lib.StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _plain(text: str) -> str:
    """`text` without the terminal colours kfp's messages carry."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def submit(settings, pipeline, pipeline_root: str) -> int:
    """--submit: the PipelineJob, printed (--dry_run) or created."""
    from google.cloud import aiplatform_v1 as v1

    if not storage_lib.is_gcs(pipeline_root):
        raise jobs.JobError(f"--pipeline_root={pipeline_root!r}: Vertex needs a gs:// location")
    with tempfile.TemporaryDirectory() as tmp:
        path = FLAGS.compile or os.path.join(tmp, "pipeline.yaml")
        if not FLAGS.compile:
            pipeline.compile_to(settings, path)
        job = pipeline.pipeline_job(settings, path, pipeline_root)
    if FLAGS.dry_run:
        print(jobs.to_json(job))
        return 0
    client = v1.PipelineServiceClient(
        client_options={"api_endpoint": f"{FLAGS.region}-aiplatform.googleapis.com"}
    )
    created = client.create_pipeline_job(parent=settings.job.parent, pipeline_job=job)
    print(created.name)
    return 0


def run() -> None:
    """The console command."""
    app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
    run()
