"""One record batch in, serialized Examples out, with what the split needs of each row:
the conversion both runners (this process, Beam) apply to every batch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from trainer.prep import columns as columns_lib
from trainer.prep import encode as encode_lib
from trainer.prep import splits as splits_lib
from trainer.prep.errors import PrepareError


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to write, decided once from the first batch and checked on every other one."""

    types: tuple  # columns_lib.ColumnType of every leaf column, in source order
    features: tuple  # names written as features
    label: str | None
    split: splits_lib.Split
    key: str | None
    seed: int

    def to_json(self) -> list:
        return [t.to_json() for t in self.types if t.name in self.features]


@dataclasses.dataclass(frozen=True)
class Rows:
    """A converted batch: records and, per record, its hash and split inputs."""

    records: np.ndarray  # bytes objects
    hashes: np.ndarray  # int64 in [0, 2**62)
    groups: np.ndarray  # stratified: the label; timestamp: zeros
    order: np.ndarray  # timestamp: the time; otherwise zeros
    split: np.ndarray | None  # column split: the split of each row, else None
    dropped: int  # rows without a label


def _check_scalar_flags(by_name: dict, where: str, flags: tuple) -> None:
    """Each (flag, column) names a column of one value per row."""
    for flag, name in flags:
        if not name:
            continue
        if name not in by_name:
            raise PrepareError(
                f"{flag}: {name!r} is not a column of {where} (columns: {', '.join(by_name)})"
            )
        if by_name[name].is_list:
            raise PrepareError(f"{flag}: column {name!r} holds lists; expected one value per row")


def plan(
    batch: pa.RecordBatch,
    where: str,
    label: str | None,
    columns: tuple,
    exclude: tuple,
    split: splits_lib.Split,
    key: str | None,
    seed: int,
) -> Plan:
    """Types every leaf column of `batch` and checks the flags that name columns.

    Raises:
      PrepareError: naming the flag and the column, with the columns there are.
    """
    types = tuple(
        columns_lib.type_of(name, arr, is_list)
        for name, arr, _, is_list in columns_lib.flatten(batch)
    )
    names = [t.name for t in types]
    top = columns_lib.top_level(batch)

    def selected(name: str, chosen: tuple) -> bool:  # a leaf, or the struct it is in
        return name in chosen or top[name] in chosen

    for flag, chosen in (("--columns", columns), ("--exclude", exclude)):
        for name in chosen:
            if name not in names and name not in top.values():
                raise PrepareError(
                    f"{flag}: {name!r} is not a column of {where} (columns: {', '.join(names)})"
                )
    features = [
        n for n in names if (not columns or selected(n, columns)) and not selected(n, exclude)
    ]
    by_name = {t.name: t for t in types}
    _check_scalar_flags(
        by_name, where, (("--label", label), ("--key", key), ("--split", split.column))
    )
    if label and label in by_name and selected(label, exclude):
        raise PrepareError(f"--exclude: {label!r} is the --label")
    if label and label not in features:
        features.append(label)
    column = split.column or ""  # every split but random and stratified names one
    if split.method == "timestamp" and by_name[column].kind == columns_lib.BYTES:
        raise PrepareError(
            f"--split: timestamp column {column!r} holds text "
            f"({by_name[column].source_type}); expected dates, times "
            "or numbers"
        )
    if split.method == "stratified" and not label:
        raise PrepareError("--split=stratified needs --label")
    if split.method == "column":  # which split a row is in is not something to learn
        features = [n for n in features if n != split.column]
    if not [n for n in features if n != label]:
        raise PrepareError(f"{where}: no feature columns left besides the label")
    kept = [n for n in names if n in features]
    return Plan(types=types, features=tuple(kept), label=label, split=split, key=key, seed=seed)


def convert(plan: Plan, batch: pa.RecordBatch, where: str) -> Rows:
    """Converts `batch` (read from `where`) as `plan` says.

    Raises:
      PrepareError: a column missing, added or of another type than in the first batch.
    """
    n = batch.num_rows
    leaves = columns_lib.flatten(batch)
    if [name for name, _, _, _ in leaves] != [t.name for t in plan.types]:
        raise PrepareError(
            f"{where}: columns {[name for name, *_ in leaves]} differ from "
            f"the first batch's {[t.name for t in plan.types]}"
        )
    converted = {}
    for (name, arr, parent, is_list), t in zip(leaves, plan.types):
        if name not in plan.features and name not in (plan.key, plan.split.column):
            continue
        kind = columns_lib.type_of(name, arr, is_list).kind
        if kind != t.kind and not pa.types.is_null(arr.type):
            raise PrepareError(
                f"{where}: column {name!r} is {arr.type} here, {t.source_type} in the first batch"
            )
        converted[name] = columns_lib.convert(name, arr, parent, is_list, n, t.kind)
    keep = np.ones(n, bool)
    if plan.label:
        keep = converted[plan.label].lengths > 0
    dropped = int(n - keep.sum())
    if dropped:
        converted = {k: _take(c, keep) for k, c in converted.items()}
        n -= dropped
    records = encode_lib.encode([converted[f] for f in plan.features], n)
    records = records.to_numpy(zero_copy_only=False)
    if plan.key:
        h = splits_lib.hashes(_as_bytes(converted[plan.key], plan.key, where), plan.seed)
    else:
        h = splits_lib.hashes(records, plan.seed)
    zeros = np.zeros(n, np.int64)
    groups, order, split = zeros, zeros, None
    method = plan.split.method
    # `plan` checked that a stratified split has a label and the others their column.
    label, column = plan.label or "", plan.split.column or ""
    if method == "stratified":
        groups = _scalars(converted[label], label, where)
    elif method == "timestamp":
        order = _scalars(converted[column], column, where)
    elif method == "column":
        values = _scalars(converted[column], column, where)
        split = splits_lib.column_split(
            [v.decode() if isinstance(v, bytes) else v for v in values], column, where
        )
    return Rows(records=records, hashes=h, groups=groups, order=order, split=split, dropped=dropped)


def assign(plan: Plan, rows: Rows, cuts: splits_lib.Cuts | None) -> np.ndarray:
    """The split index (0 train, 1 validation, 2 test) of each of `rows`."""
    if rows.split is not None:
        return rows.split
    if cuts is not None:
        return cuts.assign(rows.groups, rows.order, rows.hashes)
    return splits_lib.random_split(rows.hashes, plan.split.fractions)


def _take(col: columns_lib.Column, keep: np.ndarray) -> columns_lib.Column:
    """The rows `keep` of a column."""
    owner = np.repeat(np.arange(len(col.lengths)), col.lengths)
    values = col.values
    mask = keep[owner]
    values = values.filter(pa.array(mask)) if isinstance(values, pa.Array) else values[mask]
    return dataclasses.replace(col, values=values, lengths=col.lengths[keep])


def _scalars(col: columns_lib.Column, name: str, where: str) -> np.ndarray:
    """One value per row of a scalar column; a missing one is an error."""
    missing = int((col.lengths == 0).sum())
    if missing:
        raise PrepareError(
            f"{where}: column {name!r} is empty in {missing} row(s); the "
            "split needs a value in every row"
        )
    values = col.values
    return values.to_numpy(zero_copy_only=False) if isinstance(values, pa.Array) else values


def _as_bytes(col: columns_lib.Column, name: str, where: str) -> np.ndarray:
    values = _scalars(col, name, where)
    if values.dtype == object:
        return values
    return pa.array(values).cast(pa.string()).to_numpy(zero_copy_only=False)
