"""The schema inferred from a sample of the training records (`--schema` unset): each
feature's kind, size, vocabulary or statistics and quantiles, the label's classes, and
the exact values that the label says are worth keeping (trainer.data.exact_values)."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from trainer.data import exact_values
from trainer.data.schema import (
    EXACT_VALUE_RECORDS,
    EXACT_VALUES,
    MAX_CLASSES,
    MAX_VARLEN,
    MAX_VOCABULARY,
    MISSING,
    QUANTILES,
    Feature,
    Label,
    Schema,
    SchemaError,
    Weight,
    check_classes,
)

# The schema's dtype of each kind of tf.train.Feature.
DTYPE_OF_KIND = {"float_list": "float", "int64_list": "int", "bytes_list": "string"}


class _Stats:
    """Running statistics of one feature over the sampled records."""

    def __init__(self) -> None:
        self.kind = ""  # the tf.train.Feature oneof name: float_list, int64_list, bytes_list
        self.size = 0
        self.count = 0
        self.values_seen = 0
        self.varlen = False
        self.total = 0.0
        self.total_sq = 0.0
        self.values: collections.Counter = collections.Counter()
        self.numbers: list[float] = []  # of one-value numeric features, for quantiles
        self.records: list[int] = []  # which sampled record each of `numbers` is from

    def add(self, kind: str, values: list, where: str, name: str, record: int) -> None:
        if not self.kind:
            self.kind, self.size = kind, len(values)
        elif kind != self.kind:
            raise SchemaError(
                f"{where}: feature {name!r} is a {kind}, earlier records have a {self.kind}"
            )
        elif len(values) != self.size:
            self.varlen = True  # a list of tags, of readings: of any length
            self.size = max(self.size, len(values))
        self.count += 1
        self.values_seen += len(values)
        if kind == "bytes_list":
            self.values.update(v.decode("utf-8", "replace") for v in values)
            return
        for v in values:
            if not math.isfinite(v):
                raise SchemaError(f"{where}: feature {name!r} has a non-finite value {v}")
            self.total += v
            self.total_sq += v * v
        if len(values) == 1:
            self.numbers.append(float(values[0]))
            self.records.append(record)
        if kind == "int64_list" and len(self.values) <= MAX_CLASSES:
            self.values.update(values)


def infer(
    records: Iterable[tuple[str, bytes]],
    label: str,
    task: str,
    weight: str | None = None,
    classes: Iterable | None = None,
) -> Schema:
    """Infers a schema from serialized `tf.train.Example`s.

    Numeric features get mean and standard deviation for normalisation, quantiles, and
    their values when few and the label says they are worth it (exact_values); string
    features become categorical with their most frequent values as vocabulary; int
    features are numeric (give a schema to make them categorical).

    Args:
      records: (where, serialized Example) pairs; `where` names the record in errors.
      label: name of the target feature.
      task: regression, binary or multiclass.
      weight: the --weight feature, if any: numeric, one value, not a model input.
      classes: label values known beside the sample's (every record's, when the sample
        holds only the first records): the classes are both.

    Raises:
      SchemaError: naming the record and feature at fault.
    """
    stats: dict[str, _Stats] = collections.defaultdict(_Stats)
    labels: dict[int, Any] = {}  # sampled record -> its label's (first) value
    seen = 0
    for where, serialized in records:
        try:
            example = tf.train.Example.FromString(serialized)
        except Exception:  # protobuf raises DecodeError, which is not exported stably
            raise SchemaError(f"{where}: not a serialized tf.train.Example") from None
        seen += 1
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value) if kind else []
            if not values:
                continue  # an empty list means missing, same as an absent key
            stats[name].add(kind, values, where, name, seen - 1)
            if name == label:
                labels[seen - 1] = values[0]
    if not seen:
        raise SchemaError("no records to infer the schema from")
    if label not in stats:
        raise SchemaError(
            f"label {label!r} is not a feature of the sampled records "
            f"(features: {', '.join(sorted(stats)) or 'none'})"
        )

    label_stats = stats.pop(label)
    label_spec = _infer_label(label, label_stats, task, set(classes or ()))
    targets = _targets(labels, label_spec, seen)
    weight_spec = None
    if weight:
        if weight not in stats:
            raise SchemaError(
                f"weight {weight!r} is not a feature of the sampled records "
                f"(features: {', '.join(sorted(stats)) or 'none'})"
            )
        w = stats.pop(weight)
        if w.kind == "bytes_list" or w.size != 1:
            raise SchemaError(
                f"weight {weight!r} must be one number per record, not "
                f"{w.size} {'strings' if w.kind == 'bytes_list' else 'values'}"
            )
        weight_spec = Weight(name=weight, dtype="int" if w.kind == "int64_list" else "float")
    features = []
    for name in sorted(stats):
        s = stats[name]
        if s.kind == "bytes_list":
            vocab = [
                v
                for v, _ in sorted(s.values.items(), key=lambda kv: (-kv[1], kv[0]))
                if v != MISSING
            ][:MAX_VOCABULARY]
            features.append(
                Feature(
                    name=name,
                    dtype="string",
                    kind="categorical",
                    size=min(s.size, MAX_VARLEN) if s.varlen else s.size,
                    vocabulary=tuple(vocab),
                    varlen=s.varlen,
                )
            )
        else:
            n = s.values_seen
            mean = s.total / n
            var = max(s.total_sq / n - mean * mean, 0.0)
            std = math.sqrt(var) if var > 1e-12 else 1.0
            one_value = s.size == 1 and not s.varlen
            distinct = np.unique(s.numbers) if one_value else ()
            exact: tuple = ()
            if one_value and len(distinct) <= min(
                EXACT_VALUES, len(s.numbers) / EXACT_VALUE_RECORDS
            ):
                numbers, rows = np.asarray(s.numbers), np.asarray(s.records)
                labelled = ~np.isnan(targets[rows])
                if exact_values.worth_keeping(
                    numbers[labelled], targets[rows[labelled]], len(label_spec.classes), QUANTILES
                ):
                    exact = tuple(float(v) for v in distinct)
            features.append(
                Feature(
                    name=name,
                    dtype="int" if s.kind == "int64_list" else "float",
                    kind="numeric",
                    size=min(s.size, MAX_VARLEN) if s.varlen else s.size,
                    mean=mean,
                    std=std,
                    varlen=s.varlen,
                    quantiles=tuple(
                        float(q) for q in np.quantile(s.numbers, np.linspace(0, 1, QUANTILES))
                    )
                    if one_value
                    else (),
                    values=exact,
                    # Only a float can parse as NaN; an int without values keeps the mean.
                    missing=one_value and s.kind == "float_list" and s.count < seen,
                )
            )
    if not features:
        raise SchemaError(f"the sampled records have no features besides the label {label!r}")
    return Schema(label=label_spec, features=tuple(features), weight=weight_spec)


def _targets(labels: dict[int, Any], label: Label, records: int) -> np.ndarray:
    """[records]: each sampled record's label as exact_values takes it, the standardised
    number or the class index; NaN for a record without one."""
    out = np.full(records, np.nan)
    index = {c: i for i, c in enumerate(label.classes)}
    for row, value in labels.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        out[row] = index[value] if index else (value - label.mean) / label.std
    return out


def sampled_labels(records: Iterable[tuple[str, bytes]], label: str) -> tuple[str | None, set]:
    """The schema dtype of `label` in `records` (None: no record has it) and the values
    the records hold."""
    dtype: str | None = None
    values: set = set()
    for _, serialized in records:
        feature = tf.train.Example.FromString(serialized).features.feature.get(label)
        kind = feature.WhichOneof("kind") if feature is not None else None
        if kind:
            dtype = DTYPE_OF_KIND[kind]
            values.update(
                v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                for v in getattr(feature, kind).value
            )
    return dtype, values


def _infer_label(name: str, s: _Stats, task: str, known: set) -> Label:
    if s.size != 1:
        raise SchemaError(f"label {name!r} has {s.size} values per record, expected 1")
    dtype = DTYPE_OF_KIND[s.kind]
    if task == "regression":
        if dtype == "string":
            raise SchemaError(f"label {name!r} is a string; --task=regression needs numbers")
        mean = s.total / s.count
        var = max(s.total_sq / s.count - mean * mean, 0.0)
        # Targets far from unit scale (prices in the thousands) take an output layer
        # thousands of steps to reach: the head learns (y - mean) / std instead.
        return Label(name=name, dtype=dtype, mean=mean, std=math.sqrt(var) if var > 1e-12 else 1.0)
    if dtype == "float":
        raise SchemaError(
            f"label {name!r} holds floats; --task={task} needs int or string class labels"
        )
    label = Label(name=name, dtype=dtype, classes=tuple(sorted(set(s.values) | known)))
    check_classes(label, task, lambda what: SchemaError(f"label {name!r}: {what}"))
    return label
