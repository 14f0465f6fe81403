"""Gradient-boosted trees as TensorFlow ops: a LightGBM model evaluated inside the
SavedModel, so serving stays TensorFlow alone (no LightGBM, no custom op).

`Columns` turns the raw features into the matrix the trees were fitted on: each numeric
value as it is (a missing one as MISSING, below every value), each categorical value as
its slot in the feature's vocabulary (the very lookup the neural model uses: 0 unseen,
1 missing). The same layer makes the training matrix (trainer.train.forest) and the
served one, so the two cannot disagree.

`Forest`, as exported, evaluates every tree at once: a [batch, trees] array of node
indices walks down one level per step, `depth` steps in all, each step a few gathers; a
leaf points to itself (inside the job, which has LightGBM, it asks LightGBM instead).
Thresholds are compared in float64, as LightGBM does, so scores agree with
`Booster.predict(raw_score=True)` to rounding (tests/test_trees.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator

import keras
import numpy as np
import tensorflow as tf

from trainer.data import schema as schema_lib
from trainer.model import tabular

# Threads of LightGBM's predict, as of its fit; a record's score does not depend on them.
PREDICT_THREADS = 2
# A missing number, as the trees see it: below every value short of float32's extremes
# (CatBoost's nan_mode=Min), not NaN with a direction LightGBM learns per split. On the 8
# benchmark tables with missing numbers both sets' errors went down (0.9648 / 0.9237
# against 0.9658 / 0.9287; docs/decisions.md, "Missing numbers").
MISSING = -1e30


def tree_features(schema: schema_lib.Schema) -> list[schema_lib.Feature]:
    """The features trees see: every fixed-size one (variable-length lists are left to
    the neural model)."""
    return [f for f in schema.features if not f.varlen]


def column_names(schema: schema_lib.Schema) -> list[str]:
    """One name per column of the matrix: the feature's, with [i] for its i-th value."""
    return [
        f.name if f.size == 1 else f"{f.name}[{i}]"
        for f in tree_features(schema)
        for i in range(f.size)
    ]


def categorical_columns(schema: schema_lib.Schema) -> list[int]:
    """Indices of the columns that hold vocabulary slots."""
    out: list[int] = []
    i = 0
    for f in tree_features(schema):
        if f.kind == "categorical":
            out.extend(range(i, i + f.size))
        i += f.size
    return out


class Columns(keras.layers.Layer):
    """Raw features -> [batch, columns] float64: numbers as they are, categories as
    their vocabulary slot (trainer.model.tabular's lookup)."""

    def __init__(self, schema: schema_lib.Schema, **kwargs):
        super().__init__(**kwargs)
        self.schema = schema
        # One attribute each: Keras 3.4 (TF 2.17) exports the lookups' tables only when
        # TensorFlow's tracking sees the layers, which it does not inside a list or dict.
        self.lookups = []
        for i, f in enumerate(f for f in tree_features(schema) if f.kind == "categorical"):
            setattr(self, f"lookup_{i}", tabular.lookup_layer(f))
            self.lookups.append(f"lookup_{i}")

    def compute_output_shape(self, input_shape):
        return (None, len(column_names(self.schema)))

    def call(self, features: dict):
        parts, lookups = [], iter(self.lookups)
        for f in tree_features(self.schema):
            x = features[f.name]
            if f.kind == "categorical":
                x = tf.cast(getattr(self, next(lookups))(x), tf.float64)
            else:
                x = tf.cast(x, tf.float64)
                x = tf.where(tf.math.is_nan(x), tf.constant(MISSING, tf.float64), x)
            parts.append(x)
        return tf.concat(parts, axis=1)


@dataclasses.dataclass(frozen=True)
class Arrays:
    """A LightGBM model as padded arrays: for tree t and internal node n, the column
    compared, the threshold (or the row of `categories` for a categorical split), where
    missing values go, the children (>= 0 an internal node, < 0 leaf -child - 1), and
    each leaf's value. Tree t adds to output t % outputs."""

    column: np.ndarray  # [trees, nodes] int32
    threshold: np.ndarray  # [trees, nodes] float64
    categorical: np.ndarray  # [trees, nodes] bool
    category_set: np.ndarray  # [trees, nodes] int32, row of `categories`
    # [trees, nodes] int32: LightGBM's missing type (tree.h, bits 2-3 of decision_type):
    # 0 None (NaN counts as 0), 1 Zero (0 and NaN are missing), 2 NaN.
    missing: np.ndarray
    default_left: np.ndarray  # [trees, nodes] bool
    left: np.ndarray  # [trees, nodes] int32
    right: np.ndarray  # [trees, nodes] int32
    leaf_value: np.ndarray  # [trees, leaves] float64
    root: np.ndarray  # [trees] int32: 0, or -1 for a tree that is one leaf
    categories: np.ndarray  # [sets, slots] bool: slot goes left
    outputs: int
    depth: int


def from_lightgbm(model: str) -> Arrays:
    """Arrays from LightGBM's model text (`Booster.model_to_string()`), read directly:
    6.2x faster than through `Booster.dump_model()`'s JSON, the same arrays
    (docs/decisions.md)."""
    header, *blocks = model.split("end of trees", 1)[0].split("\nTree=")
    fields = [_fields(block) for block in blocks]
    outputs = int(_fields(header)["num_tree_per_iteration"])
    counts = [int(f["num_leaves"]) for f in fields]
    nodes, leaves = max([1, *(n - 1 for n in counts)]), max([1, *counts])
    shape = (len(fields), nodes)
    a: dict[str, np.ndarray] = {
        "column": np.zeros(shape, np.int32),
        "threshold": np.zeros(shape, np.float64),
        "categorical": np.zeros(shape, bool),
        "category_set": np.zeros(shape, np.int32),
        "missing": np.zeros(shape, np.int32),
        "default_left": np.zeros(shape, bool),
        "left": np.full(shape, -1, np.int32),
        "right": np.full(shape, -1, np.int32),
        "leaf_value": np.zeros((len(fields), leaves), np.float64),
        "root": np.where(np.array(counts, np.int32) > 1, 0, -1).astype(np.int32),
    }
    sets: list[list[int]] = []
    for t, (f, n) in enumerate(zip(fields, counts)):
        a["leaf_value"][t, :n] = _numbers(f["leaf_value"], np.float64)
        if n == 1:  # one leaf: no split arrays to read
            continue
        kind = _numbers(f["decision_type"], np.int32)  # LightGBM's tree.h bits
        threshold = _numbers(f["threshold"], np.float64)
        categorical = (kind & 1) != 0
        a["column"][t, : n - 1] = _numbers(f["split_feature"], np.int32)
        a["left"][t, : n - 1] = _numbers(f["left_child"], np.int32)
        a["right"][t, : n - 1] = _numbers(f["right_child"], np.int32)
        a["default_left"][t, : n - 1] = (kind & 2) != 0
        a["missing"][t, : n - 1] = (kind >> 2) & 3
        a["categorical"][t, : n - 1] = categorical
        a["threshold"][t, : n - 1] = np.where(categorical, 0.0, threshold)
        if categorical.any():
            bounds = _numbers(f["cat_boundaries"], np.int64)
            words = _numbers(f["cat_threshold"], np.uint32)
            for i in np.flatnonzero(categorical):
                k = int(threshold[i])  # a categorical split's threshold: its bitset's index
                bits = np.unpackbits(
                    words[bounds[k] : bounds[k + 1]].astype("<u4").view(np.uint8), bitorder="little"
                )
                a["category_set"][t, i] = len(sets)
                sets.append(np.flatnonzero(bits).tolist())
    slots = max([max(s) + 1 for s in sets], default=1)
    categories = np.zeros((max(len(sets), 1), slots), bool)
    for j, s in enumerate(sets):
        categories[j, s] = True
    depth = _depth(a["root"], a["left"], a["right"])
    return Arrays(**a, categories=categories, outputs=outputs, depth=depth)


def _fields(block: str) -> dict[str, str]:
    """A model text block's `key=value` lines."""
    return dict(line.split("=", 1) for line in block.splitlines() if "=" in line)


def _numbers(text: str, dtype) -> np.ndarray:
    # LightGBM writes 17 significant digits, read back to the same double; its integers
    # (node indices, uint32 category words) are exact in float64.
    return np.array(text.split(), np.float64).astype(dtype)


def _depth(root: np.ndarray, left: np.ndarray, right: np.ndarray) -> int:
    """The most splits on any tree's path from its root to a leaf: every tree walked
    one level at a time (a node's index is >= 0 for a split, < 0 for a leaf)."""
    (split,) = np.nonzero(root >= 0)
    at = split, root[split].astype(np.int64)
    depth = 0
    while len(at[0]):
        depth += 1
        t, n = at
        children = np.concatenate([left[t, n], right[t, n]])
        owners = np.concatenate([t, t])
        inner = children >= 0
        at = owners[inner], children[inner].astype(np.int64)
    return depth


class Forest(keras.layers.Layer):
    """[batch, columns] float64 -> [batch, outputs] raw scores (LightGBM's raw_score):
    the sum of every tree's leaf, each tree adding to its output.

    Given the fitted `booster` (the job's own evaluations, importance and profile), it
    asks LightGBM's predict, inside the graph: 3.0x-3.6x faster than the same walk
    through XLA (`python -m benchmarks.trees`, docs/decisions.md) and nothing to compile.
    Without one, or under `portable` (the export), it walks `arrays` as plain ops, which
    serve wherever TensorFlow does; tests hold both to LightGBM's scores within 1e-9.
    """

    def __init__(self, arrays: Arrays, booster=None, **kwargs):
        super().__init__(trainable=False, dtype="float64", **kwargs)
        self.arrays = arrays
        # A function, not the Booster: TensorFlow's tracking leaves it alone.
        self._predict = None if booster is None else functools.partial(_predict, booster)
        self.native = booster is not None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.arrays.outputs)

    def call(self, x):
        if not self.native:
            return self._scores(x)
        scores = tf.numpy_function(self._predict, [x], tf.float64, stateful=False)
        return tf.reshape(scores, [-1, self.arrays.outputs])

    def _scores(self, x):
        a = self.arrays
        trees, nodes = a.column.shape
        # What a node needs, in one int32 table ([trees * nodes, fields], a node of tree t
        # at t * nodes): one gather per level instead of one per field. The missing-value
        # and categorical fields join only when some split uses them (3.1x fewer seconds
        # on weather_origin's 2,787 trees, 2026-12-05).
        fields = ["column", "left", "right"]
        any_missing = bool(np.any(a.missing != 0))
        any_categorical = bool(np.any(a.categorical))
        if any_missing:
            fields += ["missing", "default_left"]
        if any_categorical:
            fields += ["categorical", "category_set"]
        table = tf.constant(
            np.stack([getattr(a, f).reshape(-1).astype(np.int32) for f in fields], -1)
        )
        field = {f: i for i, f in enumerate(fields)}
        threshold = tf.constant(a.threshold.reshape(-1))
        categories = tf.constant(a.categories)
        slots = a.categories.shape[1]
        batch = tf.shape(x)[0]
        plain = not (any_missing or any_categorical)
        if plain:  # LightGBM: with missing_type None, NaN counts as 0.
            x = tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)
        node = tf.tile(tf.constant(a.root)[None, :], [batch, 1])  # [batch, trees]
        offset = tf.constant(np.arange(trees, dtype=np.int32) * nodes)[None, :]

        def down(node):  # every tree's walk, one level down
            at = tf.maximum(node, 0) + offset  # this tree's node, in the flat arrays
            row = tf.gather(table, at)  # [batch, trees, fields]
            value = tf.gather(x, row[..., field["column"]], batch_dims=1)
            if plain:
                go_left = value <= tf.gather(threshold, at)
            else:
                is_nan = tf.math.is_nan(value)
                missing_type = row[..., field["missing"]] if any_missing else tf.zeros_like(node)
                value = tf.where(is_nan & tf.equal(missing_type, 0), tf.zeros_like(value), value)
                go_left = value <= tf.gather(threshold, at)
                if any_missing:
                    missing = (is_nan & tf.equal(missing_type, 2)) | (
                        tf.equal(missing_type, 1) & (is_nan | tf.equal(value, 0.0))
                    )
                    default_left = tf.equal(row[..., field["default_left"]], 1)
                    go_left = tf.where(missing, default_left, go_left)
            if any_categorical:
                slot = tf.cast(tf.where(is_nan, tf.constant(-1.0, tf.float64), value), tf.int32)
                in_range = (slot >= 0) & (slot < slots)
                category_left = in_range & tf.gather_nd(
                    categories,
                    tf.stack(
                        [row[..., field["category_set"]], tf.clip_by_value(slot, 0, slots - 1)], -1
                    ),
                )
                categorical = tf.equal(row[..., field["categorical"]], 1)
                go_left = tf.where(categorical, category_left, go_left)
            child = tf.where(go_left, row[..., field["left"]], row[..., field["right"]])
            return (tf.where(node >= 0, child, node),)

        # One loop body in the graph (not `depth` copies), left as soon as all are leaves.
        (node,) = tf.while_loop(
            lambda node: tf.reduce_any(node >= 0), down, (node,), maximum_iterations=a.depth
        )
        leaf = -node - 1
        leaves = a.leaf_value.shape[1]
        values = tf.gather(
            tf.constant(a.leaf_value.reshape(-1)),
            leaf + tf.constant(np.arange(trees, dtype=np.int32) * leaves)[None, :],
        )  # [batch, trees]
        per_output = tf.reshape(values, [batch, trees // a.outputs, a.outputs])
        return tf.reduce_sum(per_output, axis=1)


@contextlib.contextmanager
def portable(model: keras.Model) -> Iterator[None]:
    """Within it, every Forest of `model` walks its trees as plain TensorFlow ops (not
    LightGBM): what is traced for a SavedModel then serves anywhere TensorFlow does."""
    forests = list(_forests(model))
    before = [forest.native for forest in forests]
    for forest in forests:
        forest.native = False
    try:
        yield
    finally:
        for forest, native in zip(forests, before):
            forest.native = native


def _predict(booster, x: np.ndarray) -> np.ndarray:
    """LightGBM's raw scores of the rows of `x` ([rows, outputs] or [rows]); its trees
    are fixed, so the threads change nothing but the time."""
    if not len(x):
        return np.zeros((0,), np.float64)
    return booster.predict(x, raw_score=True, num_threads=PREDICT_THREADS).astype(np.float64)


def _forests(layer) -> Iterator[Forest]:
    if isinstance(layer, Forest):
        yield layer
    for inner in getattr(layer, "layers", ()):  # a model's layers, and nested models'
        yield from _forests(inner)
