"""Arrow columns to feature columns: the typing rules of `trainer.prepare`
(docs/guide/data.md).

Every column becomes one of the three `tf.train.Feature` lists; a null cell, a NaN or an
infinite float becomes an absent feature (never NaN, never 0); list columns become
variable-length features (null elements dropped, nested lists flattened); struct fields
become features named `parent_child` (a valid name for the serving signature's
arguments, which `parent.child` is not).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trainer.prep.errors import PrepareError

FLOAT, INT, BYTES = "float_list", "int64_list", "bytes_list"
DTYPES = {FLOAT: "float", INT: "int", BYTES: "string"}
# What dates and times become: whole seconds or days, exact in int64 (float32 would
# round a Unix time in seconds to minutes).
TIME_RULES = {
    "date": "int: days since 1970-01-01",
    "timestamp": "int: seconds since 1970-01-01 00:00:00 UTC",
    "time": "int: seconds since midnight",
    "duration": "int: seconds",
}
_SECONDS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


@dataclasses.dataclass(frozen=True)
class Column:
    """One output feature of a batch: `values` (flat, no nulls) and per-row `lengths`.

    `values` is float32 or int64 numpy for numbers, a binary Arrow array for strings.
    """

    name: str
    kind: str
    values: Any  # np.ndarray or pa.Array
    lengths: np.ndarray
    is_list: bool


@dataclasses.dataclass(frozen=True)
class ColumnType:
    """How a source column was typed: reported in prepare.json."""

    name: str
    source_type: str
    kind: str
    is_list: bool
    rule: str = ""

    def to_json(self) -> dict:
        out = {
            "name": self.name,
            "source_type": self.source_type,
            "feature": self.kind,
            "dtype": DTYPES[self.kind],
            "list": self.is_list,
        }
        if self.rule:
            out["rule"] = self.rule
        return out


SEPARATOR = "_"


def flatten(batch: pa.RecordBatch) -> list[tuple[str, pa.Array, np.ndarray, bool]]:
    """The leaf columns of `batch`: (name, flat values, parent row of each value, is_list).

    Struct fields are named `parent_child`; a list's values keep the row they came from.

    Raises:
      PrepareError: when two leaves get one name (a column `a_b` beside a struct `a`).
    """
    n = batch.num_rows
    out = []

    def walk(name: str, arr: pa.Array, parent: np.ndarray, is_list: bool) -> None:
        t = arr.type
        if pa.types.is_dictionary(t):
            arr = arr.dictionary_decode()
            t = arr.type
        if pa.types.is_struct(t):
            for field, child in zip(t, arr.flatten()):  # flatten() keeps parent nulls
                walk(f"{name}{SEPARATOR}{field.name}", child, parent, is_list)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            inner = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
            walk(name, pc.list_flatten(arr), parent[inner], True)
        else:
            out.append((name, arr, parent, is_list))

    for name, arr in zip(batch.schema.names, batch.columns):
        walk(name, arr, np.arange(n, dtype=np.int64), False)
    seen = set()
    for name, *_ in out:
        if name in seen:
            raise PrepareError(
                f"two columns are named {name!r} once struct fields are "
                f"named parent{SEPARATOR}child; rename one"
            )
        seen.add(name)
    return out


def top_level(batch: pa.RecordBatch) -> dict[str, str]:
    """Each leaf name of `batch` -> the source column it comes from."""
    out = {}
    for name, arr in zip(batch.schema.names, batch.columns):
        single = pa.record_batch([arr], names=[name])
        out.update({leaf: name for leaf, *_ in flatten(single)})
    return out


def type_of(name: str, arr: pa.Array, is_list: bool) -> ColumnType:
    """The feature list a leaf column becomes (see the module docstring).

    Raises:
      PrepareError: for Arrow types with no tabular meaning (maps, unions).
    """
    t = arr.type
    kind, rule = None, ""
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    ):
        kind = BYTES
    elif pa.types.is_integer(t) or pa.types.is_boolean(t):
        kind = INT
        if pa.types.is_boolean(t):
            rule = "int: 1 for true, 0 for false"
    elif pa.types.is_floating(t) or pa.types.is_decimal(t):
        kind = FLOAT
    elif pa.types.is_null(t):
        kind, rule = FLOAT, "all missing: written as absent"
    else:
        for prefix, text in TIME_RULES.items():
            if str(t).startswith(prefix):
                kind, rule = INT, text
                break
    if kind is None:
        raise PrepareError(
            f"column {name!r}: Arrow type {t} is not supported; leave it out with --exclude"
        )
    return ColumnType(name=name, source_type=str(t), kind=kind, is_list=is_list, rule=rule)


def convert(
    name: str, arr: pa.Array, parent: np.ndarray, is_list: bool, num_rows: int, kind: str
) -> Column:
    """Converts one leaf column to `kind`, dropping missing values.

    Raises:
      PrepareError: an unsigned value beyond int64, or a value of the wrong type.
    """
    t = arr.type
    if kind == BYTES:
        if not (pa.types.is_large_binary(t)):
            arr = arr.cast(pa.large_binary())
        # An empty string is missing too, as it is to the trainer (schema.MISSING).
        valid = pc.and_kleene(arr.is_valid(), pc.greater(pc.binary_length(arr), 0))
        valid = valid.fill_null(False).to_numpy(zero_copy_only=False)
        values = arr.filter(pa.array(valid)) if not valid.all() else arr
    else:
        numbers = _numbers(name, arr, kind)
        valid = _valid(arr)
        if kind == FLOAT:
            valid &= np.isfinite(numbers)
        values = numbers[valid] if not valid.all() else numbers
    lengths = np.bincount(parent[valid], minlength=num_rows).astype(np.int64)
    return Column(name=name, kind=kind, values=values, lengths=lengths, is_list=is_list)


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _numbers(name: str, arr: pa.Array, kind: str) -> np.ndarray:
    t = arr.type
    if pa.types.is_null(t):
        return np.zeros(len(arr), np.float32)
    if kind == FLOAT:
        return arr.cast(pa.float64()).fill_null(0).to_numpy().astype(np.float32)
    if pa.types.is_boolean(t):
        return arr.cast(pa.int64()).fill_null(0).to_numpy()
    if pa.types.is_unsigned_integer(t) and t.bit_width == 64:
        big = pc.greater(arr, np.iinfo(np.int64).max).to_numpy(zero_copy_only=False)
        if np.any(big & _valid(arr)):
            raise PrepareError(
                f"column {name!r}: value {arr[int(np.argmax(big))]} does not fit int64"
            )
    if pa.types.is_integer(t):
        return arr.cast(pa.int64(), safe=False).fill_null(0).to_numpy()
    # Dates and times: their integer storage, then whole days or seconds (floor).
    s = str(t)
    if s.startswith("date32"):
        return arr.cast(pa.int32()).fill_null(0).to_numpy().astype(np.int64)
    if s.startswith("date64"):
        return np.floor_divide(arr.cast(pa.int64()).fill_null(0).to_numpy(), 86_400_000)
    raw = arr.view(pa.int32() if pa.types.is_time32(t) else pa.int64())
    return np.floor_divide(raw.fill_null(0).to_numpy().astype(np.int64), _SECONDS[t.unit])
