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

import itertools
import os

import numpy as np
from absl import app, flags

from benchmarks import real_data

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

FOLDS = 5
PRIOR = 1.0  # records of the overall mean each group's mean starts from
SAMPLE = 10_000  # the schema's sample (config.schema_sample_records)
MAX_VALUES = 256  # schema.EXACT_VALUES
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


def _means(groups: np.ndarray, t: np.ndarray, size: int) -> np.ndarray:
    counts = np.bincount(groups, minlength=size)[:, None]
    sums = np.stack(
        [np.bincount(groups, weights=t[:, j], minlength=size) for j in range(t.shape[1])], 1
    )
    return (sums + PRIOR * t.mean(0)) / (counts + PRIOR)


def out_of_fold(groups: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Each row's group mean label from the other folds' rows."""
    fold, out = np.arange(len(groups)) % FOLDS, np.zeros_like(t)
    for k in range(FOLDS):
        out[fold == k] = _means(groups[fold != k], t[fold != k], groups.max() + 1)[
            groups[fold == k]
        ]
    return out


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
                counts = np.bincount(c[train], minlength=c.max() + 1)[:, None]
                tables[i] = np.stack(
                    [
                        np.bincount(c[train], weights=residual[:, j], minlength=c.max() + 1)
                        for j in range(t.shape[1])
                    ],
                    1,
                ) / (counts + PRIOR)
                residual = residual - tables[i][c[train]]
        out[test] = mean + sum(tb[c[test]] for tb, c in zip(tables, columns))
    return float(((out - t) ** 2).sum(1).mean())


def choose(x, t: np.ndarray) -> list[list[str]]:
    """The combinations of columns of `x` (1. in the module's docstring)."""
    columns = {name: codes(x[name]) for name in x.columns}
    columns = {n: c for n, c in columns.items() if 2 <= c.max() + 1 <= MAX_VALUES}
    alone = {n: _error(c, t) for n, c in columns.items()}
    names = sorted(columns, key=alone.__getitem__)[:CANDIDATES]

    def error(subset: list[str]) -> float:
        return _error(combined([columns[n] for n in subset]), t)

    def pays(subset: list[str], than: float) -> bool:
        value = error(subset)
        return value < than * (1 - MARGIN) and value < (1 - MARGIN) * _additive_error(
            [columns[n] for n in subset], t
        )

    chosen: list[list[str]] = []
    for pair in sorted(itertools.combinations(names, 2), key=lambda p: error(list(p))):
        if len(chosen) == MAX_COMBINATIONS:
            break
        subset = list(pair)
        if not pays(subset, min(alone[n] for n in subset)):
            continue
        while len(subset) < MAX_COLUMNS:
            grown = [subset + [n] for n in names if n not in subset]
            best = min(grown, key=error) if grown else None
            if best is None or not pays(best, error(subset)):
                break
            subset = best
        if not any(set(subset) <= set(c) for c in chosen):
            chosen.append(subset)
    return chosen


def encodings(train, t: np.ndarray, test, chosen: list[list[str]]):
    """The combinations' mean labels: out of fold for `train`'s rows, from all of them for
    `test`'s. Returns two [rows, combinations x units] arrays."""
    import pandas as pd

    a, b = [], []
    for subset in chosen:
        both = pd.concat([train[subset], test[subset]]).reset_index(drop=True)
        groups = combined([codes(both[n]) for n in subset])
        inside, outside = groups[: len(train)], groups[len(train) :]
        a.append(out_of_fold(inside, t))
        if FLAGS.test_encoding == "fold_mean":
            fold = np.arange(len(inside)) % FOLDS
            b.append(
                np.mean(
                    [
                        _means(inside[fold != k], t[fold != k], groups.max() + 1)[outside]
                        for k in range(FOLDS)
                    ],
                    axis=0,
                )
            )
        else:
            b.append(_means(inside, t, groups.max() + 1)[outside])
    return np.concatenate(a, 1), np.concatenate(b, 1)


def guard(x, y, task: str, chosen: list[list[str]]) -> tuple[float, float]:
    """LightGBM's 5-fold proper loss on `x`, without and with the encodings (2.)."""
    import lightgbm
    from sklearn import metrics

    fold, losses = np.arange(len(y)) % FOLDS, np.zeros(2)
    for k in range(FOLDS):
        xt, xe = (x[m].reset_index(drop=True) for m in (fold != k, fold == k))
        yt, ye = (y[m].reset_index(drop=True) for m in (fold != k, fold == k))
        et, ee = encodings(xt, targets(yt, task), xe, chosen)
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
    sets = {"sixteen": real_data.datasets, "held_out": real_data.held_out, "fresh": real_data.fresh}
    for name, (task, x, y) in real_data._typed(sets[FLAGS.tables]()).items():
        if FLAGS.datasets and name not in FLAGS.datasets:
            continue
        order = np.random.default_rng(0).permutation(len(y))  # real_data.write_split's
        train_rows, test_rows = order[: int(0.8 * len(y))], order[int(0.8 * len(y)) :]
        xt, yt = (f.iloc[train_rows].reset_index(drop=True) for f in (x, y))
        sample = slice(0, SAMPLE)
        chosen = choose(xt[sample], targets(yt[sample], task))
        line = f"{name}: combinations {chosen}"
        if chosen and FLAGS.guard:
            without, with_them = guard(xt[sample], yt[sample], task, chosen)
            line += f"; guard: LightGBM loss {without:.5g} without, {with_them:.5g} with"
            chosen = chosen if with_them < without else []
        if not chosen or FLAGS.choose_only:
            print(line + ("" if chosen else "; none kept"), flush=True)
            continue
        inside, outside = encodings(
            xt, targets(yt, task), x.iloc[test_rows].reset_index(drop=True), chosen
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
        row = {"task": task, "rows": len(y)}
        for key in real_data.KEYS[task]:
            row[key] = float(np.median([r[key] for r in runs]))
            row[f"boosting {key}"] = boost[key]
        seconds = np.median([r["job seconds"] for r in runs])
        print(
            f"{line}; error ratio {real_data.error_ratio(row):.3f}; job {seconds:.0f} s", flush=True
        )


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)
