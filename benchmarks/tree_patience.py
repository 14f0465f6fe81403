"""The trees members' early-stopping patience, replayed on real default jobs (issue 28's
time target; docs/results/2026-12-07-time-floor.md).

LightGBM grows the same trees whatever the patience: it only decides when the loop
stops. So each member of each job is fitted once as the job fits it
(`trainer.train.forest.fit`'s data and parameters, PATIENCE rounds), its validation
curve recorded, and for each patience P this says which round early stopping would keep
and how many it would run. Where P keeps the round PATIENCE keeps, the job's model is
the same to the last bit. The fits are then timed at PATIENCE and at --timed.

    python -m benchmarks.real_data --tables=fresh|sixteen|held_out --variant=
    python -m benchmarks.tree_patience --jobs=.local/real-data/jobs
"""

from __future__ import annotations

import collections
import os
import time

import numpy as np
from absl import app, flags

from benchmarks import tree_members
from trainer.train import forest

FLAGS = flags.FLAGS
# --jobs: benchmarks.tree_members' flag.
flags.DEFINE_list("only", [], "Tables to replay; all with jobs under --jobs if empty.")
flags.DEFINE_list("patience", ["50", "100", "150", "200"], "Patiences replayed.")
flags.DEFINE_integer("timed", 100, "A patience whose fits are timed against PATIENCE's.")


def kept_round(curve: np.ndarray, patience: int, rounds: int) -> tuple[int, int]:
    """(the round kept, the rounds run) by LightGBM's early stopping with `patience` on
    the validation `curve` (lower is better, one value per round, strict improvements),
    within `rounds`."""
    best, best_at = np.inf, 0
    for i, value in enumerate(curve[:rounds]):
        if value < best:
            best, best_at = value, i
        elif i - best_at >= patience:
            return best_at + 1, i + 1
    return best_at + 1, min(len(curve), rounds)


def fit(plan, member: str, train: tuple, valid: tuple, patience: int) -> tuple:
    """(validation curve, the round kept, seconds) of `member` fitted by the job's own
    forest.fit, stopped with `patience`."""
    import lightgbm

    curves: dict = {}
    start = time.monotonic()
    text = forest.fit(
        plan, forest.lightgbm_params(plan, member), train, valid, patience=patience, curves=curves
    )
    seconds = time.monotonic() - start
    (curve,) = next(iter(curves.values())).values()  # one validation set, one metric
    return np.asarray(curve), lightgbm.Booster(model_str=text).current_iteration(), seconds


def replay_job(job_dir: str, patiences: list[int]) -> list[dict]:
    """One row per trees member of the job in `job_dir`."""
    plan = tree_members.job_plan(job_dir)
    data = tree_members.matrices(plan)
    train, valid = data["train"], data["validation"]
    rows = []
    for member in forest.MEMBERS:
        curve, kept, seconds = fit(plan, member, train, valid, forest.PATIENCE)
        _, _, timed = fit(plan, member, train, valid, FLAGS.timed)
        row = {"member": member, "kept": kept, "run": len(curve), "curve": curve}
        row |= {"seconds": seconds, "timed seconds": timed}
        for p in patiences:
            row[p] = kept_round(curve, p, forest.ROUNDS)
        rows.append(row)
    return rows


def main(argv):
    del argv
    job = forest.PATIENCE  # the job's patience, which every other is held to
    patiences = [int(p) for p in FLAGS.patience]
    tables = FLAGS.only or sorted({n.rsplit("-", 1)[0] for n in os.listdir(FLAGS.jobs) if "-" in n})
    moved = collections.Counter()
    rounds = collections.Counter()
    seconds = collections.Counter()
    print(
        f"| table | seed | member | kept at {job} | run at {job} | "
        + " | ".join(f"P={p}: kept / run" for p in patiences)
        + f" | s at {job} | s at {FLAGS.timed} |"
    )
    print("| --- |" + " --- |" * (6 + len(patiences)))
    for table in tables:
        for seed, job_dir in sorted(tree_members.job_dirs(FLAGS.jobs, table).items()):
            for row in replay_job(job_dir, patiences):
                # The replay's own check: its stopping agrees with LightGBM's at PATIENCE.
                assert kept_round(row["curve"], job, forest.ROUNDS)[0] == row["kept"]
                rounds[job] += row["run"]
                seconds[job] += row["seconds"]
                seconds[FLAGS.timed] += row["timed seconds"]
                cells = []
                for p in patiences:
                    kept, run = row[p]
                    moved[p] += kept != row["kept"]
                    rounds[p] += run
                    cells.append(f"{kept} / {run}" + (" (moved)" if kept != row["kept"] else ""))
                print(
                    f"| {table} | {seed} | {row['member']} | {row['kept']} | {row['run']} | "
                    + " | ".join(cells)
                    + f" | {row['seconds']:.2f} | {row['timed seconds']:.2f} |",
                    flush=True,
                )
    print("\n| patience | members whose kept round moves | rounds run (x the job's) |")
    print("| --- | --- | --- |")
    for p in patiences:
        print(f"| {p} | {moved[p]} | {rounds[p]:,} ({rounds[p] / rounds[job]:.2f}x) |")
    print(f"| {job} | 0 | {rounds[job]:,} (1.00x) |")
    print(
        f"\nfits' seconds, all members of all jobs: {seconds[job]:.1f} at {job}, "
        f"{seconds[FLAGS.timed]:.1f} at {FLAGS.timed} "
        f"({seconds[FLAGS.timed] / seconds[job]:.2f}x)"
    )


if __name__ == "__main__":
    app.run(main)
