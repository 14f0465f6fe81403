"""The boosted-trees members: two LightGBM models fitted on the training records, then
blended with the neural model by weights chosen on the validation data.

Neural nets and boosted trees err differently, and their blend is better than either on
most tables (RealMLP's Ensemble-TD, AutoGluon); two kinds of trees err differently
again. Both are fitted once the neural model is selected, on the same up to
TREE_RECORDS training records (the first, in file order, of the records the job trains
on), each stopping early on the validation records (MEMBERS):
- `trees`: LightGBM's meta-tuned defaults (LGBM-TD, Holzmueller et al. 2024, pytabkit):
  leaf-wise trees of up to 50-100 leaves;
- `shallow_trees`: CatBoost-like ones: at most 6 levels, a small rate over up to 3,000
  rounds, L2 3 and randomised split thresholds (`extra_trees`).
The fits are deterministic (LightGBM's `deterministic`, row-wise histograms, a fixed
thread count and the job's seed): every worker of a cluster fits the very same trees,
and the chief keeps them beside the checkpoints (contracts.TREES_FILE,
SHALLOW_TREES_FILE), so a restarted job reuses them.

The blend, in two stages, each by the same rule (`choose_weight`): the two trees
members' mean of probabilities (of numbers, for regression) weighted w1 : 1 - w1, then
that and the neural members together weighted 1 - w : w, each w the one with the lowest
proper loss on the validation data (log loss, or squared error), pulled towards 1/2 as
far as resamples of those records disagree on it. The exported model is the one mixture
of the three, weighted w, (1 - w) w1, (1 - w)(1 - w1). Then, for classes, its logits are
divided by the temperature that gives the lowest validation log loss (temperature
scaling: it changes probabilities, not the predicted class nor the AUC).
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
# The second member, CatBoost's defaults as far as LightGBM has them (depth 6, rate 0.03,
# L2 3, random strength as randomised thresholds), fixed before it was measured: on the
# 40 benchmark tables' default jobs it lowered both sets' error ratios (0.923 / 0.899
# against 0.927 / 0.908), another seed of the first member 0.926 / 0.907
# (docs/decisions.md, "Two trees members").
SHALLOW = {
    "max_depth": 6,
    "num_leaves": 64,
    "learning_rate": 0.03,
    "lambda_l2": 3.0,
    "min_data_in_leaf": 1,
    "bagging_fraction": 0.8,
    "extra_trees": True,
    # At rate 0.03, 1,000 rounds stopped 15 of the 40 tables' fits before validation did;
    # 3,000 lowered both sets' error ratios (0.922 / 0.897 against 0.923 / 0.899), where
    # CatBoost's own rate (0.025-0.116 by task and records) at 1,000 raised the 26's.
    "num_iterations": 3000,
}
# The trees members, in blend order: each one's parameters by task, and its file.
MEMBERS = {
    "trees": (PARAMS, contracts.TREES_FILE),
    "shallow_trees": (
        {"classification": SHALLOW, "regression": SHALLOW},
        contracts.SHALLOW_TREES_FILE,
    ),
}
ROUNDS = 1000  # a member's cap of rounds unless its parameters say (num_iterations)
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
    """The job's final model, what metrics.json says of it, and its trees members as
    text (file name -> LightGBM's model)."""

    model: keras.Model
    info: dict
    trees: dict[str, str]


def blend(
    plan: plan_lib.Plan, neural: keras.Model, strategy: tf.distribute.Strategy, is_chief: bool
) -> Blended:
    """Fits the trees members (or loads them), weighs them against each other and then
    against the selected `neural` model on the validation data, and returns the blend."""
    splits = plan.splits
    start = time.monotonic()
    x, labels, weights = matrix(plan, splits.validation_files, splits.validation_part, None)
    fitted = fit_or_load(plan, plan.storage, is_chief, (x, labels, weights))
    seconds = time.monotonic() - start
    logits = neural_logits(plan, neural, splits.validation_files, splits.validation_part)
    first, second = (trees.Forest(f.arrays, f.booster)(x).numpy() for f in fitted.values())
    inner = choose_weight(plan.head, first, second, labels, weights, plan.seed)
    forest = blended(plan.head, first, second, inner.weight)
    weighed = choose_weight(plan.head, logits, forest, labels, weights, plan.seed)
    weight, losses = weighed.weight, weighed.losses
    members = {
        "neural": weight,
        **dict(zip(fitted, ((1 - weight) * inner.weight, (1 - weight) * (1 - inner.weight)))),
    }
    final = mixture(plan.head, logits, [first, second], list(members.values()))
    temperature, calibrated = choose_temperature(plan.head, final, labels, weights)
    with strategy.scope():
        model = blend_lib.blended_model(
            neural,
            plan.schema,
            plan.head,
            {name: (f.arrays, f.booster) for name, f in fitted.items()},
            list(members.values()),
            temperature,
        )
    records = max(f.records for f in fitted.values())
    logging.info(
        "blend: boosted trees: %s (%s records, %.1fs); weighed %.2f trees : %.2f "
        "shallow_trees (their own choice %.2f, spread %.2f); weighed %.2f neural : %.2f "
        "trees on %d validation records (their own choice %.2f, spread %.2f over "
        "resamples; loss %.5g; neural alone %.5g, trees alone %.5g)%s",
        ", ".join(f"{name} {f.rounds} rounds" for name, f in fitted.items()),
        f"{records:,}" if records else "kept",
        seconds,
        inner.weight,
        1 - inner.weight,
        inner.choice,
        inner.spread,
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
    member_losses = dict(zip(fitted, (inner.losses[1.0], inner.losses[0.0])))
    info = {
        "neuralWeight": weight,
        "validationChoice": weighed.choice,
        "choiceSpread": round(weighed.spread, 4),
        "treesWeight": inner.weight,
        "treesChoice": inner.choice,
        "treesSpread": round(inner.spread, 4),
        "memberWeights": {name: round(w, 6) for name, w in members.items()},
        "temperature": temperature,
        "treeRounds": {name: f.rounds for name, f in fitted.items()},
        "treeRecords": records,
        "treeSeconds": round(seconds, 3),
        "validationLoss": {
            "neural": losses[1.0],
            **member_losses,
            "treesBlend": losses[0.0],
            "blend": _mean_loss(plan.head, final, labels, weights),
            "calibrated": calibrated,
        },
    }
    return Blended(model, info, {MEMBERS[name][1]: f.model for name, f in fitted.items()})


@dataclasses.dataclass(frozen=True)
class Fitted:
    """A trees member, as text (LightGBM's model format), as LightGBM's Booster (the
    job's evaluations) and as arrays for TensorFlow (the export)."""

    model: str
    booster: object  # lightgbm.Booster
    arrays: trees.Arrays
    rounds: int
    records: int


def fit_or_load(
    plan: plan_lib.Plan, storage: storage_lib.Storage, is_chief: bool, validation: tuple
) -> dict[str, Fitted]:
    """The job's trees members by name (MEMBERS' order): those kept beside its
    checkpoints, else fitted now, stopped early on `validation` (`matrix`'s columns,
    labels and weights), and kept by the chief."""
    vx, vy, vw = validation
    valid = (vx, _target(plan.head, vy), vw)
    found: dict[str, Fitted] = {}
    train = None
    for name, (_, file) in MEMBERS.items():
        path = storage_lib.join(plan.checkpoint_dir, file)
        if storage.exists(path):
            found[name] = _fitted(storage.read_bytes(path).decode(), 0)
            logging.info("%s: %d rounds, as fitted before this restart", name, found[name].rounds)
            continue
        if train is None:  # one read of the training records for both members
            x, y, w = matrix(plan, plan.splits.train_files, plan.splits.train_part, TREE_RECORDS)
            train = (x, _target(plan.head, y), w)
        text = fit(plan, lightgbm_params(plan, name), train, valid)
        if is_chief:
            storage.write_bytes(path, text.encode())
        found[name] = _fitted(text, len(train[1]))
    return found


def fit(plan: plan_lib.Plan, params: dict, train: tuple, valid: tuple) -> str:
    """LightGBM of `params` fitted on `train` (columns, target, weights), stopped early on
    `valid`: its best rounds, in LightGBM's text format."""
    import lightgbm

    categorical = trees.categorical_columns(plan.schema)
    (x, y, w), (vx, vy, vw) = train, valid
    params = dict(params)
    rounds = params.pop("num_iterations", ROUNDS)  # a member's own cap (SHALLOW's)
    data = lightgbm.Dataset(x, y, weight=w, categorical_feature=categorical, free_raw_data=True)
    booster = lightgbm.train(
        params,
        data,
        num_boost_round=rounds,
        valid_sets=[
            lightgbm.Dataset(vx, vy, weight=vw, categorical_feature=categorical, reference=data)
        ],
        callbacks=[lightgbm.early_stopping(PATIENCE, verbose=False)],
    )
    return booster.model_to_string(num_iteration=booster.best_iteration)


def lightgbm_params(plan: plan_lib.Plan, member: str = "trees") -> dict:
    """LightGBM's parameters for the job's trees `member` (MEMBERS) and task,
    deterministic (row-wise histograms, THREADS threads, the job's seed)."""
    task = "regression" if plan.task == "regression" else "classification"
    return {
        **MEMBERS[member][0][task],
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


def _fitted(text: str, records: int) -> Fitted:
    import lightgbm

    booster = lightgbm.Booster(model_str=text)
    arrays = trees.from_lightgbm(booster.dump_model())
    return Fitted(text, booster, arrays, booster.num_trees() // arrays.outputs, records)


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

    def loss(t: float) -> float:
        return _mean_loss(head, logits / t, labels, weights)

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
    """The logits (numpy) of two models' blend, `w` for the first, as Blend computes it."""
    return mixture(head, neural, [forest], [w, 1 - w])


def mixture(
    head: heads.Head, neural: np.ndarray, forests: list[np.ndarray], weights: list[float]
) -> np.ndarray:
    """The blend's logits (numpy) of the neural model and trees members, `weights` in
    that order, as the exported model computes them."""
    layer = blend_lib.Blend(head, weights)
    return layer(
        tf.constant(neural, tf.float32), [tf.constant(f, tf.float32) for f in forests]
    ).numpy()


def _mean_loss(head: heads.Head, logits: np.ndarray, labels: np.ndarray, weights) -> float:
    """The weighted mean of the head's loss over these records."""
    weights = np.asarray(weights, np.float64)
    return float(weights @ _per_example_loss(head, logits, labels) / weights.sum())
