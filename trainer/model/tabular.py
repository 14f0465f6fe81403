"""The default tabular model, and how a user's own model builder is plugged in.

A model builder is any function `(schema, num_outputs, config) -> keras.Model` whose model
takes a dict of raw feature tensors (as `inputs.parse_features` yields them) and returns
`num_outputs` logits per example. Preprocessing (normalisation, vocabulary lookups) lives
inside the model, so the exported model serves raw features. `--model_fn=module:function`
selects a builder; `feature_inputs` and `preprocess` are the building blocks to reuse.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable

import keras
import numpy as np

from trainer.base import config as config_lib
from trainer.data import schema as schema_lib
from trainer.model import ensemble, precision

ModelFn = Callable[..., keras.Model]


class ModelFnError(ValueError):
    """A --model_fn that cannot be loaded or builds the wrong model; the message names it."""


# Categoricals with at most this many slots are one-hot encoded, larger ones embedded.
ONE_HOT_MAX = 16


def feature_inputs(schema: schema_lib.Schema) -> dict[str, keras.KerasTensor]:
    """One `keras.Input` per feature, shaped [batch, size] with the parsed dtype."""
    return {
        f.name: keras.Input(shape=(f.size,), dtype=f.parsed_dtype, name=layer_name(f.name))
        for f in schema.features
    }


def layer_name(feature: str) -> str:
    """A Keras name for a feature's layers: feature names may hold any character (e.g.
    'od280/od315' in scikit-learn's wine data), Keras names may not hold '/'."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", feature)


class VarLenSummary(keras.layers.Layer):
    """A variable-length numeric feature ([batch, size], NaN after its values) as four
    numbers: the mean, min and max of its standardised values (0 when it has none) and
    log(1 + how many values it has)."""

    def __init__(self, mean: float, std: float, **kwargs):
        super().__init__(**kwargs)
        self.mean, self.std = mean, std

    def call(self, x):
        present = keras.ops.logical_not(keras.ops.isnan(x))
        z = (keras.ops.where(present, x, self.mean) - self.mean) / self.std
        count = keras.ops.sum(keras.ops.cast(present, "float32"), axis=1, keepdims=True)
        any_value = count > 0
        big = 3.0e38
        mean = keras.ops.sum(
            keras.ops.where(present, z, 0.0), axis=1, keepdims=True
        ) / keras.ops.maximum(count, 1.0)
        low = keras.ops.min(keras.ops.where(present, z, big), axis=1, keepdims=True)
        high = keras.ops.max(keras.ops.where(present, z, -big), axis=1, keepdims=True)
        return keras.ops.concatenate(
            [
                mean,
                keras.ops.where(any_value, low, 0.0),
                keras.ops.where(any_value, high, 0.0),
                keras.ops.log1p(count),
            ],
            axis=1,
        )


class Missing(keras.layers.Layer):
    """A number NaN marks as missing ([batch, 1]) -> [the number, `fill` where missing;
    1.0 where missing, else 0.0]: the network sees where the value was missing, not
    just an ordinary value (`schema.Feature.missing`)."""

    def __init__(self, fill: float, **kwargs):
        super().__init__(**kwargs)
        self.fill = float(fill)

    def call(self, x):
        x = keras.ops.cast(x, "float32")
        absent = keras.ops.isnan(x)
        return [keras.ops.where(absent, self.fill, x), keras.ops.cast(absent, "float32")]

    def compute_output_shape(self, input_shape):
        return [input_shape, input_shape]

    def get_config(self):
        return {**super().get_config(), "fill": self.fill}


class BagMean(keras.layers.Layer):
    """The mean embedding of a bag of ids ([batch, size, dim]), leaving out `pad_id`;
    zeros for an empty bag."""

    def __init__(self, pad_id: int, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = pad_id

    def call(self, ids, embedded):
        keep = keras.ops.cast(keras.ops.not_equal(ids, self.pad_id), embedded.dtype)
        total = keras.ops.sum(embedded * keep[:, :, None], axis=1)
        return total / keras.ops.maximum(keras.ops.sum(keep, axis=1, keepdims=True), 1.0)


class RobustPLE(keras.layers.Layer):
    """A numeric feature ([batch, 1]) as its robustly scaled, smoothly clipped value and
    its piecewise-linear encoding (PLE) over the sample's quantile bins, or, given the
    sample's distinct `values` (a feature with few of them), over those.

    Robust scaling: (x - median) / IQR, then x / sqrt(1 + (x / 3)^2), which leaves small
    values alone and squashes outliers (RealMLP, Holzmueller et al. 2024). PLE: one
    number per bin between consecutive distinct edges, 0 below the bin, 1 above it,
    linear inside (Gorishniy et al. 2022), so a linear layer after it is any continuous
    piecewise-linear function of x with knots at the edges, whatever the feature's scale
    or tail; with the values as edges, any function of the values seen.
    """

    def __init__(self, quantiles, values=(), **kwargs):
        super().__init__(**kwargs)
        self.quantiles = [float(q) for q in quantiles]
        self.values = [float(v) for v in values]
        self.center, self.scale, self.lower, self.width = _ple_parameters(
            self.quantiles, self.values
        )

    def call(self, x):
        x = keras.ops.cast(x, "float32")
        z = (x - self.center) / self.scale
        z = z / keras.ops.sqrt(1.0 + keras.ops.square(z / 3.0))
        if not self.width:
            return z
        bins = keras.ops.clip(
            (x - keras.ops.convert_to_tensor(self.lower)) / keras.ops.convert_to_tensor(self.width),
            0.0,
            1.0,
        )
        return keras.ops.concatenate([z, bins], axis=1)

    def get_config(self):
        return {**super().get_config(), "quantiles": self.quantiles, "values": self.values}


def _ple_parameters(quantiles: list[float], values: list[float]):
    """RobustPLE's (center, scale, bins' lower edges, bins' widths)."""
    q, n = quantiles, len(quantiles) - 1
    scale = q[3 * n // 4] - q[n // 4] or (q[-1] - q[0]) / 2 or 1.0
    edges = sorted(set(values or q))
    lower = [float(e) for e in edges[:-1]]
    width = [float(b - a) for a, b in zip(edges[:-1], edges[1:])]
    return q[n // 2], scale, lower, width


class RobustPLEs(keras.layers.Layer):
    """`RobustPLE` of many features at once: a list of [batch, 1] inputs -> the list of
    their encodings, each what `RobustPLE(quantiles, values)` returns for it: the same
    float32 arithmetic, element by element (equal when run eagerly; in a graph,
    TensorFlow's rewrites may round either differently, by up to 2.4e-7 on deliveries).

    One set of ops for every feature instead of a dozen per feature: on a 29-number
    table (deliveries) the encodings were 348 of the default model's 612 ops per
    training step, and the job's traces took 4.5 s instead of 2.7 (docs/decisions.md).
    """

    def __init__(self, encodings, **kwargs):
        super().__init__(**kwargs)
        # (quantiles, values) per feature, in the order of the inputs.
        self.encodings = [([float(q) for q in qs], [float(v) for v in vs]) for qs, vs in encodings]
        params = [_ple_parameters(qs, vs) for qs, vs in self.encodings]
        self.centers = np.array([p[0] for p in params], np.float32)
        self.scales = np.array([p[1] for p in params], np.float32)
        # Bin b reads feature `source[b]`; `order` puts each feature's scaled value and
        # then its bins side by side, as RobustPLE concatenates them.
        self.source = np.array([i for i, p in enumerate(params) for _ in p[2]], np.int32)
        self.lower = np.array([e for p in params for e in p[2]], np.float32)
        self.width = np.array([w for p in params for w in p[3]], np.float32)
        order, first = [], len(params)  # the bins come after every scaled value
        for i, p in enumerate(params):
            order += [i, *range(first, first + len(p[2]))]
            first += len(p[2])
        self.order = np.array(order, np.int32)
        self.sizes = [1 + len(p[2]) for p in params]

    def compute_output_shape(self, input_shape):
        return [(input_shape[0][0], size) for size in self.sizes]

    def call(self, xs):
        x = keras.ops.concatenate([keras.ops.cast(v, "float32") for v in xs], axis=1)
        z = (x - self.centers) / self.scales
        z = z / keras.ops.sqrt(1.0 + keras.ops.square(z / 3.0))
        parts = [z]
        if len(self.lower):
            bins = keras.ops.take(x, self.source, axis=1)
            parts.append(keras.ops.clip((bins - self.lower) / self.width, 0.0, 1.0))
        encoded = keras.ops.take(keras.ops.concatenate(parts, axis=1), self.order, axis=1)
        if len(self.sizes) == 1:
            return [encoded]
        return keras.ops.split(encoded, np.cumsum(self.sizes)[:-1].tolist(), axis=1)

    def get_config(self):
        return {**super().get_config(), "encodings": self.encodings}


def lookup_layer(f: schema_lib.Feature) -> keras.layers.Layer:
    """A categorical feature's values -> slots: 0 for a value not in the vocabulary, 1 for
    the missing value (the feature's default), then the vocabulary's values in order."""
    vocabulary = [f.default_value()] + [v for v in f.vocabulary if v != f.default_value()]
    name = f"{layer_name(f.name)}_lookup"
    if f.dtype == "string":
        return keras.layers.StringLookup(vocabulary=vocabulary, name=name)
    # The OOV token must not be a vocabulary entry (Keras' default, -1, is our missing
    # value), or lookups silently shift.
    return keras.layers.IntegerLookup(
        vocabulary=vocabulary, oov_token=min(vocabulary) - 1, name=name
    )


def preprocess(
    inputs: dict, schema: schema_lib.Schema, numeric: str = "standard"
) -> keras.KerasTensor:
    """Turns raw features into one float vector per example (`encode`'s parts, one after
    the other)."""
    return _joined(encode(inputs, schema, numeric))


def _joined(parts: list[keras.KerasTensor]) -> keras.KerasTensor:
    return parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="features")(parts)


def encode(
    inputs: dict, schema: schema_lib.Schema, numeric: str = "standard"
) -> list[keras.KerasTensor]:
    """Turns raw features into float vectors, one [batch, width] per feature.

    Numeric features are standardised with the schema's mean and std (`numeric` =
    'standard'), or, with 'ple' and the schema's quantiles, encoded by `RobustPLE` (all
    of them in one `RobustPLEs`); categorical ones
    are looked up in their vocabulary (slot 0: unseen values, slot 1: missing) and
    one-hot encoded or embedded. Variable-length features: numbers are summarised
    (`VarLenSummary`), categoricals become a bag (multi-hot, or the mean embedding).
    A number NaN marks as missing (`Feature.missing`) is encoded as its mean there, and
    its 0/1 mark comes after every feature's encoding (`Missing`).
    """
    inputs, marks = dict(inputs), []
    for f in schema.features:
        if f.missing:
            inputs[f.name], mark = Missing(f.mean, name=f"{layer_name(f.name)}_missing")(
                inputs[f.name]
            )
            marks.append(mark)
    ple = [
        f
        for f in schema.features
        if numeric == "ple" and f.kind == "numeric" and not f.varlen and f.quantiles
    ]
    ple_parts = {}
    if ple:  # every PLE feature in one layer, handed out below in the schema's order
        layer = RobustPLEs([(f.quantiles, f.values) for f in ple], name="ple")
        ple_parts = dict(zip([f.name for f in ple], layer([inputs[f.name] for f in ple])))
    parts = []
    for f in schema.features:
        x, name = inputs[f.name], layer_name(f.name)
        if f.kind == "numeric" and f.varlen:
            parts.append(VarLenSummary(f.mean, f.std, name=f"{name}_summary")(x))
            continue
        if f.name in ple_parts:
            parts.append(ple_parts[f.name])
            continue
        if f.kind == "numeric":
            # Per-value lists, not scalars: Keras 3.4 (in Vertex's TF 2.17 images) fails
            # on scalar statistics.
            x = keras.layers.Normalization(
                mean=[f.mean] * f.size, variance=[f.std**2] * f.size, name=f"{name}_norm"
            )(keras.ops.cast(x, "float32"))
            parts.append(x)
            continue
        ids = lookup_layer(f)(x)
        slots = len(f.vocabulary) + 2 - (f.default_value() in f.vocabulary)
        if slots <= ONE_HOT_MAX:
            encoded = keras.layers.CategoryEncoding(
                num_tokens=slots,
                output_mode="one_hot" if f.size == 1 else "multi_hot",
                name=f"{name}_onehot",
            )(ids)
        else:
            dim = min(32, max(4, round(4 * math.sqrt(math.sqrt(slots)))))
            embedded = keras.layers.Embedding(slots, dim, name=f"{name}_embedding")(ids)
            # Padding looks up as the missing token, slot 1 (after the OOV slot 0).
            encoded = (
                BagMean(1, name=f"{name}_bag")(ids, embedded)
                if f.varlen
                else keras.layers.Flatten(name=f"{name}_flat")(embedded)
            )
        parts.append(encoded)
    return parts + marks


def tabular_model(schema: schema_lib.Schema, num_outputs: int, config) -> keras.Model:
    """The built-in builders: preprocessing, then ReLU layers (`config.hidden_units`,
    else HIDDEN_UNITS of `config.model`). 'mlp' standardises numbers; 'ple_mlp' encodes
    them with `RobustPLE` and is wider. With `config.ensemble_size` k > 1, the layers
    hold k members sharing their weights (trainer.model.ensemble) and the model returns
    [batch, k, num_outputs] logits."""
    inputs = feature_inputs(schema)
    parts = encode(inputs, schema, numeric="ple" if config.model == "ple_mlp" else "standard")
    x = _joined(parts)
    units = config.hidden_units or config_lib.HIDDEN_UNITS[config.model]
    hidden = precision.policy(config)  # the logits stay float32 whatever it is
    if (config.ensemble_size or 1) > 1:
        chunks = tuple(int(p.shape[-1]) for p in parts)
        logits = ensemble.members_body(
            x,
            chunks,
            units,
            config.ensemble_size,
            num_outputs,
            config.effective_seed(),
            hidden,
            config.ensemble_adapters,
        )
        return keras.Model(inputs=inputs, outputs=logits, name="tabular")
    for i, width in enumerate(units):
        x = keras.layers.Dense(width, activation="relu", name=f"hidden_{i}", dtype=hidden)(x)
    logits = keras.layers.Dense(num_outputs, name="logits", dtype="float32")(x)
    return keras.Model(inputs=inputs, outputs=logits, name="tabular")


def load_model_fn(spec: str | None) -> ModelFn:
    """Returns the builder named 'package.module:function', or the default one.

    Raises:
      ModelFnError: if the module or function cannot be found, naming `spec`.
    """
    if not spec:
        return tabular_model
    module_name, _, fn_name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), fn_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ModelFnError(
            f"--model_fn={spec!r}: cannot load it ({e}); expected 'package.module:function'"
        ) from None
    if not callable(fn):
        raise ModelFnError(f"--model_fn={spec!r} is not a function")
    return fn


def check_outputs(model: keras.Model, num_outputs: int, source: str) -> None:
    """Fails early, with the builder's name, when a model's outputs have the wrong shape:
    (batch, num_outputs) logits, or (batch, k, num_outputs) for an ensemble of k."""
    shape = tuple(model.outputs[0].shape) if getattr(model, "outputs", None) else None
    if shape is None or len(shape) not in (2, 3) or shape[-1] != num_outputs:
        raise ModelFnError(
            f"model from {source} returns shape {shape}; expected (batch, {num_outputs}) "
            f"logits, or (batch, k, {num_outputs}) for an ensemble of k members"
        )


def build(schema: schema_lib.Schema, num_outputs: int, config) -> keras.Model:
    """Builds the model with the configured builder. Call inside `strategy.scope()`."""
    fn = load_model_fn(config.model_fn)
    model = fn(schema, num_outputs, config)
    check_outputs(model, num_outputs, config.model_fn or "tabular_model")
    return model
