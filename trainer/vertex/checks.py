"""Checks of a job before it is submitted: what Vertex would reject, or run wrongly.

Each check raises `jobs.JobError` with one line that names the flag and what fits.
"""

from __future__ import annotations

import datetime
import re

from trainer.vertex import images, jobs

# Vertex accelerators by machine family, and the GPU counts each machine type takes.
# A2, A3 and G2 machine types carry a fixed number of GPUs (the name says how many).
N1_GPUS = {
    "NVIDIA_TESLA_T4": (1, 2, 4),
    "NVIDIA_TESLA_V100": (1, 2, 4, 8),
    "NVIDIA_TESLA_P100": (1, 2, 4),
    "NVIDIA_TESLA_P4": (1, 2, 4),
}
FIXED_GPU_FAMILIES = {  # machine type prefix -> accelerator
    "a2-highgpu-": "NVIDIA_TESLA_A100",
    "a2-megagpu-": "NVIDIA_TESLA_A100",
    "a2-ultragpu-": "NVIDIA_A100_80GB",
    "a3-highgpu-": "NVIDIA_H100_80GB",
    "a3-megagpu-": "NVIDIA_H100_MEGA_80GB",
    "a3-ultragpu-": "NVIDIA_H200_141GB",
    "g2-standard-": "NVIDIA_L4",
}
G2_GPUS = {"4": 1, "8": 1, "12": 1, "16": 1, "24": 2, "32": 1, "48": 4, "96": 8}


def expected_gpus(machine_type: str) -> tuple[str, int] | None:
    """(accelerator, count) that a fixed-GPU machine type carries, or None."""
    for prefix, accelerator in FIXED_GPU_FAMILIES.items():
        if machine_type.startswith(prefix):
            size = machine_type[len(prefix) :]
            if prefix == "g2-standard-":
                return accelerator, G2_GPUS.get(size, 0)
            m = re.fullmatch(r"(\d+)g", size)
            return accelerator, int(m[1]) if m else 0
    return None


def check_machine(spec: jobs.JobSpec) -> None:
    """Machine type, accelerator type and count must be a combination Vertex accepts."""
    accel, count, machine = spec.accelerator_type, spec.accelerator_count, spec.machine_type
    if accel and accel not in jobs.v1.AcceleratorType.__members__:
        raise jobs.JobError(
            f"--accelerator_type={accel!r} is not a Vertex accelerator "
            "(e.g. NVIDIA_TESLA_T4, NVIDIA_L4, NVIDIA_TESLA_A100)"
        )
    if bool(accel) != (count > 0):
        raise jobs.JobError(
            f"--accelerator_type={accel!r} and --accelerator_count={count} "
            "disagree: give both, or neither"
        )
    fixed = expected_gpus(machine)
    if fixed:
        want, n = fixed
        if (accel, count) != (want, n):
            raise jobs.JobError(
                f"--machine_type={machine} carries {n} x {want}: use "
                f"--accelerator_type={want} --accelerator_count={n}"
            )
    elif accel:
        if not machine.startswith("n1-"):
            raise jobs.JobError(
                f"--machine_type={machine} takes no {accel}: GPUs other "
                "than A100/H100/H200/L4 attach to n1-* machine types only"
            )
        if accel not in N1_GPUS or count not in N1_GPUS[accel]:
            counts = N1_GPUS.get(accel, ())
            raise jobs.JobError(
                f"{accel} on n1 machines comes in counts of "
                f"{', '.join(map(str, counts)) or 'none'}, not {count}"
            )


def check_workers(spec: jobs.JobSpec) -> None:
    if spec.workers < 1:
        raise jobs.JobError(f"--workers={spec.workers}: expected 1 or more (chief included)")
    if spec.reduction_servers and spec.workers < 2:
        raise jobs.JobError(
            "--reduction_servers needs --workers >= 2: Reduction Server "
            "speeds up all-reduce between machines"
        )
    if spec.reduction_servers and not spec.accelerator_count:
        raise jobs.JobError("--reduction_servers needs GPU workers (it uses NCCL)")


STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")
# Dynamic Workload Scheduler's GPUs (Vertex AI documentation, "Schedule training jobs
# based on resource availability", read 2026-12), and its longest run.
FLEX_START_GPUS = (
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
    "NVIDIA_L4",
)
FLEX_START_MAX_S = 7 * 24 * 3600
# Vertex AI Experiments' names for experiments and runs.
_EXPERIMENT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")


def check_scheduling(spec: jobs.JobSpec) -> None:
    """The scheduling strategy and its options must be a combination Vertex runs."""
    strategy = spec.scheduling_strategy
    if strategy and strategy not in STRATEGIES:
        raise jobs.JobError(
            f"--scheduling_strategy={strategy!r}: expected one of {', '.join(STRATEGIES)}"
        )
    if spec.max_wait_s and strategy != "FLEX_START":
        raise jobs.JobError(
            "--max_wait_duration is how long FLEX_START waits for machines: it needs "
            f"--scheduling_strategy=FLEX_START, not {strategy or 'the default'}"
        )
    if strategy != "FLEX_START":
        return
    if spec.accelerator_type not in FLEX_START_GPUS:
        raise jobs.JobError(
            f"--scheduling_strategy=FLEX_START needs GPUs Dynamic Workload Scheduler "
            f"provisions ({', '.join(FLEX_START_GPUS)}), not "
            f"{spec.accelerator_type or 'a CPU-only machine'}"
        )
    if spec.reduction_servers:
        raise jobs.JobError(
            "--scheduling_strategy=FLEX_START needs the same machine in every pool: "
            f"--reduction_servers runs {spec.reduction_server_machine_type}, the workers "
            f"{spec.machine_type}"
        )
    if spec.timeout_s and spec.timeout_s > FLEX_START_MAX_S:
        raise jobs.JobError(
            f"--timeout={spec.timeout_s}s: a FLEX_START job runs at most 7 days "
            f"({FLEX_START_MAX_S} s)"
        )


def check_experiment(spec: jobs.JobSpec, tuning: bool = False) -> None:
    """Experiment and run names Vertex AI Experiments accepts, the run with its
    experiment; a tuning job's trials cannot share one run."""
    if spec.experiment_run and not spec.experiment:
        raise jobs.JobError("--experiment_run needs --experiment (the experiment it belongs to)")
    for flag in ("experiment", "experiment_run"):
        value = getattr(spec, flag)
        if value and not _EXPERIMENT_NAME.fullmatch(value):
            raise jobs.JobError(
                f"--{flag}={value!r}: expected lower-case letters, digits and '-', "
                "starting with a letter or digit, at most 128 characters"
            )
    if tuning and spec.experiment_run:
        raise jobs.JobError(
            "--experiment_run with --hptune_config: every trial would log to the same run; "
            "give --experiment alone"
        )


def check_image(spec: jobs.JobSpec, today: datetime.date | None = None) -> None:
    """The image must be one Vertex still accepts, carry a TensorFlow the package
    supports, and be a GPU image if the job has GPUs."""
    today = today or datetime.date.today()
    flag, image = (
        ("--executor_image", spec.executor_image)
        if spec.executor_image
        else ("--image", spec.image)
    )
    if not image:
        raise jobs.JobError("--image is required (the package's training image)")
    if spec.executor_image and not spec.package_uri:
        raise jobs.JobError("--executor_image runs the staged package: it needs --stage_package")
    why = images.retired(image, "training", today)
    if why:
        raise jobs.JobError(
            f"{flag}={why}; use the package's own image (see "
            "containers/), the default without --executor_image"
        )
    prebuilt = images.prebuilt(image, "training")
    own = images.own_kind(image)
    if prebuilt:
        kind = prebuilt[0]  # every one older than 2.16 (Keras 3) is retired already
    elif own:
        if own[0] != "train":
            raise jobs.JobError(
                f"{flag}={image} is the package's serving image; training "
                f"runs its train-{own[1]} image"
            )
        kind = own[1]
    else:
        return  # a custom image: its TensorFlow is its owner's business
    if spec.accelerator_count and kind == "cpu":
        raise jobs.JobError(
            f"{flag}={image} is a CPU image but the job asks for GPUs; use its GPU twin (train-gpu)"
        )


def check_all(spec: jobs.JobSpec, tuning: bool = False) -> None:
    """Every check that needs no network (`tuning`: of a hyperparameter tuning job)."""
    for path, flag in ((spec.job_dir, "--job_dir"), (spec.package_uri, "--staging_dir")):
        if path is not None and not path.startswith("gs://"):
            raise jobs.JobError(f"{flag}={path!r}: Vertex needs a gs:// location")
    check_workers(spec)
    check_machine(spec)
    check_scheduling(spec)
    check_experiment(spec, tuning)
    check_image(spec)
