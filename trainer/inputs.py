"""The input pipeline: TFRecord files of `tf.train.Example` to batches of features.

Reads files in parallel, batches serialized records first and parses whole batches
(`parse_example` is vectorised, and far faster than per-record parsing), and prefetches.
Each worker reads its own share of the data (by file or by record) and builds
per-replica batches, through `strategy.distribute_datasets_from_function`.
"""

from __future__ import annotations

from typing import Iterator

import tensorflow as tf

from trainer import schema as schema_lib
from trainer import storage as storage_lib

AUTOTUNE = tf.data.AUTOTUNE


class DataError(ValueError):
    """Records that cannot be read or do not fit the schema; the message names the file."""


def parse_features(serialized: tf.Tensor, schema: schema_lib.Schema) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized Examples into raw features (no label).

    Shared by training and the exported serving signature, so both see identical inputs.
    """
    return tf.io.parse_example(serialized, schema.parse_spec(with_label=False))


def label_encoder(schema: schema_lib.Schema):
    """Returns a function from raw label values to what the loss expects.

    Regression: float32 values. Classification: int32 class indices in the order of
    `schema.label.classes`; a value that is not a known class fails the step with a
    message naming the label, rather than training on index -1.
    """
    label = schema.label
    if not label.classes:
        return lambda y: tf.cast(y, tf.float32)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(label.classes, dtype=schema_lib.DTYPES[label.dtype]),
            tf.range(len(label.classes), dtype=tf.int32)),
        default_value=-1)

    def encode(y: tf.Tensor) -> tf.Tensor:
        index = table.lookup(y)
        check = tf.debugging.assert_non_negative(
            index, message=f"label {label.name!r} has a value that is not one of the "
                           f"classes {list(label.classes)[:20]}")
        with tf.control_dependencies([check]):
            return tf.identity(index)

    return encode


def choose_sharding(policy: str, num_files: int, num_shards: int) -> str:
    """Decides how workers split the data: 'file' or 'record'.

    By file when every worker can get at least one file (each reads only its share);
    by record otherwise (each reads everything and keeps every n-th record). The choice
    is always explicit, so tf.data's AUTO policy never falls back with a warning.
    """
    if policy != "auto":
        return policy
    return "file" if num_files >= num_shards else "record"


def make_dataset(files: list[str], schema: schema_lib.Schema, *, batch_size: int,
                 training: bool, seed: int | None = None, shuffle_buffer: int = 10_000,
                 num_shards: int = 1, shard_index: int = 0,
                 shard_by: str = "record") -> tf.data.Dataset:
    """Builds batches of (features, label) from local or real-GCS TFRecord paths.

    Args:
      files: paths TensorFlow can open (see `Storage.path`).
      schema: features and label to parse.
      batch_size: examples per batch this dataset yields (per replica).
      training: shuffle and repeat forever; evaluation reads each record once, in order.
      seed: makes order deterministic; None lets tf.data trade order for speed.
      num_shards, shard_index: this input pipeline's share of the data.
      shard_by: 'file' or 'record'. Sharding by record happens after shuffling, so the
        k-th records of all shards together form the same global batch as one pipeline.

    Returns:
      A dataset of (dict of feature tensors, label tensor).
    """
    deterministic = seed is not None or not training
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shard_by == "file" and num_shards > 1:
        ds = ds.shard(num_shards, shard_index)
    if training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 16),
                       num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    if shard_by == "record" and num_shards > 1:
        ds = ds.shard(num_shards, shard_index)
    encode_label = label_encoder(schema)
    spec = schema.parse_spec(with_label=True)

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        label = parsed.pop(schema.label.name)
        return parsed, encode_label(label)

    ds = ds.batch(batch_size, drop_remainder=training)
    ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    options = tf.data.Options()
    # Sharding is done above, explicitly; AUTO would re-shard and warn.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    options.deterministic = deterministic
    return ds.with_options(options).prefetch(AUTOTUNE)


def distribute(strategy: tf.distribute.Strategy, files: list[str],
               schema: schema_lib.Schema, *, global_batch_size: int, training: bool,
               seed: int | None, shuffle_buffer: int, shard_by: str):
    """Builds the per-replica datasets of every worker for `strategy`.

    Returns:
      A distributed dataset whose elements are per-replica (features, label) batches.
    """
    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(
            files, schema, batch_size=ctx.get_per_replica_batch_size(global_batch_size),
            training=training, seed=seed, shuffle_buffer=shuffle_buffer,
            num_shards=ctx.num_input_pipelines, shard_index=ctx.input_pipeline_id,
            shard_by=choose_sharding(shard_by, len(files), ctx.num_input_pipelines))

    return strategy.distribute_datasets_from_function(dataset_fn)


def sample_records(storage: storage_lib.Storage, files: list[str],
                   limit: int) -> Iterator[tuple[str, bytes]]:
    """Yields up to `limit` (where, serialized record) pairs, taken evenly from `files`.

    Raises:
      DataError: if a file is unreadable or corrupt, naming it.
    """
    def numbered(uri: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(uri).enumerate().map(lambda i, r: (uri, i, r))

    paths = [storage.path(f) for f in files]
    ds = tf.data.Dataset.from_tensor_slices(paths).interleave(
        numbered, cycle_length=min(len(paths), 64)).take(limit)
    it = iter(ds)
    while True:
        try:
            path, index, record = next(it)
        except StopIteration:
            return
        except tf.errors.OpError as e:
            bad = find_bad_record(storage, files, None)
            raise DataError(f"cannot read {bad or storage_lib.first_line(e)}") from None
        yield f"{storage.uri(path.numpy().decode())} record {int(index)}", record.numpy()


def find_bad_record(storage: storage_lib.Storage, files: list[str],
                    schema: schema_lib.Schema | None) -> str | None:
    """Looks for the first record that cannot be read or parsed; slow, for diagnosis only.

    TensorFlow's read and parse errors name neither the file nor the record; this does.

    Args:
      schema: what records must parse as; None checks only that they can be read.

    Returns:
      'FILE record N: what is wrong', or None when every record is fine.
    """
    if schema is None:
        check = lambda batch: batch  # noqa: E731 (reading is the check)
    else:
        spec, encode_label = schema.parse_spec(with_label=True), label_encoder(schema)
        check = lambda batch: encode_label(  # noqa: E731
            tf.io.parse_example(batch, spec)[schema.label.name])
    for uri in files:
        index = 0
        try:
            for batch in tf.data.TFRecordDataset(storage.path(uri)).batch(256):
                try:
                    check(batch)
                except tf.errors.OpError:
                    # Narrow the failing batch down to its first bad record.
                    for offset in range(int(tf.shape(batch)[0])):
                        try:
                            check(batch[offset:offset + 1])
                        except tf.errors.OpError as e:
                            return f"{uri} record {index + offset}: {storage_lib.first_line(e)}"
                index += int(tf.shape(batch)[0])
        except tf.errors.OpError as e:
            return f"{uri}: {storage_lib.first_line(e)}"  # TF names the byte offset
    return None
