"""Task heads: how logits become a loss, metrics, and served predictions.

The model outputs logits; everything that depends on `--task` lives here (evaluation
metrics beside it, in `trainer.evaluate.metrics`), so the model builder (which users may replace)
only has to produce `head.units` logits per example.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from trainer.data import schema as schema_lib


@dataclasses.dataclass(frozen=True)
class Head:
    task: str
    classes: tuple = ()
    label_dtype: str = "float"
    # Regression: the head learns (label - label_mean) / label_std, and predicts in
    # the label's units.
    label_mean: float = 0.0
    label_std: float = 1.0

    @property
    def units(self) -> int:
        """Logits per example."""
        return len(self.classes) if self.task == "multiclass" else 1

    def loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """Per-example loss; the caller averages it over the global batch. Regression:
        the squared error of the standardised target (so in units of label_std**2)."""
        if self.task == "regression":
            return tf.square(logits[:, 0] - (labels - self.label_mean) / self.label_std)
        if self.task == "binary":
            return tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.float32), logits=logits[:, 0]
            )
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def predictions(self, logits: tf.Tensor) -> tf.Tensor:
        """Regression: the prediction in the label's units."""
        return logits[:, 0] * self.label_std + self.label_mean

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
            return {"predictions": self.predictions(logits)}
        probabilities = self.probabilities(logits)
        classes = tf.constant(self.classes, dtype=schema_lib.DTYPES[self.label_dtype])
        return {
            "predictions": tf.gather(classes, tf.argmax(probabilities, axis=1)),
            "probabilities": probabilities,
        }


def make_head(task: str, schema: schema_lib.Schema) -> Head:
    label = schema.label
    return Head(
        task=task,
        classes=label.classes,
        label_dtype=label.dtype,
        label_mean=label.mean,
        label_std=label.std,
    )
