"""The rules that fill in what the user left unset, each returning its value and why.

Each is a function of the flags and of the files alone (never of a clock, a worker's
index or randomness), so every worker of a job, and the job restarted after a crash,
decide alike. The deciding figures are in docs/decisions.md. Standard library only:
the flags' help texts quote these constants before TensorFlow starts.
"""

from __future__ import annotations

import importlib.util

from trainer.base import config as config_lib
from trainer.base import contracts
from trainer.base import storage as storage_lib

# An unset --train_steps trains this many epochs, and at least MIN_DEFAULT_STEPS steps.
# On nine public datasets (docs/decisions.md), a fixed 1,000 steps left the largest
# undertrained (diamonds, 43k training rows: 1.5 epochs, MAE 1.39x gradient boosting's;
# 5 epochs 1.33x, 10 epochs 1.08x, 20 epochs 1.09x), while more steps over the small
# ones only fit noise (diabetes, 3,000 steps: 1.39x against 1.21x).
DEFAULT_EPOCHS = 10
MIN_DEFAULT_STEPS = 1000
# A default job's length is bounded whatever the data's size: 10 epochs of 100M records
# at batch 128 would be 7.8M steps; 500,000 steps are 64M examples (0.64 epochs of 100M).
MAX_DEFAULT_STEPS = 500_000
# An unset --batch_size is DEFAULT_BATCH_SIZE, or for the models of LARGE_BATCH their
# larger batch from as many training records, rounded up to a multiple of the replicas;
# an unset --learning_rate is DEFAULT_LEARNING_RATE, doubled for those models at batches
# of 128 and more. A larger batch runs the default model's step nearer the machine's
# matmul rate (0.21 of fp32 at 64, 0.40 at 256: docs/results/2026-12-05-step.md) but makes
# fewer updates in the same epochs: at the same rate, 128 from 12,800 records lost on
# flights (1 - AUC 1.02x) and diamonds (RMSE 1.01x), 256 lost on flights (1.04x); 128
# with the rate doubled kept every task's geometric mean within 0.5% over the 16 tables
# it changes (docs/decisions.md). 128 keeps the 1,000 steps a small table needs over 10
# epochs of 12,800 records.
DEFAULT_BATCH_SIZE = 64
LARGE_BATCH = {"ple_mlp": (128, 12_800)}  # model: (batch, from this many records)
DEFAULT_LEARNING_RATE = 1e-3
# Evaluations per run when --eval_every_steps is unset: often enough to catch the best
# model (RealMLP selects the best of every epoch; the default run is 10 epochs), rarely
# enough that evaluation stays a small part of the run.
EVALUATIONS = 20
# An unset --early_stopping_patience stops training once a quarter of the planned steps
# has brought only models worse than the best (by STOP_MARGIN). Replayed on the
# validation curves of 78 default jobs (26 tables x 3 seeds, 2026-12-06) it saves 13% of
# their steps (vocab 53%) and selects the very model a full run selects in every one;
# on 41 jobs of 12 fresh tables, 8% and again every one (docs/decisions.md).
STOP_AFTER = 0.25
# Early stopping counts only the evaluations worse than the best by more than this share
# of it: a model within 1% of the best is a plateau, not overfitting, and the rate's
# decay may still bring a better one (budgetfood, hi: docs/decisions.md).
STOP_MARGIN = 0.01
# auto caches when the training files total at most this. A parsed record takes less
# memory than its serialized form (no feature names); loading briefly holds two copies.
MEMORY_BUDGET_BYTES = 2 * 1024**3
# Models whose width follows the data: fewer training records than SMALL_DATA_RECORDS
# get SMALL_DATA_HIDDEN_UNITS, the rest the model's own (config.HIDDEN_UNITS). Held-out
# computers (4,506 records) lost at 64,32 (1.136x HGB's error against 1.009x), cracker
# (2,370) and digits (1,294) preferred it: the threshold lies between (docs/decisions.md).
SMALL_DATA_HIDDEN_UNITS = {"ple_mlp": (64, 32)}
SMALL_DATA_RECORDS = 3_000


# Members of the built-in models' ensemble (trainer.model.ensemble) when --ensemble_size
# is unset; 1 is a plain MLP. From SMALL_DATA_RECORDS training records ple_mlp has
# LARGE_DATA_ENSEMBLE_SIZE's: on the 25 benchmark tables that large, 4 members against 8
# kept both sets' error within the 1.002x its rule allowed (written before the run), in
# a median 0.79x of the training time; 128-wide layers instead lost 0.3-0.4%
# (docs/decisions.md).
ENSEMBLE_SIZE = {"ple_mlp": 8, "mlp": 1}
LARGE_DATA_ENSEMBLE_SIZE = {"ple_mlp": 4}


def ensemble_size(model: str, n: int | None) -> tuple[int, str]:
    """Members of the built-in `model`'s ensemble without --ensemble_size, on `n`
    training records (counted up to SMALL_DATA_RECORDS), and why."""
    k = ENSEMBLE_SIZE[model]
    if k == 1:
        return 1, f"--model={model} is one MLP"
    large = LARGE_DATA_ENSEMBLE_SIZE.get(model)
    if large and n is not None and n >= SMALL_DATA_RECORDS:
        return large, (
            f"--model={model} on {SMALL_DATA_RECORDS:,} training records or more: {large} "
            f"members sharing their weights (TabM); {k} below"
        )
    below = ""
    if large and n is not None:
        below = f" on {n:,} training records, fewer than {SMALL_DATA_RECORDS:,}"
    return k, f"--model={model}{below}: {k} members sharing their weights (TabM)"


# The built-in models that boosted trees join by default (--trees=auto).
TREES_JOIN = ("ple_mlp",)


def trees(policy: str, model: str, model_fn: str | None, validation: bool) -> tuple[bool, str]:
    """Whether boosted trees join the built-in model (trainer.train.forest), and why."""
    if policy == "off":
        return False, "--trees=off"
    if model_fn:
        return False, "--model_fn builds its own model"
    if model not in TREES_JOIN:
        return False, f"--model={model} is a neural model alone"
    if not validation:
        return False, "no validation data to weigh the blend on (--holdout_fraction=0)"
    if importlib.util.find_spec("lightgbm") is None:
        return False, "LightGBM is not installed (pip install lightgbm)"
    return (
        True,
        "auto: two LightGBM models' trees blended with the neural model, weighed on validation",
    )


def batch_size(replicas: int, model: str | None, n: int | None) -> tuple[int, str]:
    """The global batch without --batch_size, for the built-in `model` (None: a
    --model_fn) on `n` training records (counted up to LARGE_BATCH's), and why."""
    b, why = DEFAULT_BATCH_SIZE, "--batch_size unset"
    large, records = LARGE_BATCH.get(model or "", (0, 0))
    if large and n is not None and n >= records:
        b, why = large, f"--batch_size unset, --model={model} on {records:,}+ training records"
    rounded = -(-b // replicas) * replicas
    if rounded != b:
        why += f": {b}, rounded up to a multiple of {replicas} replicas"
    return rounded, why


def learning_rate(model: str | None, batch: int) -> tuple[float, str]:
    """The first learning rate without --learning_rate, for the built-in `model` (None:
    a --model_fn) at global batch `batch`, and why."""
    if model in LARGE_BATCH and batch >= LARGE_BATCH[model][0]:
        return 2 * DEFAULT_LEARNING_RATE, (
            f"--learning_rate unset: {DEFAULT_LEARNING_RATE:g}, doubled with the batch "
            f"(--model={model} at --batch_size={batch})"
        )
    return DEFAULT_LEARNING_RATE, "--learning_rate unset"


def precision(policy: str, model_fn: str | None, units: str | None) -> tuple[str, str]:
    """What the built-in model's hidden layers multiply in ('float32' or 'bfloat16'),
    and why; `units`: what multiplies bf16 natively on this machine, if anything.
    bfloat16 is asked for, not chosen: its quality on the benchmark tables and the
    equivalence tests under it are still to come (docs/limitations.md)."""
    if model_fn:  # config.validate refuses --precision=bfloat16 with it
        return "float32", "--model_fn builds its own layers (their dtype policy is its own)"
    if policy == "bfloat16":
        return (
            policy,
            f"--precision=bfloat16 ({units or 'no bf16 units here: slower than float32'})",
        )
    if units:
        return policy, (
            f"--precision={policy}; {units} multiplies bf16: --precision=bfloat16 would "
            "use it (docs/guide/performance.md)"
        )
    return policy, f"--precision={policy}"


def train_steps(n: int, batch_size: int) -> tuple[int, str]:
    """DEFAULT_EPOCHS epochs of `n` records, within [MIN_DEFAULT_STEPS, MAX_DEFAULT_STEPS],
    and why."""
    steps = -(-DEFAULT_EPOCHS * n // batch_size)
    why = (
        f"--train_steps unset: {DEFAULT_EPOCHS} epochs of {n:,} training records at "
        f"--batch_size={batch_size}"
    )
    if steps > MAX_DEFAULT_STEPS:
        return MAX_DEFAULT_STEPS, (
            f"{why} would be {steps:,}; capped at {MAX_DEFAULT_STEPS:,} "
            f"({MAX_DEFAULT_STEPS * batch_size / n:.1f} epochs) so that a default job's "
            "length stays bounded; set --train_steps to train longer"
        )
    return max(MIN_DEFAULT_STEPS, steps), f"{why}, and at least {MIN_DEFAULT_STEPS:,}"


def hidden_units(model: str, n: int) -> tuple[tuple[int, ...], str]:
    """The hidden layers of `model` (one of SMALL_DATA_HIDDEN_UNITS) without
    --hidden_units, on `n` training records (counted up to SMALL_DATA_RECORDS), and
    why."""
    units = config_lib.HIDDEN_UNITS[model]
    if n < SMALL_DATA_RECORDS:
        return SMALL_DATA_HIDDEN_UNITS[model], (
            f"--model={model} on {n:,} training records, fewer than "
            f"{SMALL_DATA_RECORDS:,}; from {SMALL_DATA_RECORDS:,}: "
            f"{','.join(map(str, units))}"
        )
    return units, f"--model={model} on {SMALL_DATA_RECORDS:,} training records or more"


def eval_every(train_steps: int, steps_per_loop: int) -> tuple[int, str]:
    """The default evaluation interval, and why: EVALUATIONS per run, rounded up to
    whole inner loops."""
    every = -(-train_steps // EVALUATIONS)
    every = -(-every // steps_per_loop) * steps_per_loop
    return every, (
        f"--eval_every_steps unset: {EVALUATIONS} evaluations over "
        f"{train_steps:,} steps, in whole loops of --steps_per_loop={steps_per_loop}"
    )


def early_stopping_patience(
    train_steps: int, eval_every_steps: int, validation: bool
) -> tuple[int, str]:
    """The default patience (evaluations in a row worse than the best by more than
    STOP_MARGIN before training stops), and why: as many evaluations as fall in
    STOP_AFTER of the run, at least 2; 0 (never) without validation data or with a
    single evaluation at the end."""
    if not validation or not eval_every_steps:
        return 0, "--early_stopping_patience unset: no evaluation to stop on"
    patience = max(2, -(-int(STOP_AFTER * train_steps) // eval_every_steps))
    return patience, (
        f"--early_stopping_patience unset: the evaluations of {STOP_AFTER:.0%} of "
        f"{train_steps:,} steps, every {eval_every_steps:,}"
    )


def selection_metric(task: str) -> tuple[str, str]:
    """The task's proper loss (log loss, or RMSE for regression), and why."""
    metric = contracts.PROPER_LOSS[task]
    return metric, f"--selection_metric unset: the proper loss of --task={task}"


def cache(policy: str, file_bytes: int) -> tuple[str, str]:
    """Where training records come from, 'memory' or 'stream' (trainer.data.records),
    and why. Depends on the files alone: the order of records depends on it."""
    size = f"the training files total {storage_lib.human_bytes(file_bytes)}"
    if policy == "memory":
        return "memory", f"--cache=memory; {size}"
    if policy == "off":
        return "stream", f"--cache=off; {size}"
    budget = storage_lib.human_bytes(MEMORY_BUDGET_BYTES)
    if file_bytes <= MEMORY_BUDGET_BYTES:
        return "memory", f"auto: {size}, within the {budget} budget"
    return "stream", f"auto: {size}, over the {budget} budget"
