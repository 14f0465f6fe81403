"""The boosted-trees members: two LightGBM models fitted on the training records, then
blended with the neural model by weights chosen on the validation data.

Neural nets and boosted trees err differently, and their blend is better than either on
most tables (RealMLP's Ensemble-TD, AutoGluon); two kinds of trees err differently
again. Both are fitted once the neural model is selected, on the same up to
TREE_RECORDS training records (the first, in file order, of the records the job trains
on), each stopping early on the validation records (MEMBERS):
- `trees`: LightGBM's meta-tuned defaults (LGBM-TD, Holzmueller et al. 2024, pytabkit):
  leaf-wise trees of up to 50-100 leaves;
- `shallow_trees`: CatBoost-like ones: at most 6 levels, a small rate, L2 3 and
  randomised split thresholds (`extra_trees`).
The fits are deterministic (LightGBM's `deterministic`, row-wise histograms, a fixed
thread count and the job's seed): every worker of a cluster fits the very same trees,
and the chief keeps them beside the checkpoints (contracts.TREES_FILE,
SHALLOW_TREES_FILE), so a restarted job reuses them.

Then the blend: the two trees members weighed against each other, their blend against
the neural model, both on the validation records (trainer.train.weighing), exported as
one mixture of the three (trainer.model.blend).
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
from trainer.train import weighing

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
}
# SHALLOW stops at ROUNDS too. On 15 of the 40 tables that is before validation would
# stop it. 3,000 rounds lowered both sets only a little (0.9223 / 0.8972 against
# 0.9230 / 0.8989) and made their whole jobs take 1.11x-1.98x as long
# (docs/decisions.md, "The shallow member stops at 1,000 rounds").
# The trees members, in blend order: each one's parameters by task, and its file.
MEMBERS = {
    "trees": (PARAMS, contracts.TREES_FILE),
    "shallow_trees": (
        {"classification": SHALLOW, "regression": SHALLOW},
        contracts.SHALLOW_TREES_FILE,
    ),
}
ROUNDS = 1000
PATIENCE = 300
# Fixed, whatever the machine: LightGBM's sums, and so its trees, depend on the threads.
THREADS = 2
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
    inner = weighing.choose_weight(plan.head, first, second, labels, weights, plan.seed)
    forest = weighing.blended(plan.head, first, second, inner.weight)
    weighed = weighing.choose_weight(plan.head, logits, forest, labels, weights, plan.seed)
    weight, losses = weighed.weight, weighed.losses
    members = {
        "neural": weight,
        **dict(zip(fitted, ((1 - weight) * inner.weight, (1 - weight) * (1 - inner.weight)))),
    }
    final = weighing.mixture(plan.head, logits, [first, second], list(members.values()))
    temperature, calibrated = weighing.choose_temperature(plan.head, final, labels, weights)
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
            "blend": weighing.mean_loss(plan.head, final, labels, weights),
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


def fit(
    plan: plan_lib.Plan,
    params: dict,
    train: tuple,
    valid: tuple,
    rounds: int | None = None,
    patience: int = PATIENCE,
    curves: dict | None = None,
) -> str:
    """LightGBM of `params` fitted on `train` (columns, target, weights) for up to
    `rounds` (ROUNDS), stopped early on `valid` after `patience` rounds without a better
    one: its best rounds, in LightGBM's text format. `curves` (benchmarks) receives the
    validation curve, as LightGBM's record_evaluation writes it."""
    import lightgbm

    categorical = trees.categorical_columns(plan.schema)
    (x, y, w), (vx, vy, vw) = train, valid
    data = lightgbm.Dataset(x, y, weight=w, categorical_feature=categorical, free_raw_data=True)
    booster = lightgbm.train(
        params,
        data,
        num_boost_round=ROUNDS if rounds is None else rounds,
        valid_sets=[
            lightgbm.Dataset(vx, vy, weight=vw, categorical_feature=categorical, reference=data)
        ],
        callbacks=[
            lightgbm.early_stopping(patience, verbose=False),
            *([] if curves is None else [lightgbm.record_evaluation(curves)]),
        ],
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
    arrays = trees.from_lightgbm(text)
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
