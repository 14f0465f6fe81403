"""Records read outside the training pipeline: an even sample of the files (for the
schema, importance and the profile), and the search for the record behind a read or
parse error (TensorFlow's own names neither file nor record)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import tensorflow as tf

from trainer.base import storage as storage_lib
from trainer.data import schema as schema_lib
from trainer.data.inputs import DataError, parser

SAMPLE_BATCH = 1024  # records a sample takes from its dataset per eager call


def sample_records(
    storage: storage_lib.Storage,
    files: list[str],
    limit: int,
    skip_corrupt: bool = False,
    keep=None,
) -> Iterator[tuple[str, bytes]]:
    """Yields up to `limit` (where, serialized record) pairs, taken evenly from `files`
    (those that `keep`, a `trainer.data.splits.Part`, keeps).

    Raises:
      DataError: if a file is unreadable or corrupt (unless `skip_corrupt`), naming it.
    """

    def numbered(uri: tf.Tensor) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(uri)
        if skip_corrupt:
            records = records.ignore_errors()
        numbered = records.enumerate().map(lambda i, r: (uri, i, r))
        return numbered.filter(lambda u, i, r: keep(r[None], i[None])[0]) if keep else numbered

    paths = [storage.path(f) for f in files]
    # Batched: one eager `next` per record cost 0.15 ms, 1.2-1.4 s of a job's start on a
    # 10,000-record sample (docs/decisions.md).
    ds = (
        tf.data.Dataset.from_tensor_slices(paths)
        .interleave(numbered, cycle_length=min(len(paths), 64))
        .take(limit)
        .batch(SAMPLE_BATCH)
    )
    it = iter(ds)
    while True:
        try:
            uris, indices, records = [t.numpy() for t in next(it)]
        except StopIteration:
            return
        except tf.errors.OpError as e:
            bad = find_bad_record(storage, files, None)
            raise DataError(f"cannot read {bad or storage_lib.first_line(e)}") from None
        for path, index, record in zip(uris, indices, records):
            yield f"{storage.uri(path.decode())} record {int(index)}", record


def bad_records(
    storage: storage_lib.Storage,
    files: list[str],
    schema: schema_lib.Schema | None,
    limit: int | None = None,
) -> Iterator[str]:
    """Yields the first unreadable or unparsable record of each file; slow, for diagnosis.

    TensorFlow's read and parse errors name neither the file nor the record; this does.

    Args:
      schema: what records must parse as; None checks only that they can be read.
      limit: records to check per file; None: all of them.

    Yields:
      'FILE record N: what is wrong' (or 'FILE: corrupted record at BYTE').
    """
    check = parser(schema) if schema else (lambda batch: batch)
    for uri in files:
        yield from _first_bad_record(storage, uri, check, limit)


def _first_bad_record(storage, uri, check, limit) -> Iterator[str]:
    index = 0
    records = tf.data.TFRecordDataset(storage.path(uri))
    if limit is not None:
        records = records.take(limit)
    try:
        for batch in records.batch(256):
            try:
                check(batch)
            except tf.errors.OpError:
                # Narrow the failing batch down to its first bad record.
                for offset in range(int(tf.shape(batch)[0])):
                    try:
                        check(batch[offset : offset + 1])
                    except tf.errors.OpError as e:
                        yield f"{uri} record {index + offset}: {storage_lib.first_line(e)}"
                        return
            index += int(tf.shape(batch)[0])
    except tf.errors.OpError as e:
        yield f"{uri}: {storage_lib.first_line(e)}"  # TF names the byte offset


def find_bad_record(
    storage: storage_lib.Storage,
    files: list[str],
    schema: schema_lib.Schema | None,
    limit: int | None = None,
) -> str | None:
    """The first of `bad_records`, or None when every record is fine."""
    return next(bad_records(storage, files, schema, limit), None)


@contextlib.contextmanager
def naming_bad_records(
    storage: storage_lib.Storage, files: list[str], schema: schema_lib.Schema
) -> Iterator[None]:
    """Turns a read or parse error of the training data into a DataError naming it."""
    try:
        yield
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
        # TensorFlow's error names neither file nor record: find them. If the data
        # is fine, the error is not the user's: let it through as it is.
        bad = find_bad_record(storage, files, schema)
        if bad:
            raise DataError(bad) from None
        raise
