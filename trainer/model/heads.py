"""Task heads: how logits become a loss, metrics, and served predictions.

The model outputs logits; everything that depends on `--task` lives here (evaluation
metrics beside it, in `trainer.evaluate.metrics`), so the model builder (which users may replace)
only has to produce `head.units` logits per example: [batch, units], or, for an ensemble
of k members trained together (trainer.model.ensemble), [batch, k, units]. Members are
trained on the mean of their own losses (`training_loss`); everything else sees their
combined prediction (`combine`): the mean of their probabilities, or of their numbers.
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

    def combine(self, logits: tf.Tensor, weights=None) -> tf.Tensor:
        """[batch, units] logits, given those or an ensemble's [batch, k, units]: the
        logits of the mean of the members' probabilities (regression: the mean of their
        outputs), each member counted `weights[i]` (default 1/k; they sum to 1).
        Log-space means, so confident members do not overflow."""
        if logits.shape.rank != 3:
            return logits
        k = tf.shape(logits)[1]
        if weights is None:
            weights = tf.fill([k], 1.0 / tf.cast(k, logits.dtype))
        weights = tf.cast(tf.convert_to_tensor(weights), logits.dtype)
        if self.task == "regression":
            return tf.reduce_sum(logits * weights[None, :, None], axis=1)
        log_weights = tf.math.log(weights)[None, :, None]  # log 0 = -inf: a member left out
        if self.task == "binary":
            # log p and log (1 - p) of the mean probability; their difference is its logit.
            positive = tf.reduce_logsumexp(tf.math.log_sigmoid(logits) + log_weights, axis=1)
            negative = tf.reduce_logsumexp(tf.math.log_sigmoid(-logits) + log_weights, axis=1)
            return positive - negative
        return tf.reduce_logsumexp(tf.nn.log_softmax(logits) + log_weights, axis=1)

    def training_loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """Per-example loss that training minimises: `loss`, or for an ensemble the mean
        of its members' own losses (each member learns on its own, TabM)."""
        if logits.shape.rank != 3:
            return self.loss(labels, logits)
        k = tf.shape(logits)[1]
        per_member = self._loss(
            tf.repeat(labels, k, axis=0), tf.reshape(logits, [-1, logits.shape[-1]])
        )
        return tf.reduce_mean(tf.reshape(per_member, [-1, k]), axis=1)

    def loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        """Per-example loss of the (combined) prediction; the caller averages it over the
        global batch. Regression: the squared error of the standardised target (so in
        units of label_std**2)."""
        return self._loss(labels, self.combine(logits))

    def _loss(self, labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
        if self.task == "regression":
            return tf.square(logits[:, 0] - (labels - self.label_mean) / self.label_std)
        if self.task == "binary":
            return tf.nn.sigmoid_cross_entropy_with_logits(
                labels=tf.cast(labels, tf.float32), logits=logits[:, 0]
            )
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def predictions(self, logits: tf.Tensor) -> tf.Tensor:
        """Regression: the prediction in the label's units."""
        logits = self.combine(logits)
        return logits[:, 0] * self.label_std + self.label_mean

    def probabilities(self, logits: tf.Tensor) -> tf.Tensor:
        logits = self.combine(logits)
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
