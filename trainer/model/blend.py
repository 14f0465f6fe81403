"""The neural model and the boosted trees as one Keras model: what is evaluated at the
end of a job and exported.

It takes the raw features, runs the neural model (k members or one) and the trees
(trainer.model.trees) side by side, and returns the logits of their weighted mean
probability (`Head.combine`): one [batch, units] row, as any model's, so evaluation,
importance, the report and both serving signatures treat it like any other model.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from trainer.data import schema as schema_lib
from trainer.model import heads, tabular, trees


class Blend(keras.layers.Layer):
    """(neural logits [batch, (k,) units], tree scores [batch, units]) -> the logits of
    the mean probability, `neural_weight` for the neural model and the rest for the
    trees, divided by `temperature` (classes: < 1 sharpens, > 1 softens; the predicted
    class and the ranking stay)."""

    def __init__(self, head: heads.Head, neural_weight: float, temperature: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.head, self.neural_weight = head, float(neural_weight)
        self.temperature = float(temperature)

    def call(self, neural, forest):
        neural = self.head.combine(neural)
        members = tf.stack([neural, tf.cast(forest, neural.dtype)], axis=1)
        logits = self.head.combine(members, weights=(self.neural_weight, 1 - self.neural_weight))
        return logits if self.temperature == 1.0 else logits / self.temperature


def blended_model(
    neural: keras.Model,
    schema: schema_lib.Schema,
    head: heads.Head,
    arrays: trees.Arrays,
    neural_weight: float,
    temperature: float = 1.0,
    booster=None,
) -> keras.Model:
    """One model of `neural` and the trees of `arrays`, blended `neural_weight` : 1 - it
    (then divided by `temperature`). The neural model's variables stay its own (the blend
    adds none). With the fitted `booster`, the trees are LightGBM's predict until
    exported (trees.Forest)."""
    inputs = tabular.feature_inputs(schema)
    forest = trees.Forest(arrays, booster, name="trees")(
        trees.Columns(schema, name="tree_columns")(inputs)
    )
    logits = Blend(head, neural_weight, temperature, name="blend")(neural(inputs), forest)
    return keras.Model(inputs=inputs, outputs=logits, name="blended")
