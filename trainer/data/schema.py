"""The feature schema: what each feature of a `tf.train.Example` is and how to read it.

A schema is either given as JSON (`--schema`) or inferred from a sample of the training
records (trainer.data.inference), and is always written beside the exported model so a
run can be repeated.

JSON format (docs/guide/data.md, "Feature schema"):

    {"label": {"name": "y", "dtype": "string", "classes": ["no", "yes"]},
     "features": [
       {"name": "age", "dtype": "float", "size": 1, "kind": "numeric",
        "mean": 38.2, "std": 12.1, "default": 38.2},
       {"name": "color", "dtype": "string", "size": 1, "kind": "categorical",
        "vocabulary": ["red", "blue"], "default": ""}]}
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import tensorflow as tf

DTYPES = {"float": tf.float32, "int": tf.int64, "string": tf.string}
KINDS = ("numeric", "categorical")
# Stands for "value absent" in categorical features; it gets its own vocabulary slot,
# so a missing value is learnt separately from an unseen one.
MISSING = ""
MAX_VOCABULARY = 1000
# Values kept of a variable-length feature: the longest list sampled, at most this.
MAX_VARLEN = 64
MAX_CLASSES = 1000
# Quantiles kept of a numeric feature: the edges of 16 bins of equal sample mass.
QUANTILES = 17
# A numeric feature with at most EXACT_VALUES distinct values in the sample, each seen
# EXACT_VALUE_RECORDS times on average, keeps them when the label says they are worth it
# (exact_values): its piecewise-linear encoding gets a bin between each two (an id, a
# price list or a count, which a tree splits on exactly, is then any function of the
# value, not 16 bins of it). The average keeps continuous features of small samples
# (diabetes: 318 records, 163 values of bmi) on quantiles.
EXACT_VALUES = 256
EXACT_VALUE_RECORDS = 10


def pad_value(kind: str, dtype: str) -> Any:
    """What fills a variable-length feature of `kind` and `dtype` (as schema.json names
    them) after its values: the missing token for categoricals, NaN for numbers (as
    float32). Training, serving's bodies and the attributions' baseline pad alike."""
    if kind == "categorical":
        return MISSING if dtype == "string" else -1
    return float("nan")


class SchemaError(ValueError):
    """Data or a schema file that disagrees with what is expected; the message names it."""


@dataclasses.dataclass(frozen=True)
class Feature:
    """One input feature: a list of `size` values of `dtype`, or, `varlen`, of 0 to
    `size` values (longer lists are cut to `size`; an empty list means missing)."""

    name: str
    dtype: str
    kind: str
    size: int = 1
    mean: float = 0.0
    std: float = 1.0
    vocabulary: tuple = ()
    default: Any = None
    varlen: bool = False
    # Numeric features of one value: QUANTILES evenly spaced quantiles of the sample, from
    # its minimum to its maximum (robust scaling and piecewise-linear encodings use them).
    quantiles: tuple = ()
    # ... and, with at most EXACT_VALUES distinct ones in the sample, each seen
    # EXACT_VALUE_RECORDS times on average, those values when the label's mean per value
    # predicts it better than quantile bins do (used only beside quantiles).
    values: tuple = ()
    # Float features of one value that some sampled records lack: a record without it
    # parses as NaN, and the model sees the mean and a 0/1 "missing" input beside it
    # (the trees, a value below every other: trees.MISSING), instead of the mean
    # alone, which a missing value could not be told from (docs/decisions.md).
    missing: bool = False

    def pad_value(self) -> Any:
        """What fills a variable-length feature's dense [batch, size] tensor after its
        values (`pad_value`)."""
        return pad_value(self.kind, self.dtype)

    @property
    def parsed_dtype(self) -> tf.DType:
        """The dtype the model receives: variable-length numbers come as float32 (NaN
        pads them), everything else as stored."""
        if self.varlen and self.kind == "numeric":
            return tf.float32
        return DTYPES[self.dtype]

    def default_value(self) -> Any:
        """What a record without this feature gets: NaN (`missing`), the mean, or the
        missing token."""
        if self.missing:
            return float("nan")
        if self.default is not None:
            return self.default
        if self.kind == "categorical":
            return MISSING if self.dtype == "string" else -1
        return int(round(self.mean)) if self.dtype == "int" else self.mean


@dataclasses.dataclass(frozen=True)
class Label:
    """The target. `classes` lists the label values of a classifier in index order;
    a regression target is learnt standardised with `mean` and `std`, which the exported
    model undoes, so predictions and metrics are in the label's units."""

    name: str
    dtype: str
    classes: tuple = ()
    mean: float = 0.0
    std: float = 1.0


@dataclasses.dataclass(frozen=True)
class Weight:
    """The feature that weights each record's loss and metrics (--weight); not a model
    input. A record without it weighs 1."""

    name: str
    dtype: str = "float"


@dataclasses.dataclass(frozen=True)
class Schema:
    label: Label
    features: tuple[Feature, ...]
    weight: Weight | None = None

    def to_json(self) -> dict:
        label: dict[str, Any] = {"name": self.label.name, "dtype": self.label.dtype}
        if self.label.classes:
            label["classes"] = list(self.label.classes)
        else:
            label.update(mean=self.label.mean, std=self.label.std)
        features = []
        for f in self.features:
            d = {"name": f.name, "dtype": f.dtype, "kind": f.kind, "size": f.size}
            if f.varlen:
                d["varlen"] = True
            elif f.missing:
                d["missing"] = True  # no default: a record without it is marked missing
            else:
                d["default"] = f.default_value()
            if f.kind == "numeric":
                d.update(mean=f.mean, std=f.std)
                if f.quantiles:
                    d["quantiles"] = list(f.quantiles)
                if f.values:
                    d["values"] = list(f.values)
            else:
                d["vocabulary"] = list(f.vocabulary)
            features.append(d)
        out = {"label": label, "features": features}
        if self.weight:
            out["weight"] = {"name": self.weight.name, "dtype": self.weight.dtype}
        return out

    def parse_spec(self, with_label: bool) -> dict:
        """The `tf.io.parse_example` spec; absent features take their default, and
        variable-length ones parse as ragged tensors (`densify` pads them)."""
        spec = {
            f.name: tf.io.RaggedFeature(DTYPES[f.dtype])
            if f.varlen
            else tf.io.FixedLenFeature(
                [f.size], DTYPES[f.dtype], default_value=[f.default_value()] * f.size
            )
            for f in self.features
        }
        if with_label:
            # No default: a record without its label is an error, not a zero.
            spec[self.label.name] = tf.io.FixedLenFeature([], DTYPES[self.label.dtype])
            if self.weight:
                spec[self.weight.name] = tf.io.FixedLenFeature(
                    [], DTYPES[self.weight.dtype], default_value=1
                )
        return spec


def from_json(obj: Any, source: str, label: str, task: str, weight: str | None = None) -> Schema:
    """Reads and checks a schema given as JSON.

    Args:
      obj: the decoded JSON.
      source: where it came from, for error messages.
      label: the --label flag; must match the schema's label.
      task: the --task flag; decides whether classes are needed.
      weight: the --weight flag, if any.

    Raises:
      SchemaError: naming `source` and the entry at fault.
    """

    def fail(what: str) -> SchemaError:
        return SchemaError(f"schema {source}: {what}")

    if not isinstance(obj, dict) or not isinstance(obj.get("features"), list):
        raise fail('expected an object with "label" and a "features" list')
    lab = obj.get("label") or {}
    if lab.get("name", label) != label:
        raise fail(f"label is {lab.get('name')!r} but --label={label!r}")
    try:
        mean, std = float(lab.get("mean", 0.0)), float(lab.get("std", 1.0))
    except (TypeError, ValueError):
        raise fail(f"label {label!r}: mean and std must be numbers") from None
    if not (math.isfinite(mean) and math.isfinite(std) and std > 0):
        raise fail(f"label {label!r}: mean {mean} and std {std}: expected finite numbers, std > 0")
    label_spec = Label(
        name=label,
        dtype=lab.get("dtype", "float"),
        classes=tuple(lab.get("classes", ())),
        mean=mean,
        std=std,
    )
    if label_spec.dtype not in DTYPES:
        raise fail(f"label dtype {label_spec.dtype!r}: expected one of {', '.join(DTYPES)}")
    check_classes(label_spec, task, lambda what: fail(f"label {label!r}: {what}"))
    features = []
    for i, f in enumerate(obj["features"]):
        name = f.get("name") if isinstance(f, dict) else None
        if not name:
            raise fail(f"features[{i}] has no name")
        dtype = f.get("dtype")
        if dtype not in DTYPES:
            raise fail(f"feature {name!r}: dtype {dtype!r}, expected one of {', '.join(DTYPES)}")
        kind = f.get("kind", "categorical" if dtype == "string" else "numeric")
        if kind not in KINDS or (dtype == "string" and kind == "numeric"):
            raise fail(f"feature {name!r}: kind {kind!r} does not fit dtype {dtype!r}")
        size = f.get("size", 1)
        if not isinstance(size, int) or size < 1:
            raise fail(f"feature {name!r}: size {size!r}, expected a positive integer")
        varlen = f.get("varlen", False)
        if not isinstance(varlen, bool):
            raise fail(f"feature {name!r}: varlen {varlen!r}, expected true or false")
        std = float(f.get("std", 1.0))
        if kind == "categorical" and not f.get("vocabulary"):
            raise fail(f"feature {name!r}: categorical features need a non-empty vocabulary")
        for key in ("quantiles", "values"):
            numbers = f.get(key, [])
            if not (
                isinstance(numbers, list)
                and all(isinstance(q, (int, float)) and math.isfinite(q) for q in numbers)
                and numbers == sorted(numbers)
            ):
                raise fail(f"feature {name!r}: {key} {numbers!r}, expected ascending numbers")
        if f.get("quantiles") and (size != 1 or varlen):
            # They describe one number per record: ple_mlp encodes each value by them.
            shape = "variable length" if varlen else f"size {size}"
            raise fail(
                f"feature {name!r}: quantiles for a feature of {shape}; "
                "expected them for one-value numeric features only"
            )
        missing = f.get("missing", False)
        if not isinstance(missing, bool):
            raise fail(f"feature {name!r}: missing {missing!r}, expected true or false")
        if missing and (kind, dtype, size, varlen) != ("numeric", "float", 1, False):
            # NaN marks it: only a float can hold NaN, and the indicator is one number.
            raise fail(
                f"feature {name!r}: missing is for float numeric features of one value; "
                f"this one is {dtype} {kind} of size {size}{' (varlen)' if varlen else ''}"
            )
        if f.get("values") and not f.get("quantiles"):
            # ple_mlp scales by the quantiles and would drop the values without a word.
            raise fail(f"feature {name!r}: values without quantiles; give both, or delete values")
        features.append(
            Feature(
                name=name,
                dtype=dtype,
                kind=kind,
                size=size,
                mean=float(f.get("mean", 0.0)),
                std=std if std > 0 else 1.0,
                vocabulary=tuple(f.get("vocabulary", ())),
                default=None if varlen or missing else f.get("default"),
                varlen=varlen,
                quantiles=tuple(float(q) for q in f.get("quantiles", [])),
                values=tuple(float(v) for v in f.get("values", [])),
                missing=missing,
            )
        )
    if label in {f.name for f in features}:
        raise fail(f"label {label!r} is also listed as a feature")
    if weight in {f.name for f in features}:
        raise fail(
            f"weight {weight!r} is also listed as a feature; a weight is no model "
            "input: remove it from the features"
        )
    if not features:
        raise fail("no features")
    weight_spec = None
    if weight:
        given = obj.get("weight") or {}
        weight_spec = Weight(name=weight, dtype=given.get("dtype", "float"))
        if weight_spec.dtype not in ("float", "int"):
            raise fail(f"weight {weight!r}: dtype {weight_spec.dtype!r}, expected float or int")
    return Schema(label=label_spec, features=tuple(features), weight=weight_spec)


def check_classes(label: Label, task: str, fail) -> None:
    if task == "regression":
        return
    n = len(label.classes)
    if task == "binary" and n != 2:
        raise fail(f"--task=binary needs exactly 2 classes, found {n}: {list(label.classes)[:10]}")
    if task == "multiclass" and not 2 <= n <= MAX_CLASSES:
        raise fail(f"--task=multiclass needs 2 to {MAX_CLASSES} classes, found {n}")
    if label.dtype == "float":
        raise fail("classification labels must be int or string, not float")
