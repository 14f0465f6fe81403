"""How the evaluation's AUC histograms read real jobs' test predictions, beside the exact AUC.

    python -m benchmarks.real_data --tables=sixteen --variant= \\
        --blend_predictions=.local/blend --output=.local/sixteen.json   # (held_out, fresh)
    python -m benchmarks.auc_bins --predictions=.local/blend

For each classifier job kept by `--blend_predictions`, its test predictions (the blend at
the job's own weight, before the temperature, which moves no rank but does move a record
between log-odds bins) go through `trainer.evaluate.metrics.batch_sums` and `finish` as a
job's evaluation does, once per number of log-odds bins, and the probability histogram's
AUC (1,000 bins, the jobs' AUC until 2026-12-06) is read from the same sums. Prints each
one's AUC minus the exact one (scikit-learn; macro one-vs-rest for multiclass) and, per
scheme, the largest miss, alone and as a share of the table's error 1 - AUC.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import tensorflow as tf
from absl import app, flags
from sklearn.metrics import roc_auc_score

from benchmarks import blend_rules
from trainer.evaluate import metrics
from trainer.train import weighing

FLAGS = flags.FLAGS
# --predictions (the folder of NAME-SEED.npz files) is blend_rules' flag, imported above.
flags.DEFINE_list("score_bins", ["2048", "4096", "8192", "16384"], "Log-odds bins to try.")


def readings(job: dict, score_bins: list[int]) -> dict[str, float]:
    """{scheme: AUC} for one job's test predictions, 'exact' among them."""
    head = blend_rules.head_of(job)
    logits = weighing.blended(head, job["test_neural"], job["test_trees"], float(job["weight"]))
    labels = job["test_labels"].astype(np.int32)
    probabilities = head.probabilities(tf.constant(logits)).numpy()
    out = {
        "exact": float(
            roc_auc_score(labels, probabilities[:, 1])
            if head.task == "binary"
            else roc_auc_score(labels, probabilities, multi_class="ovr", average="macro")
        )
    }
    # What the jobs read until 2026-12-06: the probability histogram, in the same sums.
    sums = metrics.batch_sums(head, tf.constant(labels), tf.constant(logits))
    classes = len(probabilities[0]) if head.task == "multiclass" else 1
    positives = sums["positives"].numpy().reshape(classes, metrics.BINS)
    negatives = sums["negatives"].numpy().reshape(classes, metrics.BINS)
    aucs = [metrics.roc_auc(p, q) for p, q in zip(positives, negatives)]
    out["probability 1000"] = float(np.mean([a for a in aucs if a is not None]))
    kept = metrics.SCORE_BINS
    try:
        for bins in score_bins:
            metrics.SCORE_BINS = bins  # read by batch_sums and finish at each call
            sums = metrics.batch_sums(head, tf.constant(labels), tf.constant(logits))
            read = metrics.finish(head, {k: v.numpy() for k, v in sums.items()})
            out[f"log-odds {bins}"] = read["auRoc"]
    finally:
        metrics.SCORE_BINS = kept
    return out


def main(argv):
    del argv
    score_bins = [int(b) for b in FLAGS.score_bins]
    schemes = ["probability 1000"] + [f"log-odds {b}" for b in score_bins]
    print("| job | task | records | exact AUC | " + " | ".join(schemes) + " |")
    print("| --- | --- | --- | --- |" + " --- |" * len(schemes))
    worst, share = dict.fromkeys(schemes, 0.0), dict.fromkeys(schemes, 0.0)
    for path in sorted(glob.glob(os.path.join(FLAGS.predictions, "*.npz"))):
        job = dict(np.load(path))
        if str(job["task"]) == "regression":
            continue
        try:
            read = readings(job, score_bins)
        except ValueError as e:  # a class absent from the test records
            print(f"| {os.path.basename(path)} | skipped: {e} |")
            continue
        exact = read["exact"]
        for s in schemes:
            worst[s] = max(worst[s], abs(read[s] - exact))
            share[s] = max(share[s], abs(read[s] - exact) / max(1 - exact, 1e-9))
        cells = " | ".join(f"{read[s] - exact:+.5f}" for s in schemes)
        name = os.path.basename(path).removesuffix(".npz")
        print(f"| {name} | {job['task']} | {len(job['test_labels'])} | {exact:.5f} | {cells} |")
    print(f"| largest miss | | | | {' | '.join(f'{worst[s]:.5f}' for s in schemes)} |")
    cells = " | ".join(f"{100 * share[s]:.2f}%" for s in schemes)
    print(f"| largest miss, share of 1 - AUC | | | | {cells} |")


if __name__ == "__main__":
    app.run(main)
