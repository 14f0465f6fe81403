"""The model: task heads (heads: logits to loss and predictions, an ensemble's members to
one prediction), the built-in models and the `--model_fn` contract (tabular), the
ensemble's layers (ensemble), boosted trees as TensorFlow ops (trees) and their blend
with a network (blend), bf16 mixed precision for the hidden layers (precision), and the
optimizers the step expects (optimizers).

A custom model builder reuses `feature_inputs` and `preprocess` from here:

    from trainer import model
    inputs = model.feature_inputs(schema); x = model.preprocess(inputs, schema)

Imports: trainer.base, trainer.data.
"""

from trainer.model.tabular import feature_inputs, preprocess, tabular_model

__all__ = ["feature_inputs", "preprocess", "tabular_model"]
