"""Task heads: how logits become a loss, metrics, and served predictions.

The model outputs logits; everything that depends on `--task` lives here, so the model
builder (which users may replace) only has to produce `head.units` logits per example.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from trainer import schema as schema_lib


@dataclasses.dataclass(frozen=True)
class Head:
    task: str
    classes: tuple = ()
    label_dtype: str = "float"

    @property
    def units(self) -> int:
        """Logits per example."""
        return len(self.classes) if self.task == "multiclass" else 1

    @property
    def sum_names(self) -> tuple[str, ...]:
        """The keys of `metric_sums`."""
        return ("loss", "count", "abs_error" if self.task == "regression" else "correct")

    def loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """Per-example loss; the caller averages it over the global batch."""
        if self.task == "regression":
            return tf.square(logits[:, 0] - labels)
        if self.task == "binary":
            return tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.float32), logits=logits[:, 0])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def probabilities(self, logits: tf.Tensor) -> tf.Tensor:
        if self.task == "binary":
            p = tf.sigmoid(logits[:, 0])
            return tf.stack([1.0 - p, p], axis=1)
        return tf.nn.softmax(logits)

    def outputs(self, logits: tf.Tensor) -> dict[str, tf.Tensor]:
        """What the served model returns: `predictions`, and `probabilities` for classifiers.

        Classifiers predict the class as it appears in the data (int or string).
        """
        if self.task == "regression":
            return {"predictions": logits[:, 0]}
        probabilities = self.probabilities(logits)
        classes = tf.constant(self.classes, dtype=schema_lib.DTYPES[self.label_dtype])
        return {"predictions": tf.gather(classes, tf.argmax(probabilities, axis=1)),
                "probabilities": probabilities}

    def metric_sums(self, labels: tf.Tensor, logits: tf.Tensor) -> dict[str, tf.Tensor]:
        """Per-batch sums; summed over replicas and batches, `metrics()` finishes them.

        Sums (rather than means) add up exactly across replicas and uneven last batches.
        """
        sums = {"loss": tf.reduce_sum(self.loss(labels, logits)),
                "count": tf.cast(tf.shape(logits)[0], tf.float32)}
        if self.task == "regression":
            error = logits[:, 0] - labels
            sums["abs_error"] = tf.reduce_sum(tf.abs(error))
        else:
            predicted = tf.argmax(self.probabilities(logits), axis=1, output_type=tf.int32)
            sums["correct"] = tf.reduce_sum(
                tf.cast(tf.equal(predicted, tf.cast(labels, tf.int32)), tf.float32))
        return sums

    def metrics(self, sums: dict[str, float]) -> dict[str, float]:
        n = max(sums["count"], 1.0)
        result = {"loss": sums["loss"] / n, "examples": sums["count"]}
        if self.task == "regression":
            result["mae"] = sums["abs_error"] / n
            result["rmse"] = math.sqrt(sums["loss"] / n)
        else:
            result["accuracy"] = sums["correct"] / n
        return result


def make_head(task: str, schema: schema_lib.Schema) -> Head:
    return Head(task=task, classes=schema.label.classes, label_dtype=schema.label.dtype)
