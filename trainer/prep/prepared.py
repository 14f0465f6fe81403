"""What both runners do before the first row and after the last: open the source, type
its columns from the first batch, size the shards; then say what was written."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from absl import logging

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.prep import convert as convert_lib
from trainer.prep import shards as shards_lib
from trainer.prep import sources as sources_lib
from trainer.prep import splits as splits_lib
from trainer.prep.errors import PrepareError
from trainer.prep.options import Options

# Bytes of TFRecord framing around each record (length, two checksums).
_FRAMING = 16


@dataclasses.dataclass(frozen=True)
class Prepared:
    options: Options
    source: Any  # sources.FileSource or sources.BigQuerySource
    plan: convert_lib.Plan
    shards: tuple  # files per split
    estimated_rows: int


def open_source(options: Options, storage: storage_lib.Storage):
    if options.input:
        return sources_lib.FileSource(options.input, storage, dict(options.column_types))
    return sources_lib.BigQuerySource(
        options.bigquery_table, options.bigquery_query, options.project
    )


def prepare(options: Options, storage: storage_lib.Storage) -> Prepared:
    """Opens the source, plans the columns from its first batch, sizes the shards.

    Raises:
      PrepareError: an empty source, or flags that do not fit its columns.
    """
    source = open_source(options, storage)
    first = where = None
    for part in source.parts():
        for batch in source.read(part):
            if batch.num_rows:
                first, where = batch, part.where
                break
        if first is not None:
            break
    if first is None:
        raise PrepareError(f"{source.describe()}: no rows to convert")
    assert where is not None  # set with `first`
    plan = convert_lib.plan(
        first,
        where,
        options.label,
        options.columns,
        options.exclude,
        options.split,
        options.key,
        options.seed,
    )
    sample = convert_lib.convert(plan, first, where).records
    per_row = float(np.mean([len(r) for r in sample])) + _FRAMING if len(sample) else 0
    rows = max(source.estimate_rows(), first.num_rows)
    fractions = plan.split.fractions or (0.8, 0.1, 0.1)  # a column split: a guess
    shards = tuple(
        options.num_shards or shards_lib.num_shards(rows * per_row * f) for f in fractions
    )
    return Prepared(options, source, plan, shards, rows)


def report(prepared: Prepared, rows: list, dropped: int, files: list, seconds: float) -> dict:
    """prepare.json: where the rows came from and went, and how columns were typed.

    Raises:
      PrepareError: when no row had a label.
    """
    if not sum(rows):
        raise PrepareError(
            f"{prepared.source.describe()}: no row has a value in the "
            f"--label column {prepared.plan.label!r}"
        )
    plan = prepared.plan
    return {
        "source": prepared.source.describe(),
        "label": plan.label,
        "key": plan.key,
        "seed": plan.seed,
        "split": plan.split.to_json(),
        "rows": {
            "read": sum(rows) + dropped,
            "without_label": dropped,
            **dict(zip(splits_lib.NAMES, rows)),
        },
        "columns": plan.to_json(),
        "files": {
            name: [f for f in files if f.startswith(name + "-")] for name in splits_lib.NAMES
        },
        "seconds": round(seconds, 2),
    }


def publish(
    prepared: Prepared,
    storage: storage_lib.Storage,
    tmp: str,
    rows: list,
    dropped: int,
    files: list,
    seconds: float,
) -> dict:
    """Writes prepare.json into `tmp`, the output being published
    (`Storage.publishing`)."""
    out = report(prepared, rows, dropped, files, seconds)
    storage.write_json(storage_lib.join(tmp, contracts.PREPARE_FILE), out)
    logging.info("prepared %s", summary(out))
    return out


def summary(report: dict) -> str:
    rows = report["rows"]
    parts = [
        f"{name} {rows[name]:,} rows in {len(report['files'][name])} file(s)"
        for name in splits_lib.NAMES
    ]
    dropped = (
        f"; {rows['without_label']:,} rows without a label left out"
        if rows["without_label"]
        else ""
    )
    return (
        f"{rows['read']:,} rows of {report['source']}: {', '.join(parts)}{dropped} "
        f"({report['seconds']:.1f} s)"
    )


def check_output(options: Options, storage: storage_lib.Storage) -> None:
    """Fails before any work when the output's bucket does not exist."""
    try:
        storage.check_bucket(options.output)
    except storage_lib.StorageError as e:
        raise PrepareError(f"--output: {e}") from None
