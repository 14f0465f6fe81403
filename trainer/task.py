"""Entry point: `python -m trainer.task --train_data=gs://... --label=y --task=binary`.

Flags become one validated Config; the strategy is created before any other TensorFlow
op; the plan stage reads and decides what the job needs (trainer.plan), and `job.run`
does the rest. Nothing below this module reads FLAGS. User mistakes end
in one line naming the culprit and exit code 2, never a stack trace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import Any

from absl import app, flags
from absl import logging as absl_logging

from trainer.base import cli, contracts
from trainer.base import config as config_lib
from trainer.base import storage as storage_lib
from trainer.base.cli import fail as _fail
from trainer.base.cli import parse_flags
from trainer.plan import defaults

# TensorFlow's C++ INFO lines drown the progress lines; warnings still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _units(units: tuple[int, ...]) -> str:
    return ",".join(map(str, units))


F = flags.FLAGS
# Every default is the Config's own (or a rule's constant), quoted, never restated.
D: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(config_lib.Config)}
flags.DEFINE_string(
    "train_data",
    None,
    "Glob of training TFRecord files (gs:// or local). Default: $AIP_TRAINING_DATA_URI.",
)
flags.DEFINE_string(
    "validation_data",
    None,
    "Glob of validation TFRecord files: evaluated "
    "during training to select the model exported. Default: "
    "$AIP_VALIDATION_DATA_URI; none: --holdout_fraction of the training "
    "records.",
)
flags.DEFINE_alias("eval_data", "validation_data")
flags.DEFINE_string(
    "test_data",
    None,
    "Glob of test TFRecord files, evaluated once on the "
    f"selected model; {contracts.METRICS_FILE} reports it. Default: "
    "$AIP_TEST_DATA_URI.",
)
flags.DEFINE_float(
    "holdout_fraction",
    D["holdout_fraction"],
    "Without --validation_data, this fraction of the training records "
    "(chosen by a hash of each record and its position) validates instead of training; 0: no "
    "validation, the last model is exported.",
)
flags.DEFINE_string(
    "selection_metric",
    D["selection_metric"],
    "Validation metric that "
    "selects the model exported (lower is better for losses and errors, "
    "higher for the rest). Default: the task's proper loss, "
    + ", ".join(f"{m} for {t}" for t, m in contracts.PROPER_LOSS.items())
    + ".",
)
flags.DEFINE_integer(
    "early_stopping_patience",
    D["early_stopping_patience"],
    "Stop after "
    "this many evaluations in a row whose --selection_metric is worse than the "
    f"best by more than {defaults.STOP_MARGIN:.0%} of it; "
    "0: train all --train_steps; unset: the evaluations of "
    f"{defaults.STOP_AFTER:.0%} of --train_steps (at least 2).",
)
flags.DEFINE_string("label", None, "Name of the target feature.")
flags.DEFINE_string(
    "weight",
    D["weight"],
    "Numeric feature that weights each record's loss "
    "and metrics (not a model input); a record without it weighs 1.",
)
flags.DEFINE_enum("task", None, list(config_lib.TASKS), "What the label is.")
flags.DEFINE_string("schema", D["schema"], "JSON feature schema; inferred from the data if unset.")
flags.DEFINE_string("job_dir", None, "Base output folder: model/, checkpoints/, logs/ below it.")
flags.DEFINE_string(
    "model_dir", None, "SavedModel folder. Default: $AIP_MODEL_DIR, else <job_dir>/model."
)
flags.DEFINE_string(
    "checkpoint_dir", None, "Default: $AIP_CHECKPOINT_DIR, else <job_dir>/checkpoints."
)
flags.DEFINE_string(
    "tensorboard_dir", None, "Default: $AIP_TENSORBOARD_LOG_DIR, else <job_dir>/logs."
)
flags.DEFINE_integer(
    "batch_size",
    D["batch_size"],
    "Global batch size, split evenly across replicas; unset: "
    f"{defaults.DEFAULT_BATCH_SIZE} (ple_mlp: {defaults.LARGE_BATCH['ple_mlp'][0]} from "
    f"{defaults.LARGE_BATCH['ple_mlp'][1]:,} training records), rounded up to a multiple "
    "of the replicas.",
)
flags.DEFINE_integer(
    "train_steps",
    D["train_steps"],
    "Optimizer steps in all; unset: "
    f"{defaults.DEFAULT_EPOCHS} epochs of the training data, at least "
    f"{defaults.MIN_DEFAULT_STEPS:,} and at most "
    f"{defaults.MAX_DEFAULT_STEPS:,} steps.",
)
flags.DEFINE_float(
    "learning_rate",
    D["learning_rate"],
    "Adam learning rate (ple_mlp: the first, decayed on a cosine to 0 over the run); "
    f"unset: {defaults.DEFAULT_LEARNING_RATE:g}, for ple_mlp doubled at batches of "
    f"{defaults.LARGE_BATCH['ple_mlp'][0]} and more.",
)
_SMALL = (
    f"{_units(defaults.SMALL_DATA_HIDDEN_UNITS['ple_mlp'])} below "
    f"{defaults.SMALL_DATA_RECORDS:,} training records, "
    f"{_units(config_lib.HIDDEN_UNITS['ple_mlp'])} from there"
)
flags.DEFINE_enum(
    "model",
    D["model"],
    list(config_lib.MODELS),
    "The built-in model: "
    "ple_mlp (robust scaling and piecewise-linear encodings of numbers; ReLU layers of "
    f"{_SMALL}; AdamW with beta2 0.95 and a cosine schedule) or mlp "
    f"(standardised numbers, {_units(config_lib.HIDDEN_UNITS['mlp'])} ReLU "
    "layers, Adam).",
)
flags.DEFINE_string(
    "hidden_units",
    None,
    "Sizes of the hidden layers, e.g. 256,128; unset: "
    f"the --model's (ple_mlp: {_SMALL}; mlp: "
    f"{_units(config_lib.HIDDEN_UNITS['mlp'])}).",
)
flags.DEFINE_integer(
    "ensemble_size",
    D["ensemble_size"],
    "Members of the built-in model's ensemble: k MLPs sharing their weights, trained "
    "together, predicting the mean of their probabilities (TabM); 1: one MLP. Unset: "
    + ", ".join(
        f"{k} for {m}"
        + (
            f" ({defaults.LARGE_DATA_ENSEMBLE_SIZE[m]} from "
            f"{defaults.SMALL_DATA_RECORDS:,} training records)"
            if m in defaults.LARGE_DATA_ENSEMBLE_SIZE
            else ""
        )
        for m, k in defaults.ENSEMBLE_SIZE.items()
    )
    + ".",
)
flags.DEFINE_enum(
    "ensemble_adapters",
    D["ensemble_adapters"],
    list(config_lib.ENSEMBLE_ADAPTERS),
    "Where the ensemble's members have weights of their own: input (TabM-mini: each "
    "member scales the inputs by its own factors, starting at random signs; the hidden "
    "layers are shared) or every_layer (TabM: rank-one adapters and biases of its own "
    "in every hidden layer; 1.2x-1.3x the step's time, the same figures on the benchmark "
    "tables).",
)
flags.DEFINE_enum(
    "trees",
    D["trees"],
    list(config_lib.TREES),
    "Boosted trees (LightGBM, fitted after the neural model and exported as TensorFlow "
    "ops in the same SavedModel) blended with the built-in model, weighed on the "
    f"validation data; auto: for --model={'/'.join(defaults.TREES_JOIN)} whenever there "
    "is validation data; off: the neural model alone.",
)
flags.DEFINE_enum(
    "precision",
    D["precision"],
    list(config_lib.PRECISIONS),
    "What the built-in model's hidden layers multiply in: bfloat16 (the weights, the loss "
    "and the export stay float32; fast where the machine multiplies bf16 natively: AMX "
    "CPUs, GPUs of compute capability 8.0+) or float32.",
)
flags.DEFINE_integer(
    "steps_per_loop", D["steps_per_loop"], "Steps per compiled inner loop (one log line)."
)
flags.DEFINE_integer(
    "eval_every_steps",
    D["eval_every_steps"],
    "Evaluate every N steps (and "
    f"at the end); unset: {defaults.EVALUATIONS} times per run; 0: only at "
    "the end.",
)
flags.DEFINE_integer(
    "eval_steps", D["eval_steps"], "Batches per evaluation; 0: all of the validation data."
)
flags.DEFINE_integer(
    "checkpoint_every_steps",
    D["checkpoint_every_steps"],
    "Checkpoint every N steps; 0: at the end.",
)
flags.DEFINE_integer(
    "seed",
    D["seed"],
    "Seed for initialisation and data order; unset, one "
    "is derived from --train_data and --checkpoint_dir.",
)
flags.DEFINE_integer(
    "shuffle_buffer",
    D["shuffle_buffer"],
    "Streamed training data: records permuted together (a window).",
)
flags.DEFINE_enum(
    "cache",
    D["cache"],
    list(config_lib.CACHE_POLICIES),
    "Training records: memory (read and parse once, fully reshuffled every "
    "epoch), off (stream from the files), auto (memory when the files total "
    f"at most {storage_lib.human_bytes(defaults.MEMORY_BUDGET_BYTES)}).",
)
flags.DEFINE_integer(
    "schema_sample_records", D["schema_sample_records"], "Records read to infer the schema."
)
flags.DEFINE_string("model_fn", D["model_fn"], "Custom model builder, 'package.module:function'.")
flags.DEFINE_enum(
    "strategy",
    D["strategy"],
    list(config_lib.STRATEGIES),
    "Distribution strategy; auto decides from TF_CONFIG/CLUSTER_SPEC and GPUs.",
)
flags.DEFINE_bool("run_eagerly", D["run_eagerly"], "Run the training step eagerly, for debugging.")
flags.DEFINE_enum(
    "shard_by",
    D["shard_by"],
    list(config_lib.SHARD_POLICIES),
    "How workers split the data; auto: by file if there are enough files.",
)
flags.DEFINE_integer(
    "cpu_devices",
    D["cpu_devices"],
    "Without GPUs, split the CPU into this "
    "many logical devices (mirrored replicas), to debug multi-replica runs "
    "locally.",
)
flags.DEFINE_bool(
    "skip_corrupt_records",
    D["skip_corrupt_records"],
    "Log and skip corrupt TFRecord data (the rest of a corrupt file) instead of stopping.",
)
flags.DEFINE_string(
    "hptune_metric",
    D["hptune_metric"],
    "Validation metric of the selected "
    "model reported to Vertex hyperparameter tuning when run as a trial ("
    + ", ".join(dict.fromkeys(m for ms in contracts.TASK_METRICS.values() for m in ms))
    + ").",
)
flags.DEFINE_enum(
    "log_format",
    "auto",
    list(cli.FORMATS),
    "json: one JSON object per line "
    "on stdout with its severity, as Cloud Logging reads it; text: lines on "
    "stderr; auto: json on Vertex AI (CLOUD_ML_JOB_ID is set), else text.",
)
flags.DEFINE_string(
    "fake_gcs_root",
    D["fake_gcs_root"],
    "Serve every gs://BUCKET/PATH from DIR/BUCKET/PATH: run the cloud command line locally.",
)

# The flags that make the Config (with the folders they are derived from).
FIELDS = (*D, "job_dir")

# Exit codes: Vertex AI restarts a task that exits non-zero.
EXIT_PEER_LOST = 3  # another task died: restart all tasks, they resume


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        return _fail(f"unexpected arguments {argv[1:]}: every option is a --flag")
    log_format = cli.use_format(F.log_format)
    absl_logging.set_verbosity(absl_logging.INFO)
    # TensorFlow's and Keras' own INFO lines (saver, signatures, fingerprints) would bury
    # the progress lines; they log through the 'tensorflow' logger and through absl's.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    cli.add_filter(_not_library_info)
    # Under --run_eagerly TF warns on every step that eager strategies are slow; once is
    # enough, and the config line says so.
    logging.getLogger("tensorflow").addFilter(
        lambda record: "eagerly has significant overhead" not in record.getMessage()
    )
    try:
        config = config_lib.make_config(env=os.environ, **{k: F[k].value for k in FIELDS})
    except config_lib.ConfigError as e:
        return _fail(str(e))
    # Imported here so that --help and flag errors do not wait for TensorFlow. Its C++
    # start-up lines (oneDNN, CUDA probes) would be ERROR lines in Cloud Logging.
    from trainer.base.quiet import quiet_stderr

    with quiet_stderr() if log_format == "json" else contextlib.nullcontext():
        from trainer.plan import plan as plan_lib
        from trainer.train import distribution, experiment, hypertune, job, preemption
    try:
        strategy, cluster = distribution.create_strategy(
            config.strategy, os.environ, config.cpu_devices
        )
        plan = plan_lib.make_plan(config, strategy.num_replicas_in_sync)
        result = job.run(plan, strategy, cluster)
        hypertune.report(config.hptune_metric, result.metrics, os.environ)
        if distribution.is_chief(cluster):
            experiment.log(os.environ, plan.to_json(), result.metrics)
    except job.USER_ERRORS as e:
        return _fail(str(e))
    except distribution.PeerLost as e:
        return _fail(str(e), EXIT_PEER_LOST)
    except preemption.Preempted as e:
        return _fail(str(e), preemption.EXIT_CODE)
    return 0


def _not_library_info(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or not any(
        part in record.pathname for part in ("/tensorflow/", "/keras/")
    )


if __name__ == "__main__":
    flags.mark_flags_as_required(["label", "task"])
    app.run(main, flags_parser=parse_flags)
