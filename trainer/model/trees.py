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
# LightGBM's missing_type, and what a value then means (its tree.h): None: NaN is 0.
_MISSING = {"None": 0, "Zero": 1, "NaN": 2}
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
    missing: np.ndarray  # [trees, nodes] int32, _MISSING
    default_left: np.ndarray  # [trees, nodes] bool
    left: np.ndarray  # [trees, nodes] int32
    right: np.ndarray  # [trees, nodes] int32
    leaf_value: np.ndarray  # [trees, leaves] float64
    root: np.ndarray  # [trees] int32: 0, or -1 for a tree that is one leaf
    categories: np.ndarray  # [sets, slots] bool: slot goes left
    outputs: int
    depth: int


def from_lightgbm(dump: dict) -> Arrays:
    """Arrays from `Booster.dump_model()`."""
    trees = [t["tree_structure"] for t in dump["tree_info"]]
    nodes = max(1, max(t["num_leaves"] - 1 for t in dump["tree_info"]))
    leaves = max(t["num_leaves"] for t in dump["tree_info"])
    shape = (len(trees), nodes)
    a = {
        "column": np.zeros(shape, np.int32),
        "threshold": np.zeros(shape, np.float64),
        "categorical": np.zeros(shape, bool),
        "category_set": np.zeros(shape, np.int32),
        "missing": np.zeros(shape, np.int32),
        "default_left": np.zeros(shape, bool),
        "left": np.full(shape, -1, np.int32),
        "right": np.full(shape, -1, np.int32),
        "leaf_value": np.zeros((len(trees), leaves), np.float64),
        "root": np.zeros(len(trees), np.int32),
    }
    sets: list[list[int]] = []
    depth = 0

    def pointer(node: dict) -> int:
        return node["split_index"] if "split_index" in node else -node.get("leaf_index", 0) - 1

    for t, root in enumerate(trees):
        a["root"][t] = pointer(root)
        stack = [(root, 1)]
        while stack:
            node, level = stack.pop()
            if "split_index" not in node:
                a["leaf_value"][t, node.get("leaf_index", 0)] = node["leaf_value"]
                depth = max(depth, level - 1)
                continue
            n = node["split_index"]
            a["column"][t, n] = node["split_feature"]
            a["missing"][t, n] = _MISSING[node["missing_type"]]
            a["default_left"][t, n] = node["default_left"]
            if node["decision_type"] == "==":
                a["categorical"][t, n] = True
                a["category_set"][t, n] = len(sets)
                sets.append([int(v) for v in str(node["threshold"]).split("||")])
            else:
                a["threshold"][t, n] = float(node["threshold"])
            a["left"][t, n] = pointer(node["left_child"])
            a["right"][t, n] = pointer(node["right_child"])
            stack += [(node["left_child"], level + 1), (node["right_child"], level + 1)]
    slots = max([max(s) + 1 for s in sets], default=1)
    categories = np.zeros((max(len(sets), 1), slots), bool)
    for i, s in enumerate(sets):
        categories[i, s] = True
    return Arrays(
        **a, categories=categories, outputs=int(dump["num_tree_per_iteration"]), depth=depth
    )


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
