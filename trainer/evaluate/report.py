"""model_dir/report.html: one self-contained page about a trained model (plots inline as
PNG data, no script, no font or file fetched), written with every export and rebuilt by

    python -m trainer.report MODEL_DIR [--fake_gcs_root=DIR]

from the files in model_dir: config.json, schema.json, metrics.json, history.json and,
when the job evaluated, evaluation.json, feature_importance.json and profile.json.
"""

from __future__ import annotations

import base64
import html
import io

import numpy as np

from trainer.base import contracts
from trainer.base import storage as storage_lib

NEEDED = (contracts.CONFIG_FILE, contracts.SCHEMA_FILE, contracts.METRICS_FILE)
OPTIONAL = (
    contracts.HISTORY_FILE,
    contracts.EVALUATION_FILE,
    contracts.IMPORTANCE_FILE,
    contracts.PROFILE_FILE,
)
_STYLE = """body{font:14px/1.4 sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;border-bottom:1px solid #ccc;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
img{max-width:100%;margin:4px}.row{display:flex;flex-wrap:wrap}"""


class ReportError(ValueError):
    """A folder that is not an export of trainer.task; the message names it."""


def read(storage: storage_lib.Storage, model_dir: str) -> dict:
    """The export's JSON files by name.

    Raises:
      ReportError: when one of NEEDED is missing.
    """
    missing = [n for n in NEEDED if not storage.exists(storage_lib.join(model_dir, n))]
    if missing:
        raise ReportError(f"{model_dir}: not an export of trainer.task (no {', '.join(missing)})")
    return {
        name: storage.read_json(storage_lib.join(model_dir, name))
        for name in NEEDED + OPTIONAL
        if storage.exists(storage_lib.join(model_dir, name))
    }


def write(storage: storage_lib.Storage, model_dir: str) -> str:
    """Writes model_dir/report.html (atomically); returns its URI."""
    uri = storage_lib.join(model_dir, contracts.REPORT_FILE)
    storage.write_bytes(uri, render(read(storage, model_dir)).encode())
    return uri


def render(files: dict) -> str:
    """The page, from the export's files."""
    import matplotlib

    matplotlib.use("Agg")  # no display; PNG only
    config, metrics = files[contracts.CONFIG_FILE], files[contracts.METRICS_FILE]
    task = config.get("task", "")
    parts = [
        f"<h1>{_e(task)} model, step {_exported_step(metrics) or '?'}</h1>",
        _section_run(files),
        _section_curves(files),
    ]
    evaluation = files.get(contracts.EVALUATION_FILE)
    if evaluation and task == "regression":
        parts.append(_section_regression(files.get(contracts.PROFILE_FILE) or {}))
    elif evaluation:
        parts.append(_section_classification(evaluation, task))
    if files.get(contracts.IMPORTANCE_FILE):
        parts.append(_section_importance(files[contracts.IMPORTANCE_FILE]))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>trainer report</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


def _section_run(files: dict) -> str:
    config, schema, metrics = (
        files[contracts.CONFIG_FILE],
        files[contracts.SCHEMA_FILE],
        files[contracts.METRICS_FILE],
    )
    missing = (files.get(contracts.PROFILE_FILE) or {}).get("missing", {})
    history = files.get(contracts.HISTORY_FILE) or {}
    seconds = history.get("training_seconds", history.get("seconds"))
    rows = [
        [
            f["name"],
            f["dtype"],
            f["kind"],
            f.get("size", 1),
            f"{100 * missing[f['name']]:.1f}%" if f["name"] in missing else "",
            len(f.get("vocabulary", [])) or "",
        ]
        for f in schema["features"]
    ]
    settings = [
        [k, v if not isinstance(v, list) else ",".join(map(str, v))]
        for k, v in sorted(config.items())
        if v not in (None, "", [])
    ]
    data = metrics.get("data") or {}
    selection = metrics.get("selection") or {}
    sources = "; ".join(
        f"{use} data {_e(where)}" for use, where in data.items() if use != "metrics"
    )
    return (
        "<h2>The run</h2>"
        f"<p>{sources or 'training data ' + _e(config.get('train_data'))}; label "
        f"{_e(schema['label']['name'])}"
        + (f"; trained for {seconds:.0f} s" if seconds else "")
        + "</p>"
        + (
            f"<p>exported: the model of step {selection['step']}, the best "
            f"{_e(selection['metric'])} on validation ({_num(selection['value'])}) of the "
            f"{metrics.get('step')} steps trained"
            + (", stopped early" if selection.get("stoppedEarly") else "")
            + "</p>"
            if selection.get("step") is not None
            else ""
        )
        + (f"<p>figures on {_e(data['metrics'])} data</p>" if data.get("metrics") else "")
        + _table(
            ["metric", "value"],
            [[k, _num(v)] for k, v in sorted(metrics.items()) if isinstance(v, (int, float))],
        )
        + _table(["feature", "dtype", "kind", "size", "missing (eval sample)", "vocabulary"], rows)
        + "<details><summary>settings</summary>"
        + _table(["setting", "value"], settings)
        + "</details>"
    )


def _section_curves(files: dict) -> str:
    history = files.get(contracts.HISTORY_FILE) or {}
    train, evals = history.get("train", []), history.get("eval", [])
    if not train and not evals:
        return ""
    step = _exported_step(files[contracts.METRICS_FILE])
    fig, ax = _figure()
    if train:
        ax.plot([e["step"] for e in train], [e["loss"] for e in train], label="training loss")
    if evals:
        ax.plot(
            [e["step"] for e in evals], [e["loss"] for e in evals], "o-", label="validation loss"
        )
    if step is not None:
        ax.axvline(step, color="grey", linestyle="--", label=f"exported: step {step}")
    ax.set(xlabel="step", ylabel="loss", title="Training and validation")
    ax.legend()
    return "<h2>Curves</h2>" + _png(fig)


def _section_classification(evaluation: dict, task: str) -> str:
    points = evaluation["metrics"]["confidenceMetrics"]
    figures = [
        *_roc_and_pr(evaluation),
        _calibration(evaluation.get("calibration", []), task),
        _confusion(evaluation["metrics"]["confusionMatrix"]),
    ]
    table = [
        [
            p["confidenceThreshold"],
            *(_num(p[k]) for k in ("precision", "recall", "falsePositiveRate", "f1Score")),
            *(
                p[f"{k}Count"]
                for k in ("truePositive", "falsePositive", "falseNegative", "trueNegative")
            ),
        ]
        for p in points
        if round(p["confidenceThreshold"] * 10, 6) % 1 == 0
    ]
    header = [
        "threshold",
        "precision",
        "recall",
        "false positive rate",
        "F1",
        "TP",
        "FP",
        "FN",
        "TN",
    ]
    return (
        "<h2>Evaluation</h2><div class='row'>"
        + "".join(_png(f) for f in figures)
        + "</div><h3>Thresholds</h3>"
        + _table(header, table)
    )


def _roc_and_pr(evaluation: dict) -> tuple:
    """The ROC curves (overall, and of up to ten classes) and the precision-recall curve."""
    m = evaluation["metrics"]
    points = m["confidenceMetrics"]
    fpr = [p["falsePositiveRate"] for p in points]
    recall = [p["recall"] for p in points]
    roc, ax = _figure()
    ax.plot(fpr, recall, label=f"all (auRoc {m.get('auRoc', float('nan')):.3f})")
    for s in evaluation.get("slices", [])[:10]:
        ax.plot(
            [p["falsePositiveRate"] for p in s["confidenceMetrics"]],
            [p["recall"] for p in s["confidenceMetrics"]],
            alpha=0.6,
            label=s["class"],
        )
    ax.plot([0, 1], [0, 1], ":", color="grey")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC")
    ax.legend(fontsize=8)
    pr, ax = _figure()
    ax.plot(recall, [p["precision"] for p in points])
    title = f"Precision-recall (auPrc {m['auPrc']:.3f})" if "auPrc" in m else "Precision-recall"
    ax.set(xlabel="recall", ylabel="precision", ylim=(0, 1.02), title=title)
    return roc, pr


def _calibration(bands: list, task: str):
    fig, ax = _figure()
    ax.plot([b["predicted"] for b in bands], [b["observed"] for b in bands], "o-")
    ax.plot([0, 1], [0, 1], ":", color="grey")
    ax.set(
        xlabel="predicted probability" + (" (top class)" if task == "multiclass" else ""),
        ylabel="observed frequency",
        title="Calibration",
        xlim=(0, 1),
        ylim=(0, 1),
    )
    return fig


def _confusion(matrix: dict):
    names = [s["displayName"] for s in matrix["annotationSpecs"]]
    rows = np.asarray(matrix["rows"], dtype=float)
    fig, ax = _figure(max(4, 0.5 * len(names) + 2))
    ax.imshow(rows, cmap="Blues")
    ax.set(
        xticks=range(len(names)),
        yticks=range(len(names)),
        xlabel="predicted",
        ylabel="true",
        title="Confusion matrix",
    )
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_yticklabels(names)
    if len(names) <= 12:
        for (i, j), v in np.ndenumerate(rows):
            color = "white" if v > rows.max() / 2 else "black"
            ax.text(j, i, f"{v:g}", ha="center", va="center", color=color)
    return fig


def _section_regression(data: dict) -> str:
    predicted, actual = np.asarray(data.get("predicted", [])), np.asarray(data.get("actual", []))
    if not len(predicted):
        return ""
    pa_fig, ax = _figure()
    ax.scatter(actual, predicted, s=6, alpha=0.5)
    lo, hi = float(min(actual.min(), predicted.min())), float(max(actual.max(), predicted.max()))
    ax.plot([lo, hi], [lo, hi], ":", color="grey")
    ax.set(xlabel="actual", ylabel="predicted", title="Predicted against actual")
    res, ax = _figure()
    ax.scatter(predicted, actual - predicted, s=6, alpha=0.5)
    ax.axhline(0, color="grey", linestyle=":")
    ax.set(xlabel="predicted", ylabel="actual - predicted", title="Residuals")
    deciles = np.quantile(predicted, np.linspace(0, 1, 11))
    which = np.clip(np.searchsorted(deciles, predicted, side="right") - 1, 0, 9)
    mae = [
        float(np.abs(actual - predicted)[which == d].mean()) if (which == d).any() else 0
        for d in range(10)
    ]
    dec, ax = _figure()
    ax.bar(range(1, 11), mae)
    ax.set(xlabel="decile of the prediction", ylabel="mean absolute error", title="Error by decile")
    return (
        f"<h2>Evaluation</h2><p>on a sample of {len(predicted):,} evaluation records</p>"
        "<div class='row'>" + _png(pa_fig) + _png(res) + _png(dec) + "</div>"
    )


def _section_importance(found: dict) -> str:
    rows = found["features"][:20][::-1]
    fig, ax = _figure(max(3, 0.3 * len(rows) + 1))
    ax.barh(
        [r["name"] for r in rows], [r["importance"] for r in rows], xerr=[r["std"] for r in rows]
    )
    ax.set(xlabel="loss increase when the feature is shuffled", title="Feature importance")
    return (
        f"<h2>Feature importance</h2><p>permutation importance on {found['records']:,} "
        f"records of {_e(found['data'])}, {found['repeats']} shuffles each</p>" + _png(fig)
    )


def _figure(height: float = 3.6):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, height), dpi=90)
    return fig, ax


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode()
    return f"<img alt='plot' src='data:image/png;base64,{data}'>"


def _exported_step(metrics: dict) -> int | None:
    """The step of the model exported: the selected one, else the last trained."""
    return (metrics.get("selection") or {}).get("step") or metrics.get("step")


def _table(header: list, rows: list) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _num(v) -> str:
    return f"{v:.5g}" if isinstance(v, float) else str(v)


def _e(v) -> str:
    return html.escape(str(v))
