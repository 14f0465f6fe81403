"""The one immutable, validated configuration of a training job.

`task.py` turns flags into a `Config` with `make_config`; everything below receives it
explicitly. Validation happens here, before TensorFlow starts, so a typo in a flag costs
a second rather than a VM start-up.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any

from trainer.base import contracts, storage

TASKS = ("regression", "binary", "multiclass")
# The built-in models (trainer.model.tabular.tabular_model) and optimizers
# (optimizers.make_optimizer), and their hidden layers when --hidden_units is unset
# (ple_mlp's follow the data: trainer.plan.defaults.hidden_units). 256,256,256 beat mlp on
# every table of 6,000+ rows of benchmarks/real_data.py but one, and lost most tables of a
# few hundred rows to 64,32 (docs/decisions.md).
MODELS = ("mlp", "ple_mlp")
HIDDEN_UNITS = {"mlp": (64, 32), "ple_mlp": (256, 256, 256)}
# The default --holdout_fraction (trainer.data.splits): 10% of the training records validate,
# as in Vertex's default 80/10/10 split.
HOLDOUT_FRACTION = 0.1
STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker")
SHARD_POLICIES = ("auto", "file", "record")
# Where training records come from (trainer.plan.defaults.cache); here, so that flags
# are checked before TensorFlow is imported.
CACHE_POLICIES = ("auto", "memory", "off")
# The boosted-trees member blended with the built-in models (trainer.train.forest):
# auto: when there is validation data to blend on (trainer.plan.defaults.trees).
TREES = ("auto", "off")
PRECISIONS = ("float32", "bfloat16")
# Where the ensemble's members have weights of their own (trainer.model.ensemble).
ENSEMBLE_ADAPTERS = ("input", "every_layer")


class ConfigError(ValueError):
    """A flag or environment variable with a bad value; the message names it."""


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything a job needs to know. Field names match the flags of `trainer.task`."""

    train_data: str
    label: str
    task: str
    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str
    validation_data: str | None = None
    test_data: str | None = None
    weight: str | None = None
    schema: str | None = None
    batch_size: int | None = None  # None: decided from the data (trainer.plan.defaults)
    train_steps: int | None = None  # None: decided from the data (trainer.plan.defaults)
    learning_rate: float | None = None  # None: decided by the plan (trainer.plan.defaults)
    model: str = "ple_mlp"
    hidden_units: tuple[int, ...] | None = None  # None: the --model's own
    ensemble_size: int | None = None  # None: decided (trainer.plan.defaults)
    ensemble_adapters: str = "input"
    trees: str = "auto"
    precision: str = "float32"
    steps_per_loop: int = 100
    eval_every_steps: int | None = None  # None: decided (trainer.plan.defaults)
    eval_steps: int = 0
    checkpoint_every_steps: int = 0
    seed: int | None = None
    shuffle_buffer: int = 10_000
    cache: str = "auto"
    schema_sample_records: int = 10_000
    model_fn: str | None = None
    strategy: str = "auto"
    run_eagerly: bool = False
    shard_by: str = "auto"
    cpu_devices: int = 1
    skip_corrupt_records: bool = False
    hptune_metric: str = "loss"
    holdout_fraction: float = HOLDOUT_FRACTION
    selection_metric: str | None = None  # None: the task's proper loss (trainer.plan.defaults)
    early_stopping_patience: int | None = None  # None: decided (trainer.plan.defaults)
    fake_gcs_root: str | None = None

    def storage(self) -> storage.Storage:
        return storage.Storage(self.fake_gcs_root)

    def effective_seed(self) -> int:
        """--seed, or one derived from the flags when unset.

        Derived, not random: every worker of a job, and the job restarted after a crash
        (perhaps with more --train_steps), must shuffle the data identically, and they
        share nothing but their flags. The data and checkpoint folder identify the job.
        """
        if self.seed is not None:
            return self.seed
        return zlib.crc32(f"{self.train_data}|{self.checkpoint_dir}".encode()) & 0x7FFFFFFF

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["hidden_units"] = list(self.hidden_units) if self.hidden_units else None
        return d


def output_dirs(
    job_dir: str | None,
    model_dir: str | None,
    checkpoint_dir: str | None,
    tensorboard_dir: str | None,
    env: Mapping[str, str],
) -> dict[str, str]:
    """Resolves output folders: flag, else Vertex's AIP_* variable, else under job_dir.

    Vertex sets AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR from the
    job's base output directory as `<base>/model`, `<base>/checkpoints`, `<base>/logs`;
    `--job_dir` reproduces that layout off Vertex.

    Raises:
      ConfigError: if a folder has no flag, no variable and no --job_dir to derive from.
    """
    resolved = {}
    for key, flag_value, env_name, sub in (
        ("model_dir", model_dir, "AIP_MODEL_DIR", "model"),
        ("checkpoint_dir", checkpoint_dir, "AIP_CHECKPOINT_DIR", "checkpoints"),
        ("tensorboard_dir", tensorboard_dir, "AIP_TENSORBOARD_LOG_DIR", "logs"),
    ):
        value = flag_value or env.get(env_name) or (storage.join(job_dir, sub) if job_dir else None)
        if not value:
            raise ConfigError(f"--{key} is not set: pass --job_dir, --{key}, or set {env_name}")
        resolved[key] = value.rstrip("/")
    return resolved


def parse_hidden_units(text: str) -> tuple[int, ...]:
    """Parses '256,128' into (256, 128)."""
    try:
        units = tuple(int(u) for u in text.split(",") if u.strip())
    except ValueError:
        raise ConfigError(
            f"--hidden_units={text!r}: expected comma-separated positive integers, e.g. 256,128"
        ) from None
    if not units or any(u <= 0 for u in units):
        raise ConfigError(
            f"--hidden_units={text!r}: expected comma-separated positive integers, e.g. 256,128"
        )
    return units


def make_config(
    *,
    env: Mapping[str, str],
    job_dir: str | None = None,
    model_dir: str | None = None,
    checkpoint_dir: str | None = None,
    tensorboard_dir: str | None = None,
    train_data: str | None = None,
    validation_data: str | None = None,
    test_data: str | None = None,
    hidden_units: str | tuple[int, ...] | None = None,
    **fields: Any,
) -> Config:
    """Builds and validates a Config from flag values and the environment.

    Args:
      env: the process environment (a plain dict in tests).
      job_dir, model_dir, checkpoint_dir, tensorboard_dir: see `output_dirs`.
      train_data, validation_data, test_data: file globs; default to
        AIP_TRAINING_DATA_URI, AIP_VALIDATION_DATA_URI and AIP_TEST_DATA_URI.
      hidden_units: '256,128' or a tuple.
      **fields: the other fields of Config, by name.

    Raises:
      ConfigError: naming the first flag whose value is wrong.
    """
    train_data = train_data or env.get("AIP_TRAINING_DATA_URI")
    if not train_data:
        raise ConfigError(
            "--train_data is not set (nor AIP_TRAINING_DATA_URI): "
            "expected a file glob such as gs://BUCKET/data/train-*.tfrecord"
        )
    if isinstance(hidden_units, str):
        hidden_units = parse_hidden_units(hidden_units)
    if job_dir and storage.is_gcs(job_dir):  # named as given, before folders derive from it
        _check_uri("job_dir", storage.canonical(job_dir), fields.get("fake_gcs_root"))
    dirs = output_dirs(job_dir, model_dir, checkpoint_dir, tensorboard_dir, env)
    config = Config(
        train_data=train_data,
        model_dir=dirs["model_dir"],
        checkpoint_dir=dirs["checkpoint_dir"],
        tensorboard_dir=dirs["tensorboard_dir"],
        validation_data=validation_data or env.get("AIP_VALIDATION_DATA_URI") or None,
        test_data=test_data or env.get("AIP_TEST_DATA_URI") or None,
        hidden_units=tuple(hidden_units) if hidden_units else None,
        **fields,
    )
    # A /gcs/ path (Vertex's mount) is its gs:// twin from here on: one name per object,
    # in the logs, the derived seed and every read and write (trainer.base.storage).
    canonical: dict[str, Any] = {
        n: storage.canonical(v) for n in URI_FIELDS if (v := getattr(config, n))
    }
    config = dataclasses.replace(config, **canonical)
    validate(config)
    return config


def validate(config: Config) -> None:
    """Checks every field that can be checked without reading data.

    Raises:
      ConfigError: naming the flag and the expected value.
    """
    if not config.label:
        raise ConfigError("--label is not set: expected the name of the target feature")
    if config.weight and config.weight == config.label:
        raise ConfigError(
            f"--weight={config.weight!r} is the label; expected another, numeric feature"
        )
    _one_of("task", config.task, TASKS)
    _one_of("model", config.model, MODELS)
    _one_of("strategy", config.strategy, STRATEGIES)
    _one_of("shard_by", config.shard_by, SHARD_POLICIES)
    _one_of("cache", config.cache, CACHE_POLICIES)
    _one_of("trees", config.trees, TREES)
    _one_of("precision", config.precision, PRECISIONS)
    _one_of("ensemble_adapters", config.ensemble_adapters, ENSEMBLE_ADAPTERS)
    for name in ("steps_per_loop", "shuffle_buffer", "schema_sample_records", "cpu_devices"):
        _at_least(name, getattr(config, name), 1)
    for name in ("batch_size", "train_steps"):
        if getattr(config, name) is not None:
            _at_least(name, getattr(config, name), 1)
    if config.ensemble_size is not None:
        _at_least("ensemble_size", config.ensemble_size, 1)
        if config.model_fn and config.ensemble_size > 1:
            raise ConfigError(
                f"--ensemble_size={config.ensemble_size} is for the built-in models; "
                f"--model_fn={config.model_fn!r} builds its own (return (batch, k, outputs) "
                "logits for an ensemble)"
            )
    if config.model_fn and config.precision != "float32":
        raise ConfigError(
            f"--precision={config.precision} is for the built-in models; "
            f"--model_fn={config.model_fn!r} sets its own layers' dtype policy"
        )
    for name in ("eval_steps", "checkpoint_every_steps"):
        _at_least(name, getattr(config, name), 0)
    for name in ("eval_every_steps", "early_stopping_patience"):
        if getattr(config, name) is not None:
            _at_least(name, getattr(config, name), 0)
    metrics = contracts.TASK_METRICS[config.task]
    for name in ("hptune_metric", "selection_metric"):
        value = getattr(config, name)
        if value is not None and value not in metrics:
            raise ConfigError(
                f"--{name}={value!r}: --task={config.task} reports {', '.join(metrics)}"
            )
    if not (
        isinstance(config.holdout_fraction, (int, float)) and 0 <= config.holdout_fraction <= 0.5
    ):
        raise ConfigError(
            f"--holdout_fraction={config.holdout_fraction!r}: expected a "
            "number from 0 (no held-out validation records) to 0.5"
        )
    if config.learning_rate is not None and not config.learning_rate > 0:
        raise ConfigError(f"--learning_rate={config.learning_rate}: expected a positive number")
    _check_uris(config)


# The Config's fields that name files or folders.
URI_FIELDS = (
    "train_data",
    "validation_data",
    "test_data",
    "schema",
    "model_dir",
    "checkpoint_dir",
    "tensorboard_dir",
)


def _check_uris(config: Config) -> None:
    """Every gs:// path names a bucket, and under --fake_gcs_root stays inside it."""
    for name in URI_FIELDS:
        value = getattr(config, name)
        if value and storage.is_gcs(value):
            _check_uri(name, value, config.fake_gcs_root)


def _check_uri(name: str, value: str, fake_gcs_root: str | None) -> None:
    try:
        storage.split_gcs(value)
        storage.Storage(fake_gcs_root).path(value)
    except storage.StorageError as e:
        raise ConfigError(f"--{name}: {e}") from None


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"--{name}={value!r}: expected one of {', '.join(allowed)}")


def _at_least(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or value < minimum:
        raise ConfigError(f"--{name}={value!r}: expected an integer >= {minimum}")
