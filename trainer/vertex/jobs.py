"""Vertex AI job requests for the trainer: CustomJob and HyperparameterTuningJob protos.

Pure functions of a `JobSpec`: nothing here talks to Google Cloud, so every field can be
checked in tests and printed by `--dry_run` before a job costs anything.

Worker pools follow Vertex's fixed order: pool 0 the chief (one replica), pool 1 the other
workers, pool 2 Reduction Server (or parameter servers), pool 3 evaluators.
"""

from __future__ import annotations

import dataclasses
import re

from google.cloud import aiplatform_v1 as v1
from google.protobuf import duration_pb2

from trainer.base import contracts

REDUCTION_SERVER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"
GOALS = {
    "maximize": v1.StudySpec.MetricSpec.GoalType.MAXIMIZE,
    "minimize": v1.StudySpec.MetricSpec.GoalType.MINIMIZE,
}
SCALES = {
    "linear": v1.StudySpec.ParameterSpec.ScaleType.UNIT_LINEAR_SCALE,
    "log": v1.StudySpec.ParameterSpec.ScaleType.UNIT_LOG_SCALE,
    "reverse_log": v1.StudySpec.ParameterSpec.ScaleType.UNIT_REVERSE_LOG_SCALE,
}


class JobError(ValueError):
    """A job description that Vertex would reject or run wrongly; the message names it."""


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What to run and where. `workers` counts training machines, chief included.

    The pools run `image` (the package's training image) through a containerSpec, with
    the staged sdist at `package_uri` installed at start (None: the image's own copy of
    the package runs); or, when `executor_image` is set, a python package spec of that
    prebuilt image with the sdist.
    """

    project: str
    region: str
    display_name: str
    package_uri: str | None
    job_dir: str
    trainer_args: tuple[str, ...] = ()
    image: str = ""
    executor_image: str | None = None
    machine_type: str = "n1-standard-8"
    accelerator_type: str | None = None
    accelerator_count: int = 0
    workers: int = 1
    reduction_servers: int = 0
    reduction_server_machine_type: str = "n1-highcpu-16"
    service_account: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    timeout_s: int | None = None
    restart_job_on_worker_restart: bool | None = None  # None: on for multi-worker jobs
    # STANDARD, SPOT or FLEX_START (Dynamic Workload Scheduler); None: Vertex's default.
    scheduling_strategy: str | None = None
    max_wait_s: int | None = None  # FLEX_START: how long to wait for the machines
    disable_retries: bool = False
    persistent_resource_id: str | None = None
    experiment: str | None = None  # Vertex AI Experiments: experiment and run names
    experiment_run: str | None = None
    tensorboard: str | None = None

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"


def parse_labels(values: list[str]) -> tuple[tuple[str, str], ...]:
    """--labels key=value,... as (key, value) pairs.

    Raises:
      JobError: naming a label without '='.
    """
    labels = []
    for label in values:
        key, sep, value = label.partition("=")
        if not sep:
            raise JobError(f"--labels: {label!r} is not key=value")
        labels.append((key, value))
    return tuple(labels)


_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(flag: str, text: str) -> int:
    """Seconds in '3600', '90s', '30m', '2h', '1h30m' or '7d'.

    Raises:
      JobError: naming `flag` when `text` is none of those or is zero.
    """
    text = text.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        m = _DURATION.fullmatch(text)
        if not text or not m:
            raise JobError(
                f"--{flag}={text!r}: expected a duration such as 3600, 90s, 30m, 2h or 1d"
            )
        d, h, mi, s = (int(g or 0) for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    if seconds <= 0:
        raise JobError(f"--{flag}={text!r}: expected a duration longer than 0 seconds")
    return seconds


def experiment_names(spec: JobSpec) -> tuple[str, str | None]:
    """The resource names of the spec's experiment and run, as CustomJobSpec takes them:
    Vertex AI Experiments keeps both as contexts of the region's default metadata
    store, a run's named <experiment>-<run>."""
    contexts = f"{spec.parent}/metadataStores/default/contexts"
    run = f"{contexts}/{spec.experiment}-{spec.experiment_run}" if spec.experiment_run else None
    return f"{contexts}/{spec.experiment}", run


def machine_spec(spec) -> v1.MachineSpec:
    """The machine of a JobSpec (or of anything with machine_type, accelerator_type and
    accelerator_count)."""
    machine = v1.MachineSpec(machine_type=spec.machine_type)
    if spec.accelerator_type:
        machine.accelerator_type = v1.AcceleratorType[spec.accelerator_type]  # type: ignore[misc]  # proto-plus enums index by name
        machine.accelerator_count = spec.accelerator_count
    return machine


def custom_job_spec(spec: JobSpec) -> v1.CustomJobSpec:
    """The job's pools, outputs and scheduling."""
    pools = [v1.WorkerPoolSpec(machine_spec=machine_spec(spec), replica_count=1, **_program(spec))]
    if spec.workers > 1:
        pools.append(
            v1.WorkerPoolSpec(
                machine_spec=machine_spec(spec), replica_count=spec.workers - 1, **_program(spec)
            )
        )
    if spec.reduction_servers:
        pools.append(
            v1.WorkerPoolSpec(
                machine_spec=v1.MachineSpec(machine_type=spec.reduction_server_machine_type),
                replica_count=spec.reduction_servers,
                container_spec=v1.ContainerSpec(image_uri=REDUCTION_SERVER_IMAGE),
            )
        )
    restart = spec.restart_job_on_worker_restart
    if restart is None:
        # A restarted worker cannot rejoin running collectives: restart them all.
        restart = spec.workers > 1
    scheduling = v1.Scheduling(restart_job_on_worker_restart=restart)
    if spec.timeout_s:
        scheduling.timeout = duration_pb2.Duration(seconds=spec.timeout_s)
    if spec.scheduling_strategy:
        scheduling.strategy = v1.Scheduling.Strategy[spec.scheduling_strategy]  # type: ignore[misc]  # proto-plus enums index by name
    if spec.max_wait_s:
        scheduling.max_wait_duration = duration_pb2.Duration(seconds=spec.max_wait_s)
    if spec.disable_retries:
        scheduling.disable_retries = True
    job_spec = v1.CustomJobSpec(
        worker_pool_specs=pools,
        scheduling=scheduling,
        # Vertex derives AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_LOG_DIR from it.
        base_output_directory=v1.GcsDestination(output_uri_prefix=spec.job_dir),
    )
    if spec.service_account:
        job_spec.service_account = spec.service_account
    if spec.tensorboard:
        job_spec.tensorboard = spec.tensorboard
    if spec.persistent_resource_id:
        job_spec.persistent_resource_id = spec.persistent_resource_id
    if spec.experiment:
        job_spec.experiment, run = experiment_names(spec)
        if run:
            job_spec.experiment_run = run
    return job_spec


def _program(spec: JobSpec) -> dict:
    """What a training pool runs: the image's container, or the prebuilt image's
    python package spec."""
    if spec.executor_image:
        return {
            "python_package_spec": v1.PythonPackageSpec(
                executor_image_uri=spec.executor_image,
                package_uris=[spec.package_uri],
                python_module="trainer.task",
                args=list(spec.trainer_args),
            )
        }
    env = (
        [v1.EnvVar(name=contracts.PACKAGE_ENV, value=spec.package_uri)] if spec.package_uri else []
    )
    return {
        "container_spec": v1.ContainerSpec(
            image_uri=spec.image, args=list(spec.trainer_args), env=env
        )
    }


def custom_job(spec: JobSpec) -> v1.CustomJob:
    return v1.CustomJob(
        display_name=spec.display_name, job_spec=custom_job_spec(spec), labels=dict(spec.labels)
    )


def hptune_job(
    spec: JobSpec, config: dict, source: str = "--hptune_config"
) -> v1.HyperparameterTuningJob:
    """A tuning job whose trials run `spec` with the tuned parameters as flags.

    `config`: {"metric": "accuracy", "goal": "maximize", "max_trials": 20,
    "parallel_trials": 4, "parameters": [{"name": "learning_rate", "type": "double",
    "min": 1e-4, "max": 1e-1, "scale": "log"}, {"name": "hidden_units", "type":
    "categorical", "values": ["64,32", "256,128"]}]}. Each parameter reaches the trainer
    as --name=value.

    Raises:
      JobError: naming `source` and the entry at fault.
    """

    def fail(what: str) -> JobError:
        return JobError(f"{source}: {what}")

    metric = config.get("metric")
    if not metric:
        raise fail('no "metric" (the trainer reports loss, accuracy, mae or rmse)')
    goal = GOALS.get(
        str(config.get("goal", "minimize" if contracts.minimized(metric) else "maximize")).lower()
    )
    if goal is None:
        raise fail(f'"goal" must be one of {", ".join(GOALS)}')
    parameters = [_parameter(p, fail) for p in config.get("parameters") or []]
    if not parameters:
        raise fail('no "parameters" to tune')
    trial_spec = dataclasses.replace(
        spec, trainer_args=tuple(spec.trainer_args) + (f"--hptune_metric={metric}",)
    )
    return v1.HyperparameterTuningJob(
        display_name=spec.display_name,
        study_spec=v1.StudySpec(
            metrics=[v1.StudySpec.MetricSpec(metric_id=metric, goal=goal)], parameters=parameters
        ),
        max_trial_count=int(config.get("max_trials", 10)),
        parallel_trial_count=int(config.get("parallel_trials", 2)),
        trial_job_spec=custom_job_spec(trial_spec),
        labels=dict(spec.labels),
    )


def _parameter(p: dict, fail) -> v1.StudySpec.ParameterSpec:
    name, kind = p.get("name"), p.get("type")
    if not name:
        raise fail(f"parameter without a name: {p}")
    param = v1.StudySpec.ParameterSpec(parameter_id=name)
    try:
        if kind == "double":
            param.double_value_spec = v1.StudySpec.ParameterSpec.DoubleValueSpec(
                min_value=float(p["min"]), max_value=float(p["max"])
            )
        elif kind == "integer":
            param.integer_value_spec = v1.StudySpec.ParameterSpec.IntegerValueSpec(
                min_value=int(p["min"]), max_value=int(p["max"])
            )
        elif kind == "categorical":
            param.categorical_value_spec = v1.StudySpec.ParameterSpec.CategoricalValueSpec(
                values=[str(v) for v in p["values"]]
            )
        elif kind == "discrete":
            param.discrete_value_spec = v1.StudySpec.ParameterSpec.DiscreteValueSpec(
                values=[float(v) for v in p["values"]]
            )
        else:
            raise fail(
                f"parameter {name!r}: type {kind!r}, expected double, integer, "
                "categorical or discrete"
            )
    except KeyError as e:
        raise fail(f"parameter {name!r} ({kind}) needs {e.args[0]!r}") from None
    if "scale" in p:
        if p["scale"] not in SCALES:
            raise fail(
                f"parameter {name!r}: scale {p['scale']!r}, expected one of {', '.join(SCALES)}"
            )
        param.scale_type = SCALES[p["scale"]]  # type: ignore[assignment]  # proto-plus
    return param


def to_json(job) -> str:
    """The REST JSON of a job proto (camelCase), as the Vertex API and console show it."""
    return type(job).to_json(
        job,
        use_integers_for_enums=False,
        sort_keys=True,
        indent=2,
        always_print_fields_with_no_presence=False,
    )
