"""What the report shows of the evaluation data beyond the metrics, from the chief's
sample of it: each feature's missing-value rate, and for regression the predicted and
true values (predicted against actual, residuals, error by decile)."""

from __future__ import annotations

import tensorflow as tf

from trainer.data import inputs
from trainer.data import schema as schema_lib
from trainer.model import heads


def profile(
    model, head: heads.Head, schema: schema_lib.Schema, records: list[bytes], data: str
) -> dict:
    """profile.json for a sample of serialized evaluation records."""
    n = len(records)
    present = dict.fromkeys([f.name for f in schema.features], 0)
    for record in records:
        feature = tf.train.Example.FromString(record).features.feature
        for name in present:
            if name in feature:
                f = feature[name]
                kind = f.WhichOneof("kind")
                values = getattr(f, kind).value if kind else []
                if len(values) and not (kind == "bytes_list" and list(values) == [b""]):
                    present[name] += 1
    out = {
        "data": data,
        "records": n,
        "missing": {name: (1 - count / n) if n else 0.0 for name, count in present.items()},
    }
    if head.task == "regression" and n:
        features, labels, _ = inputs.parser(schema)(tf.constant(records))
        predicted = head.predictions(model(features, training=False))
        out["predicted"] = [float(v) for v in tf.reshape(predicted, [-1]).numpy()]
        out["actual"] = [float(v) for v in tf.reshape(labels, [-1]).numpy()]
    return out
