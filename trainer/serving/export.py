"""Exports a trained model as a SavedModel that TF Serving and Vertex AI load as is.

Two signatures, both returning `predictions` (and `probabilities` for classifiers):
  * `serving_default(examples)`: a 1-D string tensor of serialized `tf.train.Example`,
    parsed with the training schema, so serving cannot drift from training;
  * `predict(**features)`: raw named feature tensors, the shape of the `instances` of a
    Vertex online prediction request (scalar features as [batch], others [batch, size]).
The SavedModel needs only TensorFlow to load: no import of this package.
"""

from __future__ import annotations

import inspect

import keras
import tensorflow as tf

from trainer.base import contracts
from trainer.data import inputs
from trainer.data import schema as schema_lib
from trainer.model import heads, trees


def feature_signature(schema: schema_lib.Schema) -> dict[str, tf.TensorSpec]:
    """Input specs of the `predict` signature: [batch] for scalars, else [batch, size];
    a variable-length feature padded to its size with `Feature.pad_value` (JSON
    instances cannot be ragged)."""
    return {
        f.name: tf.TensorSpec(
            [None] if f.size == 1 and not f.varlen else [None, f.size], f.parsed_dtype, name=f.name
        )
        for f in schema.features
    }


def write_saved_model(
    model: keras.Model, schema: schema_lib.Schema, head: heads.Head, path: str
) -> None:
    """Writes the SavedModel to `path` (a path TensorFlow can open).

    Under a multi-worker strategy every worker must call this (reading variables may
    involve collectives); only the chief's `path` should be the real destination.
    """

    # The model is traced once, on [batch, size] features; both endpoints call that one
    # function, so the SavedModel holds its graph once, not once per signature.
    @tf.function(
        input_signature=[
            {f.name: tf.TensorSpec([None, f.size], f.parsed_dtype) for f in schema.features}
        ],
        autograph=False,
    )
    def serve(features):
        return head.outputs(model(features, training=False))

    def serve_examples(examples):
        return serve(inputs.parse_features(examples, schema))

    def serve_features(features):
        # Scalar features arrive as [batch]; the model takes [batch, size].
        return serve({f.name: tf.reshape(features[f.name], [-1, f.size]) for f in schema.features})

    # The trees are traced as plain ops (trees.portable): the SavedModel serves without XLA.
    with trees.portable(model):
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.add_endpoint(
            contracts.SERVING_DEFAULT,
            serve_examples,
            input_signature=[tf.TensorSpec([None], tf.string, name="examples")],
        )
        archive.add_endpoint(
            contracts.PREDICT, serve_features, input_signature=[feature_signature(schema)]
        )
        # Newer Keras prints every captured tensor unless told not to; Keras 3.4 (Vertex's
        # TF 2.17 images) has no such argument and prints nothing.
        takes_verbose = "verbose" in inspect.signature(archive.write_out).parameters
        archive.write_out(path, **({"verbose": False} if takes_verbose else {}))
