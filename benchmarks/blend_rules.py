"""Rules for the blend's weight, replayed on the predictions of real default jobs.

    python -m benchmarks.real_data --tables=sixteen --variant= \\
        --blend_predictions=.local/blend --output=.local/sixteen.json   # (held_out, fresh)
    python -m benchmarks.blend_rules --predictions=.local/blend \\
        --set="the 26:.local/sixteen.json,.local/held_out.json" --set=fresh:.local/fresh.json

A job's training is deterministic and the weight only mixes two fixed predictions, so a
rule's test error is exact without training again: each rule picks a weight from the
validation predictions (`trainer.train.weighing`'s own functions), and the blend of the test
predictions at that weight is scored by `real_data.error_ratio`, as a job is (RMSE; 1 - AUC,
here exact where the job's own AUC is read from 8,192 bins of the log-odds, within 2e-4
of it; 1 - accuracy; a classifier's
error plus 0.5 / test rows), median over seeds, over HistGradientBoosting's error from the
same runs' JSON. Prints each table under each rule, then per set the geometric means per
task and the tables above 1.10, CatBoost's beside them.
"""

from __future__ import annotations

import collections
import glob
import json
import os

import numpy as np
import tensorflow as tf
from absl import app, flags
from sklearn.metrics import roc_auc_score

from benchmarks import real_data
from trainer.model import heads
from trainer.train import weighing as weighing_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("predictions", ".local/blend", "The folder of NAME-SEED.npz files.")
flags.DEFINE_multi_string("set", [], "NAME:JSON[,JSON]: a set of tables and their results.")
flags.DEFINE_list("prior_sds", ["0.1", "0.2", "0.3", "0.4", "0.5"], "Priors tried.")


def rules(job: dict, head: heads.Head, prior_sds: list[float]) -> dict[str, float]:
    """Each rule's weight for one job's validation predictions."""
    weighed = weighing(job, head)
    n = len(job["validation_labels"])
    found = {
        "the job's": float(job["weight"]),
        "n / (n + 2000)": round(0.5 + (weighed.choice - 0.5) * n / (n + 2000), 4),
        "validation's choice": weighed.choice,
        "neural alone": 1.0,
        "trees alone": 0.0,
    }
    for sd in prior_sds:
        found[f"spread, prior sd {sd:g}"] = weighing_lib.pulled(weighed.choice, weighed.spread, sd)
    return found


def weighing(job: dict, head: heads.Head) -> weighing_lib.Weighing:
    """The job's own rule (weighing_lib.choose_weight) on its kept validation predictions."""
    return weighing_lib.choose_weight(
        head,
        job["validation_neural"],
        job["validation_trees"],
        job["validation_labels"],
        job["validation_weights"],
        int(job["validation_seed"]),
    )


def test_metric(job: dict, head: heads.Head, weight: float) -> dict[str, float]:
    """The blend's test metric at `weight`, under the name `real_data.ERRORS` reads it
    (rootMeanSquaredError, auRoc, accuracy)."""
    logits = weighing_lib.blended(head, job["test_neural"], job["test_trees"], weight)
    labels = job["test_labels"]
    if head.task == "regression":
        predicted = head.predictions(tf.constant(logits)).numpy()
        return {"rootMeanSquaredError": float(np.sqrt(np.mean((predicted - labels) ** 2)))}
    probabilities = head.probabilities(tf.constant(logits)).numpy()
    if head.task == "binary":
        return {"auRoc": float(roc_auc_score(labels, probabilities[:, 1]))}
    return {"accuracy": float(np.mean(probabilities.argmax(1) == labels))}


def head_of(job: dict) -> heads.Head:
    task = str(job["task"])
    classes = tuple(range(int(job["classes"]))) if task != "regression" else ()
    return heads.Head(
        task, classes, label_mean=float(job["label_mean"]), label_std=float(job["label_std"])
    )


def replay(rows: list[dict], folder: str, prior_sds: list[float]) -> tuple[dict, list[str]]:
    """{rule: {table: error ratio}} over the tables of `rows` with predictions in
    `folder`, and those tables."""
    ratios: dict = collections.defaultdict(dict)
    for row in rows:
        files = sorted(glob.glob(os.path.join(folder, f"{row['dataset']}-*.npz")))
        if not files:
            continue
        metrics = collections.defaultdict(list)
        for path in files:
            job = dict(np.load(path))
            head = head_of(job)
            for rule, weight in rules(job, head, prior_sds).items():
                metrics[rule].append(test_metric(job, head, weight))
        for rule, runs in metrics.items():
            # Medians over seeds, scored as real_data scores a job's row.
            medians = {k: float(np.median([run[k] for run in runs])) for k in runs[0]}
            ratios[rule][row["dataset"]] = real_data.error_ratio({**row, **medians})
        ratios["CatBoost"][row["dataset"]] = row["catboost error ratio"]
    return ratios, [r["dataset"] for r in rows if r["dataset"] in ratios["CatBoost"]]


def main(argv):
    del argv
    for spec in FLAGS.set:
        name, _, paths = spec.partition(":")
        rows = [row for path in paths.split(",") for row in json.load(open(path))]
        ratios, tables = replay(rows, FLAGS.predictions, [float(sd) for sd in FLAGS.prior_sds])
        print_ratios(name, ratios, tables, {r["dataset"]: r["task"] for r in rows})


def print_ratios(name: str, ratios: dict, tables: list[str], task_of: dict[str, str]) -> None:
    """A set's error ratios as a markdown table: a row per table and rule's column, then
    the geometric means per task and the count of tables above 1.10."""
    names = list(ratios)
    print(f"\n## {name}\n\n| table | task | " + " | ".join(names) + " |")
    print("| --- | --- |" + " --- |" * len(names))
    for table in tables:
        cells = " | ".join(f"{ratios[r][table]:.3f}" for r in names)
        print(f"| {table} | {task_of[table]} | {cells} |")
    for task in ("all", "regression", "binary", "multiclass"):
        chosen = [t for t in tables if task in ("all", task_of[t])]
        if chosen:
            cells = " | ".join(
                f"**{real_data.geomean(ratios[r][t] for t in chosen):.4f}**" for r in names
            )
            print(f"| geometric mean, {task} ({len(chosen)}) | | {cells} |")
    above = " | ".join(str(sum(ratios[r][t] > 1.10 for t in tables)) for r in names)
    print(f"| above 1.10 | | {above} |")


if __name__ == "__main__":
    app.run(main)
