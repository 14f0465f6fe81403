"""The order of training records, epoch after epoch, as a function of the seed alone.

Records move in blocks, never one by one: tf.data costs about a microsecond per element
per stage, as much as parsing a record, so per-record stages would cap the pipeline at a
third of what reading and parsing allow.

Two sources, chosen by `--cache` (see `trainer.plan.defaults.cache`):

* **memory**: this pipeline's records are read and parsed once, at start-up, into one
  tensor per feature; every epoch is then a uniform permutation of all of them, drawn
  from (seed, epoch). Later epochs read and parse nothing, and sorted files mix fully.
* **stream**: files are read side by side (up to `CYCLE` at once) in blocks; each epoch
  reads them in its own order, drawn from (seed, epoch), and each window of `window`
  consecutive records is permuted uniformly, drawn from (seed, epoch, window). A record
  mixes with the records around the same position of the other files read with it, not
  with the far end of its own file: streamed files should not be sorted.

Either source is a dataset of chunks (record indices into the cache, or windows of
parsed records) whose concatenation is the training stream. A resumed job starts that stream
at its position: it computes the epoch it stopped in and skips only inside that epoch
(memory: nothing is read again; stream: at most one epoch is read, not parsed, plus one
read to count the records).
"""

from __future__ import annotations

import logging
import time

import tensorflow as tf

from trainer.base import storage as storage_lib

AUTOTUNE = tf.data.AUTOTUNE
# tf.data's threading and autotune options stay at their defaults: measured in one run
# against the ceiling (streamed), defaults 0.99x, max_intra_op_parallelism=1 0.93x,
# private_threadpool_size=2 1.07x, autotune.cpu_budget=2 0.97x (all within this
# machine's noise), experimental_optimization.seq_interleave_prefetch 0.79x.
# Files read side by side, and records per block read from one file (blocks of 64, 256
# and 1024 measured within noise of each other: per-block costs are amortised).
CYCLE = 16
BLOCK = 256
# Records parsed per call while loading the cache: parse_example is vectorised, and
# larger batches amortise its set-up (4096 loaded 200k records in 0.8 s on 2 cores).
LOAD_BATCH = 4096
# Epochs are numbered up to here: "forever" for any job.
_EPOCHS = 2**62


def read_blocks(
    paths: list[str],
    *,
    skip_corrupt: bool,
    block: int = BLOCK,
    shuffled_by: tf.Tensor | None = None,
    keep=None,
) -> tf.data.Dataset:
    """Serialized records of `paths` in blocks of up to `block`, files read side by side.

    Args:
      shuffled_by: a stateless seed; the files are then read in an order drawn from it.
      keep: a function from a block of serialized records and their positions in their
        file to a bool mask of those to keep (`trainer.data.splits.Part`); None keeps all.
    """
    files = tf.constant(paths)
    if shuffled_by is not None:
        files = tf.gather(
            files, tf.random.experimental.stateless_shuffle(tf.range(len(paths)), seed=shuffled_by)
        )

    def read(path):
        records = tf.data.TFRecordDataset(path)
        blocks = (records.ignore_errors() if skip_corrupt else records).batch(block)
        if not keep:
            return blocks
        # Every block but a file's last is full: a record's position is its block's
        # number times `block` plus its place in the block (no per-record stage).
        return blocks.enumerate().map(
            lambda j, b: tf.boolean_mask(b, keep(b, j * block + tf.range(tf.size(b, tf.int64))))
        )

    # Explicit cycle: num_parallel_reads=AUTOTUNE means ceil(cores/3) files, 1 on 2 cores
    # (measured 40k records/s there, against ~500k/s for this interleave).
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        read, cycle_length=min(len(paths), CYCLE), num_parallel_calls=AUTOTUNE, deterministic=True
    )


def count(paths: list[str], *, skip_corrupt: bool, keep=None, limit: int | None = None) -> int:
    """Records in `paths` (read, not parsed) that `keep` keeps; with `limit`, reading
    stops once that many are counted (the answer is then at least `limit`)."""
    blocks = read_blocks(paths, skip_corrupt=skip_corrupt, block=LOAD_BATCH, keep=keep)
    sizes = blocks.map(lambda b: tf.shape(b, out_type=tf.int64)[0])
    if limit is None:
        return int(sizes.reduce(tf.constant(0, tf.int64), lambda n, size: n + size))
    n = 0
    for size in sizes:
        n += int(size)
        if n >= limit:
            break
    return n


def label_values(
    paths: list[str], label: str, dtype: tf.DType, *, skip_corrupt: bool, keep=None
) -> set:
    """The distinct values of the feature `label` in every record of `paths` that `keep`
    keeps (records without it add none): one pass that parses that feature alone."""
    spec = {label: tf.io.VarLenFeature(dtype)}
    blocks = read_blocks(paths, skip_corrupt=skip_corrupt, block=LOAD_BATCH, keep=keep)
    uniques = blocks.map(
        lambda b: tf.unique(tf.io.parse_example(b, spec)[label].values)[0],
        num_parallel_calls=AUTOTUNE,
    )
    values: set = set()
    for batch in uniques:
        values.update(v.decode() if isinstance(v, bytes) else int(v) for v in batch.numpy())
    return values


def any_record(paths: list[str], *, skip_corrupt: bool, keep=None) -> bool:
    """Whether `paths` hold a record that can be read and that `keep` keeps; reads only
    up to the first such block, not the whole data."""
    blocks = read_blocks(paths, skip_corrupt=skip_corrupt, keep=keep)
    return bool(list(blocks.filter(lambda b: tf.size(b) > 0).take(1)))


def load(paths: list[str], parse, *, skip_corrupt: bool, keep=None):
    """Reads and parses every record of `paths` into one tensor per feature (and label).

    Returns:
      (the parsed structure, number of records); (None, 0) when there are no records.

    Raises:
      tf.errors.OpError: a record that cannot be read or parsed (the caller names it).
    """
    start = time.monotonic()
    with tf.device("/cpu:0"):
        batches = list(
            read_blocks(paths, skip_corrupt=skip_corrupt, block=LOAD_BATCH, keep=keep)
            .map(parse, num_parallel_calls=AUTOTUNE, deterministic=True)
            .prefetch(2)
        )
        if not batches:
            return None, 0
        data = tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0), *batches)
    n = int(tf.shape(tf.nest.flatten(data)[0])[0])
    logging.info(
        "loaded %s training records into memory (%s) in %.1f s",
        f"{n:,}",
        storage_lib.human_bytes(_nbytes(data)),
        time.monotonic() - start,
    )
    return data, n


def memory_chunks(n: int, *, seed: int, start: int) -> tf.data.Dataset:
    """Record indices into a cache of `n` records, from record `start` of the stream."""
    first_epoch, offset = divmod(start, n)

    def epoch(e):
        order = tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int64), seed=_seed(seed, e)
        )
        return order[tf.where(e == first_epoch, tf.constant(offset, tf.int64), 0) :]

    return tf.data.Dataset.range(first_epoch, _EPOCHS).map(epoch)


def stream_chunks(
    paths: list[str],
    parse,
    *,
    seed: int,
    window: int,
    start: int,
    skip_corrupt: bool,
    keep=None,
    records: int | None = None,
) -> tf.data.Dataset:
    """Windows of parsed records, from record `start` of the stream (`records`: how many
    of `paths`' records `keep` keeps, counted here when None and needed)."""
    if start and records is None:
        records = count(paths, skip_corrupt=skip_corrupt, keep=keep)
    first_epoch, offset = divmod(start, records) if start and records else (0, 0)
    first_window, offset = divmod(offset, window)

    def epoch(e):
        windows = read_blocks(
            paths, skip_corrupt=skip_corrupt, shuffled_by=_seed(seed, e), keep=keep
        )
        windows = windows.rebatch(window).enumerate()
        first = e == first_epoch
        # Windows already trained on are read but neither parsed nor permuted.
        windows = windows.skip(tf.where(first, tf.constant(first_window, tf.int64), 0))

        def parse_and_permute(w, records):
            # Parsing a whole window, then permuting the parsed values, measured 1.21x
            # the ceiling against 1.00x for permuting serialized records (string copies)
            # and parsing batches.
            order = tf.random.experimental.stateless_shuffle(
                tf.range(tf.shape(records)[0]), seed=_seed(seed + 1 + w, e)
            )
            order = order[tf.where(first & (w == first_window), offset, 0) :]
            return tf.nest.map_structure(lambda t: tf.gather(t, order), parse(records))

        return windows.map(parse_and_permute, num_parallel_calls=AUTOTUNE, deterministic=True)

    return tf.data.Dataset.range(first_epoch, _EPOCHS).flat_map(epoch)


def _seed(a, b) -> tf.Tensor:
    return tf.stack([tf.cast(a, tf.int64), tf.cast(b, tf.int64)])


def _nbytes(data) -> int:
    total = 0
    for t in tf.nest.flatten(data):
        if t.dtype == tf.string:  # each string: its bytes and a 24-byte tstring header
            total += int(tf.reduce_sum(tf.strings.length(t))) + 24 * int(tf.size(t))
        else:
            total += int(tf.size(t)) * t.dtype.size
    return total
