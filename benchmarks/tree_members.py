"""Changes to the trees' side of the default model, replayed on real default jobs
(issue 28; docs/results/2026-12-06-races-and-second-trees.md: the race not built, the
CatBoost-like member the default's `shallow_trees` since 2026-12-07;
docs/results/2026-12-07-shallow-rounds-and-missing-numbers.md: its cap of rounds and
rate, not built; missing numbers as CatBoost's Min was replayed at commit 6d69fcc, and
built):

- **A race**: the trees fitted first, the networks stopped at the first evaluation from
  a share `f` of the planned steps on where their best validation loss is worse than
  the trees' by more than `m`; the job is then the trees alone (weight 0, exact here).
- **A second trees member**: another boosted-trees model in place of the job's own
  second one (or beside its one, in jobs from before 2026-12-07), fitted on the job's
  matrices (trainer.train.forest.matrix: the same records, the same validation records
  for its early stopping), blended in two stages by the job's own rule
  (weighing.choose_weight): the job's first trees and the candidate, then the network with
  their blend (--members picks which).

    python -m benchmarks.real_data --tables=sixteen --variant= \\
        --blend_predictions=.local/blend --output=.local/sixteen.json   # held_out, fresh
    python -m benchmarks.tree_members --predictions=.local/blend \\
        --jobs=.local/real-data/jobs --set="the 26:.local/sixteen.json,.local/held_out.json" \\
        --set=fresh:.local/fresh.json

Each job's plan is rebuilt from its config.json (its directory under --jobs, found by
table and seed), the matrices read as the job reads them, and the second member's
scores kept under --cache. Errors as benchmarks.blend_rules scores them (medians over
seeds, over HistGradientBoosting's error).
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import time

import numpy as np
from absl import app, flags, logging

from benchmarks import blend_rules, real_data
from trainer.base import config as config_lib
from trainer.base import contracts
from trainer.model import heads, trees
from trainer.plan import plan as plan_lib
from trainer.train import forest, weighing

FLAGS = flags.FLAGS  # --predictions and --set: benchmarks.blend_rules' flags
flags.DEFINE_string("jobs", ".local/real-data/jobs", "The jobs' directories (NAME-TIME).")
flags.DEFINE_string("cache", ".local/tree-members", "Where second members' scores are kept.")
flags.DEFINE_multi_string(
    "members", None, "A second member to fit (LIGHTGBM's, 'catboost'); all if unset."
)

RACES = [(f, m) for f in (0.1, 0.25, 0.5) for m in (0.0, 0.02, 0.05, 0.1)]
# The second members, fixed before any was run (none tuned; .local/preregistered.md):
# 2026-12-06, a CatBoost-like LightGBM (depth 6, a small rate, L2 3, randomised splits,
# 1,000 rounds: the default's second member since 2026-12-07), the first
# member's own parameters with another seed (a control: what a second draw alone gives),
# and CatBoost at its defaults (one-hot splits up to 255 values, wider categoricals as
# their slot: what an export of plain comparisons could hold), if installed; 2026-12-07,
# that member at CatBoost's own rate for the task and the number of records, or with a
# cap of 3,000 rounds (built, then taken back for its cost). Each: (plan, records) -> params.
LIGHTGBM = {
    "lightgbm, CatBoost-like": lambda plan, n: {**forest.SHALLOW, "seed": plan.seed},
    "lightgbm, another seed": lambda plan, n: {
        **forest.PARAMS["regression" if plan.task == "regression" else "classification"],
        "seed": plan.seed + 1000,
    },
    "shallow, CatBoost's rate": lambda plan, n: {
        **forest.SHALLOW,
        "learning_rate": catboost_rate(plan.task, n),
        "seed": plan.seed,
    },
    "shallow, 3,000 rounds": lambda plan, n: {
        **forest.SHALLOW,
        "num_iterations": 3000,
        "seed": plan.seed,
    },
}
# CatBoost 1.2's automatic learning rate at 1,000 iterations: (rate at 400 training
# records, power of records / 400), read off CatBoost 1.2.10 at 400, 4,000 and 40,000
# records (its rule: a power law in the records, per loss).
CATBOOST_RATE = {
    "regression": (0.0441, 0.157),
    "binary": (0.0253, 0.247),
    "multiclass": (0.106, 0.020),
}
CATBOOST = "catboost"
PARTS = ("validation", "test")


def catboost_rate(task: str, records: int) -> float:
    """The learning rate CatBoost 1.2 picks at 1,000 iterations for `task` on `records`."""
    rate, power = CATBOOST_RATE[task]
    return rate * (records / 400) ** power


def job_dirs(jobs: str, table: str) -> dict[int, str]:
    """seed -> the directory of `table`'s finished job of that seed (the newest)."""
    found: dict[int, tuple[float, str]] = {}
    for name in os.listdir(jobs):
        if not (name.startswith(f"{table}-") and name[len(table) + 1 :].isdigit()):
            continue
        path = os.path.join(jobs, name)
        plan_file = _model_file(path, contracts.PLAN_FILE)
        if os.path.exists(plan_file):
            seed = json.load(open(plan_file))["decided"]["seed"]
            if seed not in found or os.path.getmtime(path) > found[seed][0]:
                found[seed] = (os.path.getmtime(path), path)
    return {seed: path for seed, (_, path) in found.items()}


def _model_file(job_dir: str, name: str) -> str:
    return os.path.join(job_dir, "model", name)  # benchmarks.real_data's --job_dir/model


def race_stop(history: dict, trees_loss: float, train_steps: int, f: float, m: float):
    """The step at which the race stops the networks (None: they finish)."""
    best = np.inf
    for e in history["eval"]:
        best = min(best, e["loss"])
        if e["step"] >= f * train_steps and best > trees_loss * (1 + m):
            return e["step"]
    return None


def seconds_after(history: dict, batch: int, step: int) -> float:
    """The training loops' seconds after `step` (each loop's examples/s)."""
    total, previous = 0.0, 0
    for row in history["train"]:
        if row["step"] > step:
            total += (row["step"] - previous) * batch / row["examples_per_second"]
        previous = row["step"]
    return total


def job_plan(job_dir: str) -> plan_lib.Plan:
    """The job's plan, rebuilt from its config.json."""
    config = json.load(open(_model_file(job_dir, contracts.CONFIG_FILE)))
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    return plan_lib.make_plan(config_lib.Config(**config))


def matrices(plan: plan_lib.Plan) -> dict[str, tuple]:
    """The trees' (columns, target, weights) of training, validation and test records,
    as the job's trees read them."""
    s = plan.splits
    out = {
        "train": forest.matrix(plan, s.train_files, s.train_part, forest.TREE_RECORDS),
        "validation": forest.matrix(plan, s.validation_files, s.validation_part, None),
        "test": forest.matrix(plan, s.test_files, None, None),
    }
    return {k: (x, forest._target(plan.head, y), w) for k, (x, y, w) in out.items()}


def fit_lightgbm(plan: plan_lib.Plan, data: dict, params: dict) -> tuple:
    """(validation scores, test scores, seconds) of LightGBM fitted as the job fits its
    trees (forest.fit), with `params` over the first member's own."""
    import lightgbm

    params = {**forest.lightgbm_params(plan), **params}
    rounds = params.pop("num_iterations", None)  # a candidate's own cap
    start = time.monotonic()
    text = forest.fit(plan, params, data["train"], data["validation"], rounds)
    seconds = time.monotonic() - start
    booster = lightgbm.Booster(model_str=text)
    logging.info(
        "%s: %d rounds kept, fitted in %.2f s", params, booster.current_iteration(), seconds
    )

    def scores(a):
        return np.asarray(booster.predict(a, raw_score=True), np.float64).reshape(len(a), -1)

    return scores(data["validation"][0]), scores(data["test"][0]), seconds


def fit_catboost(plan: plan_lib.Plan, data: dict) -> tuple:
    """(validation scores, test scores, seconds) of CatBoost at its defaults (1,000
    rounds, the best on the validation records), the job's seed, 2 threads."""
    import catboost
    import pandas as pd

    (x, y, _), (vx, vy, _), (tx, _, _) = data["train"], data["validation"], data["test"]
    every = np.concatenate([x, vx, tx])
    cats = [c for c in trees.categorical_columns(plan.schema) if np.nanmax(every[:, c]) < 255]

    def frame(a):
        df = pd.DataFrame(a)
        for c in cats:
            df[c] = np.nan_to_num(df[c], nan=-1).astype(np.int64)
        return df

    common = dict(
        random_seed=plan.seed,
        thread_count=forest.THREADS,
        verbose=0,
        one_hot_max_size=255,
        allow_writing_files=False,
    )
    if plan.task == "regression":
        model = catboost.CatBoostRegressor(**common)
    else:
        loss = "Logloss" if plan.task == "binary" else "MultiClass"
        model = catboost.CatBoostClassifier(**common, loss_function=loss)
    start = time.monotonic()
    model.fit(frame(x), y, cat_features=cats, eval_set=(frame(vx), vy))
    seconds = time.monotonic() - start

    def scores(a):
        raw = model.predict(frame(a), prediction_type="RawFormulaVal")
        return np.asarray(raw, np.float64).reshape(len(a), -1)

    return scores(vx), scores(tx), seconds


def second_members(
    job_dir: str, cache: str | None, members: list[str] | None = None
) -> dict[str, tuple]:
    """name -> (validation scores, test scores, seconds) of each second member of the
    job in `job_dir` (those named in `members`; all if None), kept in (and read back
    from) the file `cache`."""
    if cache and os.path.exists(cache):
        kept = np.load(cache)
        names = sorted({k.rsplit("/", 1)[0] for k in kept.files})
        return {n: (kept[f"{n}/v"], kept[f"{n}/t"], float(kept[f"{n}/s"])) for n in names}
    plan = job_plan(job_dir)
    data = matrices(plan)
    records = len(data["train"][0])
    found = {
        name: fit_lightgbm(plan, data, p(plan, records))
        for name, p in LIGHTGBM.items()
        if members is None or name in members
    }
    wanted = members is None or CATBOOST in members
    if wanted and importlib.util.find_spec("catboost"):  # benchmarks only: the bench extra
        found[CATBOOST] = fit_catboost(plan, data)
    if cache:
        os.makedirs(os.path.dirname(cache) or ".", exist_ok=True)
        np.savez(
            cache,
            **{
                f"{n}/{k}": a
                for n, (v, t, s) in found.items()
                for k, a in (("v", v), ("t", t), ("s", s))
            },
        )
    return found


def two_stage(job: dict, head: heads.Head, validation: np.ndarray, test: np.ndarray) -> dict:
    """The test metric of the job's first trees member and a second member (its
    `validation` and `test` scores) blended by the job's rule, then blended with the
    network by it. (Jobs from before 2026-12-07 kept one trees member, as `*_trees`.)"""
    own = {part: job.get(f"{part}_member_trees", job[f"{part}_trees"]) for part in PARTS}
    first = {
        **job,
        **{f"{part}_neural": own[part] for part in PARTS},
        "validation_trees": validation,
        "test_trees": test,
    }
    w = _weight(first, head)
    both = {
        **job,
        "validation_trees": weighing.blended(head, own["validation"], validation, w),
        "test_trees": weighing.blended(head, own["test"], test, w),
    }
    return blend_rules.test_metric(both, head, _weight(both, head))


def _weight(job: dict, head: heads.Head) -> float:
    """The job's rule's weight of the first model ('neural') against the second."""
    return blend_rules.weighing(job, head).weight


def replay_job(
    job: dict, job_dir: str, cache: str | None, members: list[str] | None = None
) -> tuple[dict, dict]:
    """({rule: the job's test metric under it}, {rule: training seconds}) of one job:
    the races and the second `members` (all if None)."""
    head = blend_rules.head_of(job)
    history = json.load(open(_model_file(job_dir, contracts.HISTORY_FILE)))
    decided = json.load(open(_model_file(job_dir, contracts.PLAN_FILE)))["decided"]
    blend = json.load(open(_model_file(job_dir, contracts.METRICS_FILE)))["blend"]
    trained = history["training_seconds"]
    losses = blend["validationLoss"]  # the trees members' blend (one member before 2026-12-07)
    trees_loss = losses.get("treesBlend", losses["trees"])
    metrics = {
        "default": blend_rules.test_metric(job, head, float(job["weight"])),
        "trees alone": blend_rules.test_metric(job, head, 0.0),
    }
    seconds = {"default": trained}
    for f, m in RACES:
        rule = f"race f={f:g} m={m:g}"
        stop = race_stop(history, trees_loss, decided["train_steps"], f, m)
        metrics[rule] = metrics["default"] if stop is None else metrics["trees alone"]
        seconds[rule] = trained - (
            0.0 if stop is None else seconds_after(history, decided["batch_size"], stop)
        )
    for name, (v, t, s) in second_members(job_dir, cache, members).items():
        metrics[f"+ {name}"] = two_stage(job, head, v, t)
        seconds[f"+ {name}"] = trained + s
    return metrics, seconds


def replay(rows: list[dict]) -> tuple[dict, dict, list[str]]:
    """{rule: {table: error ratio}}, {rule: {table: median training seconds}} and the
    tables of `rows` with kept predictions and jobs."""
    ratios: dict = collections.defaultdict(dict)
    seconds: dict = collections.defaultdict(dict)
    for row in rows:
        table = row["dataset"]
        runs, times = collections.defaultdict(list), collections.defaultdict(list)
        for seed, job_dir in sorted(job_dirs(FLAGS.jobs, table).items()):
            path = os.path.join(FLAGS.predictions, f"{table}-{seed}.npz")
            if not os.path.exists(path):
                continue
            cache = os.path.join(FLAGS.cache, f"{table}-{seed}.npz") if FLAGS.cache else None
            metrics, secs = replay_job(dict(np.load(path)), job_dir, cache, FLAGS.members)
            for rule in metrics:
                runs[rule].append(metrics[rule])
            for rule in secs:
                times[rule].append(secs[rule])
        for rule, found in runs.items():
            medians = {k: float(np.median([run[k] for run in found])) for k in found[0]}
            ratios[rule][table] = real_data.error_ratio({**row, **medians})
        for rule, found_seconds in times.items():
            seconds[rule][table] = float(np.median(found_seconds))
        if runs:
            ratios["CatBoost"][table] = row["catboost error ratio"]
            seconds["CatBoost"][table] = row["catboost seconds"]
    return ratios, seconds, [r["dataset"] for r in rows if r["dataset"] in ratios["CatBoost"]]


def main(argv):
    del argv
    for spec in FLAGS.set:
        name, _, paths = spec.partition(":")
        rows = [row for path in paths.split(",") for row in json.load(open(path))]
        ratios, seconds, tables = replay(rows)
        task_of = {r["dataset"]: r["task"] for r in rows}
        size = {r["dataset"]: r["rows"] for r in rows}
        blend_rules.print_ratios(name, ratios, tables, task_of)
        names = list(seconds)  # "trees alone" has no job of its own to time
        print(f"\n{name}: training seconds, medians (x CatBoost's fit), tables of 10,000+ rows\n")
        print("| table | " + " | ".join(names) + " |")
        print("| --- |" + " --- |" * len(names))
        for table in [t for t in tables if size[t] >= 10_000]:
            base = seconds["CatBoost"][table]
            cells = " | ".join(
                f"{seconds[r][table]:.1f} ({seconds[r][table] / base:.1f}x)" for r in names
            )
            print(f"| {table} | {cells} |")


if __name__ == "__main__":
    app.run(main)
