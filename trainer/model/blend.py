"""The neural model and the boosted trees as one Keras model: what is evaluated at the
end of a job and exported.

It takes the raw features, runs the neural model (k members or one) and the trees
members (trainer.model.trees) side by side, and returns the logits of their weighted mean
probability (`Head.combine`): one [batch, units] row, as any model's, so evaluation,
importance, the report and both serving signatures treat it like any other model.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from trainer.data import schema as schema_lib
from trainer.model import heads, tabular, trees


class Blend(keras.layers.Layer):
    """(neural logits [batch, (k,) units], [scores [batch, units] of each trees member])
    -> the logits of the mean probability (the mean number, for regression), `weights`
    for the neural model and then each trees member in order, divided by `temperature`
    (classes: < 1 sharpens, > 1 softens; the predicted class and the ranking stay)."""

    def __init__(
        self, head: heads.Head, weights: Sequence[float], temperature: float = 1.0, **kwargs
    ):
        super().__init__(**kwargs)
        self.head, self.member_weights = head, tuple(float(w) for w in weights)
        self.temperature = float(temperature)

    def call(self, neural, forests):
        neural = self.head.combine(neural)
        members = tf.stack([neural, *(tf.cast(f, neural.dtype) for f in forests)], axis=1)
        logits = self.head.combine(members, weights=self.member_weights)
        return logits if self.temperature == 1.0 else logits / self.temperature


def blended_model(
    neural: keras.Model,
    schema: schema_lib.Schema,
    head: heads.Head,
    forests: dict[str, tuple[trees.Arrays, object]],
    weights: Sequence[float],
    temperature: float = 1.0,
) -> keras.Model:
    """One model of `neural` and the trees members `forests` (name -> (arrays, the fitted
    Booster or None)), blended by `weights` (neural first), then divided by
    `temperature`. The neural model's variables stay its own (the blend adds none); a
    member with its Booster asks LightGBM's predict until exported (trees.Forest)."""
    inputs = tabular.feature_inputs(schema)
    columns = trees.Columns(schema, name="tree_columns")(inputs)
    scores = [
        trees.Forest(arrays, booster, name=name)(columns)
        for name, (arrays, booster) in forests.items()
    ]
    logits = Blend(head, weights, temperature, name="blend")(neural(inputs), scores)
    return keras.Model(inputs=inputs, outputs=logits, name="blended")
