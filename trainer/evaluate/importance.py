"""Global feature importance of a trained model: permutation importance on held-out data.

For each feature, its column is shuffled across a sample of the evaluation records and
the loss measured again; the importance is how much the loss grows (mean over a few
shuffles, with their spread). Chosen over gradients or integrated gradients because it
needs nothing of the model but its predictions (any --model_fn), measures what the
evaluation measures (the task's proper loss: log loss, or the squared error of the
standardised target), covers categorical features as they are, and a useless feature
comes out at ~0, not at whatever its gradient happens to be. Shuffles come from a fixed
seed per (feature, repeat): the same model and data give the same figures.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer.data import inputs
from trainer.data import schema as schema_lib
from trainer.model import heads

SAMPLE = 2_000  # evaluation records measured on; the cost is features x REPEATS passes
REPEATS = 3


def permutation_importance(
    model,
    head: heads.Head,
    schema: schema_lib.Schema,
    records: list[bytes],
    data: str,
    seed: int = 0,
) -> dict:
    """feature_importance.json: features sorted by importance (loss increase)."""
    features, labels, weights = inputs.parser(schema)(tf.constant(records))
    weights = tf.cast(weights, tf.float32)

    # One graph for every pass (features x REPEATS of them): run eagerly, a pass of a
    # model with many features costs its op dispatches, 255 passes 100 s on 85 features.
    @tf.function(autograph=False)  # plain ops: nothing for autograph to rewrite
    def loss(batch: dict) -> tf.Tensor:
        per_example = head.loss(labels, model(batch, training=False))
        return tf.reduce_sum(weights * per_example) / tf.reduce_sum(weights)

    base = float(loss(features))
    n = len(records)
    rows: list[dict] = []
    for i, f in enumerate(schema.features):
        increases = []
        for r in range(REPEATS):
            order = np.random.default_rng([seed, i, r]).permutation(n)
            shuffled = dict(features, **{f.name: tf.gather(features[f.name], order)})
            increases.append(float(loss(shuffled)) - base)
        rows.append(
            {
                "name": f.name,
                "importance": float(np.mean(increases)),
                "std": float(np.std(increases)),
            }
        )
    rows.sort(key=lambda row: (-row["importance"], row["name"]))
    return {
        "method": "permutation",
        "metric": "loss",
        "baseline_loss": base,
        "data": data,
        "records": n,
        "repeats": REPEATS,
        "seed": seed,
        "features": rows,
    }
