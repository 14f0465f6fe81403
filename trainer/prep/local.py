"""The in-process runner: every part of the source, converted a batch at a time on all
cores, written to a temporary folder that replaces `--output` only when complete."""

from __future__ import annotations

import collections
import concurrent.futures
import os
import time

import numpy as np

from trainer.base import storage as storage_lib
from trainer.prep import convert as convert_lib
from trainer.prep import prepared as prepared_lib
from trainer.prep import shards as shards_lib
from trainer.prep import splits as splits_lib
from trainer.prep.options import Options


def run(options: Options, storage: storage_lib.Storage) -> dict:
    """Converts the source of `options`; returns what prepare.json says."""
    start = time.time()
    prepared = prepared_lib.prepare(options, storage)
    source, plan = prepared.source, prepared.plan
    with storage.publishing(options.output.rstrip("/")) as tmp:
        cuts = None
        if plan.split.needs_pass:
            # A first pass for the cut points: only each row's split inputs are kept.
            seen = [(r.groups, r.order, r.hashes) for r in _converted(source, plan)]
            groups, order, hashes = (np.concatenate(a) for a in zip(*seen))
            cuts = splits_lib.cuts(groups, order, hashes, plan.split.fractions)
        writer = shards_lib.Writer(storage, tmp, splits_lib.NAMES, prepared.shards)
        dropped = 0
        for rows in _converted(source, plan):
            writer.write(rows.records, convert_lib.assign(plan, rows, cuts), rows.hashes)
            dropped += rows.dropped
        files = writer.close()
        return prepared_lib.publish(
            prepared, storage, tmp, writer.rows, dropped, files, time.time() - start
        )


def _converted(source, plan):
    """Converted batches of every part, in order; up to one batch per core in flight."""
    workers = os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        pending = collections.deque()
        for part in source.parts():
            for batch in source.read(part):
                pending.append(pool.submit(convert_lib.convert, plan, batch, part.where))
                if len(pending) > workers:
                    yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
