"""The boosted-trees member: LightGBM fitted on the training records, then blended with
the neural model by a weight chosen on the validation data.

Neural nets and boosted trees err differently, and their blend is better than either on
most tables (RealMLP's Ensemble-TD, AutoGluon). The trees are fitted once the neural
model is selected, on up to TREE_RECORDS training records (the first, in file order,
of the records the job trains on), stopping early on the validation records, with
LightGBM's meta-tuned defaults (LGBM-TD, Holzmueller et al. 2024, pytabkit). The fit is
deterministic (LightGBM's `deterministic`, row-wise histograms, a fixed thread count and
the job's seed): every worker of a cluster fits the very same trees, and the chief keeps
them beside the checkpoints (TREES_FILE), so a restarted job reuses them.

The blend: the mean of probabilities (of numbers, for regression) weighted w for the
neural members together and 1 - w for the trees: the w with the lowest proper loss on
the validation data (log loss, or squared error), pulled towards 1/2 as far as
resamples of those records disagree on it (`choose_weight`).
Then, for classes, the blend's logits are divided by the temperature that gives the
lowest validation log loss (temperature scaling: it changes probabilities, not the
predicted class nor the AUC).
"""

from __future__ import annotations

import dataclasses
import logging
import time

import keras
import numpy as np
import tensorflow as tf

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.data import inputs
from trainer.model import blend as blend_lib
from trainer.model import heads, trees
from trainer.plan import plan as plan_lib

# The trees' sample: enough for boosting's gains, bounded in memory and time (500,000
# records of 50 columns are 200 MB as float64).
TREE_RECORDS = 500_000
# LightGBM-TD (pytabkit's LGBM_TD_CLASS / LGBM_TD_REG): meta-tuned on 71 tables.
PARAMS = {
    "classification": {
        "learning_rate": 0.04,
        "num_leaves": 50,
        "min_data_in_leaf": 40,
        "bagging_fraction": 0.75,
    },
    "regression": {
        "learning_rate": 0.05,
        "num_leaves": 100,
        "min_data_in_leaf": 3,
        "bagging_fraction": 0.7,
    },
}
ROUNDS = 1000
PATIENCE = 300
# Fixed, whatever the machine: LightGBM's sums, and so its trees, depend on the threads.
THREADS = 2
BLEND_STEPS = 20
# The blend weight's prior: around 1/2, this standard deviation (choose_weight; chosen on
# the 26 benchmark tables: 0.909 of HGB's error against 0.911-0.912 for 0.1, 0.2, 0.5,
# docs/decisions.md); and the resamples of the validation records that measure how sure
# validation is of its choice.
WEIGHT_PRIOR_SD = 0.3
BOOTSTRAPS = 200
# Temperatures tried on the blend's logits (classes), evenly spaced in log from 1/2 to 4.
TEMPERATURES = 25
BATCH = 4096


@dataclasses.dataclass(frozen=True)
class Blended:
    """The job's final model, what metrics.json says of it, and its trees as text."""

    model: keras.Model
    info: dict
    trees: str


def blend(
    plan: plan_lib.Plan, neural: keras.Model, strategy: tf.distribute.Strategy, is_chief: bool
) -> Blended:
    """Fits the trees (or loads them), weighs them against the selected `neural` model on
    the validation data, and returns the blend of the two."""
    splits = plan.splits
    fitted = fit_or_load(plan, plan.storage, is_chief)
    x, labels, weights = matrix(plan, splits.validation_files, splits.validation_part, None)
    logits = neural_logits(plan, neural, splits.validation_files, splits.validation_part)
    scores = trees.Forest(fitted.arrays, fitted.booster)(x).numpy()
    weighed = choose_weight(plan.head, logits, scores, labels, weights, plan.seed)
    weight, losses = weighed.weight, weighed.losses
    temperature, calibrated = choose_temperature(
        plan.head, blended(plan.head, logits, scores, weight), labels, weights
    )
    with strategy.scope():
        model = blend_lib.blended_model(
            neural, plan.schema, plan.head, fitted.arrays, weight, temperature, fitted.booster
        )
    logging.info(
        "blend: %d rounds of boosted trees (%s records, %.1fs); weighed %.2f neural : %.2f "
        "trees on %d validation records (their own choice %.2f, spread %.2f over resamples; "
        "loss %.5g; neural alone %.5g, trees alone %.5g)%s",
        fitted.rounds,
        f"{fitted.records:,}" if fitted.records else "kept",
        fitted.seconds,
        weight,
        1 - weight,
        len(labels),
        weighed.choice,
        weighed.spread,
        losses[weight],
        losses[1.0],
        losses[0.0],
        f"; temperature {temperature:.3g} (loss {calibrated:.5g})" if temperature != 1 else "",
    )
    info = {
        "neuralWeight": weight,
        "validationChoice": weighed.choice,
        "choiceSpread": round(weighed.spread, 4),
        "temperature": temperature,
        "treeRounds": fitted.rounds,
        "treeRecords": fitted.records,
        "treeSeconds": round(fitted.seconds, 3),
        "validationLoss": {
            "neural": losses[1.0],
            "trees": losses[0.0],
            "blend": losses[weight],
            "calibrated": calibrated,
        },
    }
    return Blended(model, info, fitted.model)


@dataclasses.dataclass(frozen=True)
class Fitted:
    """The trees, as text (LightGBM's model format), as LightGBM's Booster (the job's
    evaluations) and as arrays for TensorFlow (the export)."""

    model: str
    booster: object  # lightgbm.Booster
    arrays: trees.Arrays
    rounds: int
    records: int
    seconds: float


def fit_or_load(plan: plan_lib.Plan, storage: storage_lib.Storage, is_chief: bool) -> Fitted:
    """The job's trees: those kept beside its checkpoints, else fitted now (and kept, by
    the chief)."""
    import lightgbm

    path = storage_lib.join(plan.checkpoint_dir, contracts.TREES_FILE)
    start = time.monotonic()
    if storage.exists(path):
        text = storage.read_bytes(path).decode()
        booster = lightgbm.Booster(model_str=text)
        logging.info("boosted trees: %d rounds, as fitted before this restart", booster.num_trees())
        return _fitted(booster, text, 0, start)
    x, y, w = matrix(plan, plan.splits.train_files, plan.splits.train_part, TREE_RECORDS)
    vx, vy, vw = matrix(plan, plan.splits.validation_files, plan.splits.validation_part, None)
    y, vy = _target(plan.head, y), _target(plan.head, vy)
    params = lightgbm_params(plan)
    categorical = trees.categorical_columns(plan.schema)
    train = lightgbm.Dataset(x, y, weight=w, categorical_feature=categorical, free_raw_data=True)
    valid = lightgbm.Dataset(vx, vy, weight=vw, categorical_feature=categorical, reference=train)
    booster = lightgbm.train(
        params,
        train,
        num_boost_round=ROUNDS,
        valid_sets=[valid],
        callbacks=[lightgbm.early_stopping(PATIENCE, verbose=False)],
    )
    text = booster.model_to_string(num_iteration=booster.best_iteration)
    if is_chief:
        storage.write_bytes(path, text.encode())
    return _fitted(lightgbm.Booster(model_str=text), text, len(y), start)


def lightgbm_params(plan: plan_lib.Plan) -> dict:
    """LightGBM's parameters for the job's trees: LGBM-TD's for the task, deterministic
    (row-wise histograms, THREADS threads, the job's seed)."""
    task = "regression" if plan.task == "regression" else "classification"
    return {
        **PARAMS[task],
        "objective": {"regression": "regression", "binary": "binary"}.get(plan.task, "multiclass"),
        "bagging_freq": 1,
        "min_sum_hessian_in_leaf": 1e-7,
        "max_bin": 255,
        "seed": plan.seed,
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": THREADS,
        "verbose": -1,
        **({"num_class": plan.head.units} if plan.task == "multiclass" else {}),
    }


def _fitted(booster, text: str, records: int, start: float) -> Fitted:
    arrays = trees.from_lightgbm(booster.dump_model())
    rounds = booster.num_trees() // arrays.outputs
    return Fitted(text, booster, arrays, rounds, records, time.monotonic() - start)


def matrix(
    plan: plan_lib.Plan, files: list[str], part, limit: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(columns, labels, weights) of up to `limit` records of `files` that `part` keeps,
    in file order: the trees' matrix (trees.Columns), and the labels as the head's loss
    takes them (class indices; numbers as they are)."""
    columns = trees.Columns(plan.schema)
    xs, ys, ws, n = [], [], [], 0
    for features, labels, weights in _records(plan, files, part):
        xs.append(columns(features).numpy())
        ys.append(labels.numpy())
        ws.append(weights.numpy())
        n += len(ys[-1])
        if limit is not None and n >= limit:
            break
    x, y, w = (np.concatenate(a)[:limit] for a in (xs, ys, ws))
    return x, y, w


def _target(head: heads.Head, labels: np.ndarray) -> np.ndarray:
    """What the trees learn: class indices, or the standardised number, on the neural
    model's scale (its logits for regression are standardised too)."""
    if head.task != "regression":
        return labels
    return (labels - head.label_mean) / head.label_std


def neural_logits(plan: plan_lib.Plan, model, files: list[str], part) -> np.ndarray:
    """The neural model's combined logits ([records, units]) on the records of `files`
    that `part` keeps, in the order `matrix` reads them."""
    predict = tf.function(
        lambda features: plan.head.combine(model(features, training=False)), autograph=False
    )
    return np.concatenate([predict(f).numpy() for f, _, _ in _records(plan, files, part)])


def _records(plan: plan_lib.Plan, files: list[str], part) -> tf.data.Dataset:
    """(features, labels, weights) batches of the records of `files` that `part` keeps,
    each once, in file order."""
    return inputs.make_dataset(
        [plan.storage.path(f) for f in files],
        plan.schema,
        batch_size=BATCH,
        training=False,
        skip_corrupt=plan.skip_corrupt_records,
        keep=part,
    )


@dataclasses.dataclass(frozen=True)
class Weighing:
    """The blend's neural share `weight`; validation's own choice and its standard
    deviation over resamples of the records; the validation loss of every w tried."""

    weight: float
    choice: float
    spread: float
    losses: dict[float, float]


def choose_weight(
    head: heads.Head,
    neural: np.ndarray,
    forest: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    seed: int = 0,
) -> Weighing:
    """The neural share w of the blend, as validation weighs it (`Weighing`).

    w* is the w of the lowest proper loss on these records (from 0 to 1 in steps of
    1/BLEND_STEPS); `spread` is w*'s standard deviation over BOOTSTRAPS resamples of the
    records (drawn from `seed`: every worker draws the same). The weight is w* pulled
    towards the equal blend as far as validation is unsure of it (`pulled`): the mean of
    a normal prior around 1/2 of deviation WEIGHT_PRIOR_SD and a normal likelihood around
    w* of deviation `spread`. A few dozen records choose by chance (both models were also
    selected on them); a clear choice, on any number of records, is followed
    (docs/decisions.md).
    """
    grid = [i / BLEND_STEPS for i in range(BLEND_STEPS + 1)]
    weights = np.asarray(weights, np.float64)

    def per_example(w: float) -> np.ndarray:
        return _per_example_loss(head, blended(head, neural, forest, w), labels)

    def mean(losses: np.ndarray) -> float:
        return float(weights @ losses / weights.sum())

    table = np.stack([per_example(w) for w in grid], 1)  # [records, w]
    losses = {w: mean(column) for w, column in zip(grid, table.T)}
    best = _lowest(grid, weights @ table)
    rng = np.random.default_rng(seed)
    n = len(labels)
    draws = [
        _lowest(grid, (np.bincount(rng.integers(0, n, n), minlength=n) * weights) @ table)
        for _ in range(BOOTSTRAPS)
    ]
    spread = float(np.std(draws))
    chosen = pulled(best, spread)
    if chosen not in losses:
        losses[chosen] = mean(per_example(chosen))
    return Weighing(chosen, best, spread, losses)


def pulled(choice: float, spread: float, prior_sd: float = WEIGHT_PRIOR_SD) -> float:
    """Validation's `choice` of the weight, pulled towards 1/2 as far as its `spread`
    says it is unsure: 0.5 + (choice - 0.5) * prior_sd^2 / (prior_sd^2 + spread^2)."""
    return round(0.5 + (choice - 0.5) * prior_sd**2 / (prior_sd**2 + spread**2), 4)


def _per_example_loss(head: heads.Head, logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The head's loss of each record, in float64 for the sums over records."""
    per_example = head.loss(_labels(head, labels), tf.constant(logits, tf.float32))
    return per_example.numpy().astype(np.float64)


def _lowest(grid: list[float], totals: np.ndarray) -> float:
    """The w of the lowest total; ties (within float32's rounding: trees that add
    nothing) keep the neural model."""
    lowest = float(np.min(totals))
    return max(w for w, total in zip(grid, totals) if total <= lowest + 1e-6 * abs(lowest))


def choose_temperature(
    head: heads.Head, logits: np.ndarray, labels: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """The temperature (classes only: 1 for regression) by which dividing `logits` gives
    the lowest log loss on these records, from 1/2 to 4, and that loss. 1 unless another
    is better by more than float32's rounding."""

    weights = np.asarray(weights, np.float64)

    def loss(t: float) -> float:
        return float(weights @ _per_example_loss(head, logits / t, labels) / weights.sum())

    plain = loss(1.0)
    if head.task == "regression":
        return 1.0, plain
    grid = [float(t) for t in np.geomspace(0.5, 4.0, TEMPERATURES)]
    best = min(grid, key=loss)
    return (best, loss(best)) if loss(best) < plain - 1e-6 * abs(plain) else (1.0, plain)


def _labels(head: heads.Head, labels: np.ndarray) -> tf.Tensor:
    """Labels as the head's loss takes them: float32 numbers, or int32 class indices."""
    return tf.constant(labels, tf.float32 if head.task == "regression" else tf.int32)


def blended(head: heads.Head, neural: np.ndarray, forest: np.ndarray, w: float) -> np.ndarray:
    """The blend's logits (numpy), as the exported model computes them."""
    layer = blend_lib.Blend(head, w)
    return layer(tf.constant(neural, tf.float32), tf.constant(forest, tf.float32)).numpy()
