"""Sharded TFRecord output: how many files per split, and the writer of them.

Files are named `SPLIT-00000-of-00004.tfrecord`, so `--train_data=OUTPUT/train-*` reads
a split. Each row's shard is its hash modulo the shard count, so which file a row lands
in does not depend on the order rows arrive in.
"""

from __future__ import annotations

import math

import numpy as np

from trainer.base import storage as storage_lib

TARGET_BYTES = 128 << 20  # per file: large enough to read at full speed from Cloud Storage
# ...but a split of some size gets at least this many files, so the trainer's parallel
# readers (and workers, which read whole files when there are enough) all have one.
MIN_FILES, MIN_FILE_BYTES = 16, 4 << 20


def num_shards(split_bytes: float) -> int:
    """Files for a split of about `split_bytes`: ~128 MB each, at least 16 once the
    split passes 64 MB, and one for small data."""
    by_size = math.ceil(split_bytes / TARGET_BYTES)
    enough = min(MIN_FILES, math.ceil(split_bytes / MIN_FILE_BYTES))
    return max(1, by_size, enough)


def file_name(split: str, shard: int, count: int) -> str:
    return f"{split}-{shard:05d}-of-{count:05d}.tfrecord"


class Writer:
    """Writes rows to the shards of each split under `folder` (files open on first use)."""

    def __init__(
        self, storage: storage_lib.Storage, folder: str, names: tuple, counts: tuple
    ) -> None:
        self.storage, self.folder, self.names, self.counts = storage, folder, names, counts
        self._open: dict = {}
        self.rows = [0] * len(names)

    def write(self, records: np.ndarray, split: np.ndarray, h: np.ndarray) -> None:
        """Writes `records` (bytes objects); row i to split `split[i]`, shard by `h[i]`."""
        shard = h % np.asarray(self.counts, np.int64)[split]
        key = split.astype(np.int64) * (1 << 32) + shard
        order = np.argsort(key, kind="stable")
        bounds = np.flatnonzero(np.diff(key[order])) + 1
        for rows in np.split(order, bounds):
            if not len(rows):
                continue
            s, k = int(split[rows[0]]), int(shard[rows[0]])
            writer = self._writer(s, k)
            for record in records[rows]:  # TFRecordWriter frames and checksums in C++
                writer.write(record)
            self.rows[s] += len(rows)

    def close(self) -> list[str]:
        """Closes every file; a split with rows gets all its shards, empty ones too (as
        Beam writes them), so `-of-N` always means N files."""
        for s, rows in enumerate(self.rows):
            for k in range(self.counts[s] if rows else 0):
                self._writer(s, k)
        for w in self._open.values():
            w.close()
        return sorted(self._open)

    def _writer(self, s: int, k: int):
        name = file_name(self.names[s], k, self.counts[s])
        if name not in self._open:
            self._open[name] = self.storage.record_writer(storage_lib.join(self.folder, name))
        return self._open[name]
