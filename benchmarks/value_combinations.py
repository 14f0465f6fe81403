"""Would value-combination features pay? An experiment for issue 28's second item, run
before building them into the model (docs/results/2026-12-05-value-combinations.md).

    .venv/bin/python -m benchmarks.value_combinations --tables=sixteen
    .venv/bin/python -m benchmarks.value_combinations --tables=fresh --guard

For each table of benchmarks/real_data.py, on the first 10,000 training rows (what the
schema's sample would be):

1. **Choose combinations by the label.** Candidates: columns with 2-256 distinct values
   (categories, counts, price lists), the 12 whose own mean label predicts best out of
   fold. A pair is a combination when the mean label of each of its value pairs predicts
   held-out rows (squared error, 5 folds, one prior record) 1% better than either column
   alone and than an additive model of the two (per-value means, backfitted); it grows
   a column at a time while that holds, to 5 columns; at most 3 combinations.
2. **`--guard`: keep them only if LightGBM says so**, 5-fold on the same rows: its proper
   loss (log loss, or squared error) with the combinations' target encodings beside the
   columns must be lower than without.
3. **Add them as columns and run the default job** (`trainer.task` with --label and
   --task): each combination's mean label (one column per class), out of fold (5 folds)
   for training rows, from all training rows for test rows (`--test_encoding=fold_mean`:
   the mean of the five out-of-fold encodings). That is what a model-side implementation
   would compute; the job's networks and trees both see the columns.

Prints, per table, the combinations, the guard's two losses and the job's error ratio to
HistGradientBoosting on the original columns (real_data's ratio, medians over --seeds),
to be read beside the default's ratio on the same split.
"""

from __future__ import annotations

import functools
import itertools
import os

import numpy as np
from absl import app, flags

from benchmarks import real_data
from trainer.base import config as config_lib
from trainer.data import exact_values
from trainer.data import schema as schema_lib

FLAGS = flags.FLAGS
flags.DEFINE_bool("guard", False, "Keep the combinations only where LightGBM says so (2.).")
flags.DEFINE_bool("choose_only", False, "Print the combinations and the guard; run no job.")
flags.DEFINE_enum(
    "test_encoding",
    "all",
    ["all", "fold_mean"],
    "A test row's encoding: the mean label of all training rows of its combination, or "
    "the mean of the five out-of-fold encodings (as a training row sees one of them).",
)

# As the schema's choice of exact values counts: its folds, its prior (records of the
# overall mean each group's mean starts from), its sample and its most values.
FOLDS = exact_values.FOLDS
PRIOR = exact_values.PRIOR_RECORDS
SAMPLE = config_lib.Config.schema_sample_records
MAX_VALUES = schema_lib.EXACT_VALUES
CANDIDATES = 12
MAX_COMBINATIONS = 3
MAX_COLUMNS = 5
MARGIN = 0.01


def codes(column) -> np.ndarray:
    """A column's values as 0-based integer codes (missing values one code of their own)."""
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(np.int64) + 1
    values = np.nan_to_num(column.to_numpy(dtype=float), nan=-np.inf)
    return np.unique(values, return_inverse=True)[1].astype(np.int64)


def targets(labels, task: str) -> np.ndarray:
    """[n, units]: standardised labels for regression, one-hot classes otherwise."""
    if task == "regression":
        y = np.asarray(labels, float)
        return ((y - y.mean()) / (y.std() or 1.0))[:, None]
    index = np.unique(np.asarray(labels).astype(str), return_inverse=True)[1]
    return np.eye(index.max() + 1)[index]


def combined(columns: list[np.ndarray]) -> np.ndarray:
    """The codes of each distinct combination of the columns' codes (each < MAX_VALUES,
    so the key of up to MAX_COLUMNS of them is exact in int64)."""
    key = np.zeros(len(columns[0]), np.int64)
    for c in columns:
        key = key * MAX_VALUES + c
    return np.unique(key, return_inverse=True)[1]


def _means(groups: np.ndarray, values: np.ndarray, size: int, center) -> np.ndarray:
    """[size, units]: each group's mean of `values`, started from PRIOR records of `center`."""
    counts = np.bincount(groups, minlength=size)[:, None]
    sums = np.stack(
        [np.bincount(groups, weights=values[:, j], minlength=size) for j in range(values.shape[1])],
        1,
    )
    return (sums + PRIOR * center) / (counts + PRIOR)


def _fold_tables(groups: np.ndarray, t: np.ndarray, size: int):
    """Each row's fold, and per fold the group means of the other folds' rows."""
    fold = np.arange(len(groups)) % FOLDS
    others = [fold != k for k in range(FOLDS)]
    return fold, [_means(groups[o], t[o], size, t[o].mean(0)) for o in others]


def _gathered(groups: np.ndarray, fold: np.ndarray, tables: list[np.ndarray]) -> np.ndarray:
    """Each row's entry in its own fold's table."""
    out = np.zeros((len(groups), tables[0].shape[1]))
    for k, table in enumerate(tables):
        out[fold == k] = table[groups[fold == k]]
    return out


def out_of_fold(groups: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Each row's group mean label from the other folds' rows."""
    return _gathered(groups, *_fold_tables(groups, t, groups.max() + 1))


def _error(groups: np.ndarray, t: np.ndarray) -> float:
    return float(((out_of_fold(groups, t) - t) ** 2).sum(1).mean())


def _additive_error(columns: list[np.ndarray], t: np.ndarray, sweeps: int = 3) -> float:
    """Out-of-fold squared error of the sum of per-value means, backfitted."""
    fold, out = np.arange(len(t)) % FOLDS, np.zeros_like(t)
    for k in range(FOLDS):
        train, test = fold != k, fold == k
        mean = t[train].mean(0)
        residual = t[train] - mean
        tables = [np.zeros((c.max() + 1, t.shape[1])) for c in columns]
        for _ in range(sweeps):
            for i, c in enumerate(columns):
                residual = residual + tables[i][c[train]]
                tables[i] = _means(c[train], residual, c.max() + 1, 0.0)
                residual = residual - tables[i][c[train]]
        out[test] = mean + sum(tb[c[test]] for tb, c in zip(tables, columns))
    return float(((out - t) ** 2).sum(1).mean())


def choose(x, t: np.ndarray) -> list[list[str]]:
    """The combinations of columns of `x` (1. in the module's docstring)."""
    columns = {name: codes(x[name]) for name in x.columns}
    columns = {n: c for n, c in columns.items() if 2 <= c.max() + 1 <= MAX_VALUES}
    alone = {n: _error(c, t) for n, c in columns.items()}
    names = sorted(columns, key=alone.__getitem__)[:CANDIDATES]

    @functools.cache  # a subset is scored again as a pair, a best growth and a base
    def error(subset: tuple[str, ...]) -> float:
        return _error(combined([columns[n] for n in subset]), t)

    def pays(subset: tuple[str, ...], than: float) -> bool:
        value = error(subset)
        return value < than * (1 - MARGIN) and value < (1 - MARGIN) * _additive_error(
            [columns[n] for n in subset], t
        )

    chosen: list[tuple[str, ...]] = []
    for subset in sorted(itertools.combinations(names, 2), key=error):
        if len(chosen) == MAX_COMBINATIONS:
            break
        if not pays(subset, min(alone[n] for n in subset)):
            continue
        while len(subset) < MAX_COLUMNS:
            grown = [(*subset, n) for n in names if n not in subset]
            best = min(grown, key=error) if grown else None
            if best is None or not pays(best, error(subset)):
                break
            subset = best
        if not any(set(subset) <= set(c) for c in chosen):
            chosen.append(subset)
    return [list(c) for c in chosen]


def encodings(train, t: np.ndarray, test, chosen: list[list[str]], fold_mean: bool = False):
    """The combinations' mean labels: out of fold for `train`'s rows; for `test`'s, from
    all of them, or (`fold_mean`) the mean of the fold encodings. Returns two
    [rows, combinations x units] arrays."""
    import pandas as pd

    a, b = [], []
    for subset in chosen:
        both = pd.concat([train[subset], test[subset]]).reset_index(drop=True)
        groups = combined([codes(both[n]) for n in subset])
        inside, outside = groups[: len(train)], groups[len(train) :]
        fold, tables = _fold_tables(inside, t, groups.max() + 1)
        a.append(_gathered(inside, fold, tables))
        if fold_mean:
            b.append(np.mean([table[outside] for table in tables], axis=0))
        else:
            b.append(_means(inside, t, groups.max() + 1, t.mean(0))[outside])
    return np.concatenate(a, 1), np.concatenate(b, 1)


def guard(x, y, task: str, chosen: list[list[str]], fold_mean: bool) -> tuple[float, float]:
    """LightGBM's 5-fold proper loss on `x`, without and with the encodings (2.)."""
    import lightgbm
    from sklearn import metrics

    fold, losses = np.arange(len(y)) % FOLDS, np.zeros(2)
    for k in range(FOLDS):
        xt, xe = (x[m].reset_index(drop=True) for m in (fold != k, fold == k))
        yt, ye = (y[m].reset_index(drop=True) for m in (fold != k, fold == k))
        et, ee = encodings(xt, targets(yt, task), xe, chosen, fold_mean)
        with_t = xt.assign(**{f"combination_{j}": et[:, j] for j in range(et.shape[1])})
        with_e = xe.assign(**{f"combination_{j}": ee[:, j] for j in range(ee.shape[1])})
        for i, (a, b) in enumerate(((xt, xe), (with_t, with_e))):
            if task == "regression":
                model = lightgbm.LGBMRegressor(random_state=0, verbose=-1).fit(a, yt)
                losses[i] += metrics.mean_squared_error(ye, model.predict(b))
            else:
                model = lightgbm.LGBMClassifier(random_state=0, verbose=-1).fit(a, yt)
                losses[i] += metrics.log_loss(ye, model.predict_proba(b), labels=model.classes_)
    return float(losses[0] / FOLDS), float(losses[1] / FOLDS)


def main(argv):
    del argv
    fold_mean = FLAGS.test_encoding == "fold_mean"
    for name, (task, x, y) in real_data.tables(FLAGS.tables).items():
        if FLAGS.datasets and name not in FLAGS.datasets:
            continue
        train_rows, test_rows = real_data.split_rows(len(y))
        xt, yt = (f.iloc[train_rows].reset_index(drop=True) for f in (x, y))
        sample = slice(0, SAMPLE)
        chosen = choose(xt[sample], targets(yt[sample], task))
        line = f"{name}: combinations {chosen}"
        if chosen and FLAGS.guard:
            without, with_them = guard(xt[sample], yt[sample], task, chosen, fold_mean)
            line += f"; guard: LightGBM loss {without:.5g} without, {with_them:.5g} with"
            chosen = chosen if with_them < without else []
        if not chosen or FLAGS.choose_only:
            print(line + ("" if chosen else "; none kept"), flush=True)
            continue
        inside, outside = encodings(
            xt, targets(yt, task), x.iloc[test_rows].reset_index(drop=True), chosen, fold_mean
        )
        extended = x.copy()
        for j in range(inside.shape[1]):
            column = np.zeros(len(y))
            column[train_rows], column[test_rows] = inside[:, j], outside[:, j]
            extended[f"combination_{j}"] = column
        boost = real_data.library_metrics("hgb", task, x, y, train_rows, test_rows)
        train, test, _, _ = real_data.write_split(f"{name}-combinations", extended, y, task)
        runs = [
            real_data.trainer_metrics(name, task, train, test, "", seed) for seed in FLAGS.seeds
        ]
        ratio = real_data.scored(task, len(y), runs, boost)["error ratio"]
        seconds = np.median([r["job seconds"] for r in runs])
        print(f"{line}; error ratio {ratio:.3f}; job {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
