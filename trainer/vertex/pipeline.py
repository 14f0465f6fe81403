"""The package's Vertex AI pipeline (KFP 2, the `pipelines` extra): prepare -> train ->
register -> deploy, each step a component around trainer.vertex.pipeline_steps.

Every component runs in the package's training image, pinned to this code's version
(trainer.vertex.images), so the code a scheduled run executes is the code that was
compiled. Settings are fixed when the pipeline is built: a compiled pipeline is one job,
as trainer-submit's dry run is, and reruns (or a schedule) repeat it. The stock
CustomTrainingJobOp lacks `scheduling.strategy` and `max_wait_duration`
(kubeflow/pipelines#11225); the train component submits our own CustomJob instead.
"""

# No `from __future__ import annotations`: kfp reads the components' types at runtime.
import dataclasses
from typing import Any

from kfp import compiler, dsl

from trainer.vertex import jobs, models, pipeline_steps

# trainer.prepare reads tables with Arrow, and BigQuery through its Storage Read API:
# the `prepare` extra's light part (Beam stays out), installed when the step starts.
PREPARE_PACKAGES = [
    "pyarrow>=14",
    "google-cloud-bigquery>=3.10",
    "google-cloud-bigquery-storage>=2.20",
]


# The components' bodies run in the image, so each imports what it needs itself.
def prepare(
    output: str, label: str, input: str, bigquery_table: str, split: str, fake_gcs_root: str
) -> str:
    from trainer.vertex import pipeline_steps

    return pipeline_steps.prepare(output, label, input, bigquery_table, split, fake_gcs_root)


def train(job: dict, data: str) -> str:
    from trainer.vertex import pipeline_steps

    return pipeline_steps.train_on_vertex(job, data)


def train_here(data: str, job_dir: str, trainer_args: list, fake_gcs_root: str) -> str:
    from trainer.vertex import pipeline_steps

    return pipeline_steps.train_here(data, job_dir, trainer_args, fake_gcs_root)


def register(deploy: dict, model_dir: str) -> str:
    from trainer.vertex import pipeline_steps

    return pipeline_steps.register(deploy, model_dir)


def deploy(deploy: dict, model_name: str) -> str:
    from trainer.vertex import pipeline_steps

    return pipeline_steps.deploy(deploy, model_name)


@dataclasses.dataclass(frozen=True)
class Settings:
    """One pipeline: its data, its training job, where its model goes.

    `deploy` None: no register and deploy steps; `deploy.endpoint` None: registered
    only. `local`: prepare and train run here (kfp.local), against `fake_gcs_root`.
    """

    name: str
    image: str
    data: str  # trainer.prepare's output folder
    label: str
    job: jobs.JobSpec
    input: str = ""
    bigquery_table: str = ""
    split: str = "random:0.8,0.1,0.1"
    deploy: models.DeploySpec | None = None
    local: bool = False
    fake_gcs_root: str = ""


def build(settings: Settings) -> Any:
    """The pipeline function (kfp's), ready to compile or to run on kfp.local."""

    def component(func, **options):
        return dsl.component(func, base_image=settings.image, **options)

    s = settings

    @dsl.pipeline(name=s.name, description="trainer: prepare, train, register, deploy")
    def pipeline():
        data = component(prepare, packages_to_install=PREPARE_PACKAGES)(
            output=s.data,
            label=s.label,
            input=s.input,
            bigquery_table=s.bigquery_table,
            split=s.split,
            fake_gcs_root=s.fake_gcs_root,
        )
        if s.local:
            component(train_here)(
                data=data.output,
                job_dir=s.job.job_dir,
                trainer_args=list(s.job.trainer_args),
                fake_gcs_root=s.fake_gcs_root,
            )
            return
        model_dir = component(train)(job=pipeline_steps.to_json(s.job), data=data.output)
        if s.deploy is None:
            return
        spec = pipeline_steps.to_json(s.deploy)
        model = component(register)(deploy=spec, model_dir=model_dir.output)
        if s.deploy.endpoint:
            component(deploy)(deploy=spec, model_name=model.output)

    return pipeline


def compile_to(settings: Settings, path: str) -> None:
    """Writes the pipeline spec (YAML, as kfp.compiler writes it) to the local `path`."""
    compiler.Compiler().compile(pipeline_func=build(settings), package_path=path)


def run_here(settings: Settings, pipeline_root: str) -> None:
    """Runs the pipeline on kfp.local, each step a process in this environment.

    Raises:
      RuntimeError: (kfp's) naming the step that failed.
    """
    import warnings

    from kfp import local

    # Here the steps run in this environment, which has what the image has; kfp warns
    # that the image named is not a plain Python one.
    warnings.filterwarnings("ignore", message=".*custom or non-Python base image")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=pipeline_root)
    build(settings)()


def pipeline_job(settings: Settings, spec_path: str, pipeline_root: str) -> Any:
    """The aiplatform_v1 PipelineJob that runs the compiled spec at `spec_path`, its
    artifacts under `pipeline_root` (gs://), as the job's service account."""
    import yaml
    from google.cloud import aiplatform_v1 as v1

    with open(spec_path) as f:
        spec = yaml.safe_load(f)
    job = v1.PipelineJob(
        display_name=settings.name,
        runtime_config=v1.PipelineJob.RuntimeConfig(gcs_output_directory=pipeline_root),
        labels=dict(settings.job.labels),
    )
    job.pipeline_spec = spec
    if settings.job.service_account:
        job.service_account = settings.job.service_account
    return job
