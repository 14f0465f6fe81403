"""Per-prediction attributions: sampled Shapley values over the `predict` signature.

Each feature's contribution to one prediction is its average marginal effect when the
features are switched, in a random order, from a baseline instance to the instance's
own values. Within one order the contributions add up exactly to prediction(instance)
- prediction(baseline) (the sum telescopes), so their average over the orders does too;
the orders only decide how that difference is shared. For a model linear in its raw
inputs every order gives w_i * (x_i - baseline_i), the exact Shapley value.

The baseline is each feature's mean from the export's schema.json (numbers; rounded for
integers), its most frequent value (categories: the first of the vocabulary), or missing
(variable-length features): an export and its schema.json are all it needs.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer.base import contracts
from trainer.data import schema as schema_lib

ORDERS = 64  # random orders (and their reverses) per instance


class ExplainError(ValueError):
    """A model that cannot be explained this way; the message says why."""


def baseline(schema: dict, specs: dict) -> dict:
    """The baseline instance, from schema.json's features and the signature's specs."""
    out = {}
    for f in schema["features"]:
        size = specs[f["name"]].shape[1] if specs[f["name"]].shape.rank == 2 else None
        if f.get("varlen"):
            value = schema_lib.pad_value(f["kind"], f["dtype"])
        elif f["kind"] == "numeric":
            value = f["mean"] if f["dtype"] == "float" else int(round(f["mean"]))
        else:
            vocabulary = f.get("vocabulary") or [f.get("default")]
            value = vocabulary[0]
        out[f["name"]] = [value] * size if size else value
    return out


def target(outputs: dict, instance_outputs: dict | None = None) -> np.ndarray:
    """The figure explained: the prediction (regression), the positive class's
    probability (binary), or the probability of the class predicted for the instance."""
    if "probabilities" not in outputs:
        return outputs["predictions"].numpy().reshape(-1).astype(np.float64)
    p = outputs["probabilities"].numpy().astype(np.float64)
    if p.shape[1] == 2:
        return p[:, 1]
    chosen = int(np.argmax((instance_outputs or outputs)["probabilities"].numpy()[0]))
    return p[:, chosen]


def shapley(model, instance: dict, base: dict, orders: int = ORDERS, seed: int = 0) -> dict:
    """{feature: contribution} for one instance (JSON-like values per feature), with
    `prediction` and `baseline_prediction`; contributions sum to their difference."""
    if contracts.PREDICT not in model.signatures:
        raise ExplainError(
            "the model has no 'predict' signature (raw features); export it with trainer.task"
        )
    signature = model.signatures[contracts.PREDICT]
    specs = signature.structured_input_signature[1]
    names = sorted(specs)
    rng = np.random.default_rng(seed)
    half = [rng.permutation(len(names)) for _ in range((orders + 1) // 2)]
    perms = half + [p[::-1] for p in half]  # antithetic pairs: less variance per call
    # Row 0 is the baseline; then, per order, one row per feature switched so far.
    taken = np.zeros((1 + len(perms) * len(names), len(names)), bool)
    for k, perm in enumerate(perms):
        for j in range(len(names)):
            taken[1 + k * len(names) + j, perm[: j + 1]] = True
    columns = {}
    for i, name in enumerate(names):
        spec = specs[name]
        own = np.asarray(instance[name], dtype=object if spec.dtype == tf.string else None)
        other = np.asarray(base[name], dtype=own.dtype)
        rows = [own if t else other for t in taken[:, i]]
        columns[name] = tf.constant(np.stack(rows), dtype=spec.dtype)
    outputs = signature(**columns)
    own_outputs = signature(**{n: c[-1:] for n, c in columns.items()})  # all switched
    f = target(outputs, own_outputs)
    contributions = np.zeros(len(names))
    for k, perm in enumerate(perms):
        start = 1 + k * len(names)
        before = np.concatenate([[f[0]], f[start : start + len(names) - 1]])
        contributions[perm] += f[start : start + len(names)] - before
    contributions /= len(perms)
    return {
        "prediction": float(target(own_outputs)[0]),
        "baseline_prediction": float(f[0]),
        "contributions": dict(zip(names, contributions.tolist())),
    }
