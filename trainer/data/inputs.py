"""The input pipeline: TFRecord files of `tf.train.Example` to batches of features.

Records move in blocks and are parsed a batch at a time (`parse_example` is vectorised,
and far faster than per-record parsing); `trainer.data.records` decides their order. Each
worker reads its own share of the data (by file or by record) and builds per-replica
batches, through `strategy.distribute_datasets_from_function`.
"""

from __future__ import annotations

import tensorflow as tf

from trainer.data import records as records_lib
from trainer.data import schema as schema_lib

AUTOTUNE = tf.data.AUTOTUNE


class DataError(ValueError):
    """Records that cannot be read or do not fit the schema; the message names the file."""


def parse_features(serialized: tf.Tensor, schema: schema_lib.Schema) -> dict[str, tf.Tensor]:
    """Parses a batch of serialized Examples into raw features (no label), for serving.

    It uses the schema's parse spec, as `parser` does for training, so the served model
    sees its inputs exactly as training did, defaults for missing values included.
    """
    return densify(tf.io.parse_example(serialized, schema.parse_spec(with_label=False)), schema)


def densify(parsed: dict, schema: schema_lib.Schema) -> dict:
    """Variable-length features, parsed ragged, as dense [batch, size] tensors: their
    values, cut to `size`, then the feature's pad value (`Feature.pad_value`)."""
    for f in schema.features:
        if f.varlen:
            values = tf.cast(parsed[f.name], f.parsed_dtype)
            parsed[f.name] = values.to_tensor(default_value=f.pad_value(), shape=[None, f.size])
    return parsed


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
            tf.range(len(label.classes), dtype=tf.int32),
        ),
        default_value=-1,
    )

    def encode(y: tf.Tensor) -> tf.Tensor:
        index = table.lookup(y)
        check = tf.debugging.assert_non_negative(
            index,
            message=f"label {label.name!r} has a value that is not one of the "
            f"classes {list(label.classes)[:20]} (the schema's: a class that "
            "the schema sample missed, as in data sorted by label, needs "
            "shuffled data, a larger --schema_sample_records or a --schema "
            "listing every class)",
        )
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


def parser(schema: schema_lib.Schema):
    """Returns a function from a batch of serialized Examples to (features, label,
    weight); the weight is 1 without --weight, and where a record lacks it.

    Non-finite feature or label values fail the batch with a message naming the feature:
    one NaN would otherwise turn every weight into NaN a few steps later. A feature
    marked missing (`Feature.missing`) parses as NaN where a record lacks it, so a NaN
    of its own counts as missing too; only an infinite value fails.
    """
    spec = schema.parse_spec(with_label=True)
    encode_label = label_encoder(schema)
    checked = [f.name for f in schema.features if f.dtype == "float"]
    marked = {f.name for f in schema.features if f.missing}
    if schema.label.dtype == "float":
        checked.append(schema.label.name)

    @tf.autograph.experimental.do_not_convert  # plain ops: nothing to rewrite
    def parse(serialized: tf.Tensor):
        parsed = tf.io.parse_example(serialized, spec)
        for name in checked:
            values = parsed[name]
            if isinstance(values, tf.RaggedTensor):  # before NaN pads it
                values = values.with_flat_values(
                    tf.debugging.check_numerics(
                        values.flat_values, f"feature {name!r} has a non-finite value"
                    )
                )
            elif name in marked:
                finite = tf.debugging.check_numerics(
                    tf.where(tf.math.is_nan(values), tf.zeros_like(values), values),
                    f"feature {name!r} has a non-finite value",
                )
                with tf.control_dependencies([finite]):
                    values = tf.identity(values)
            else:
                values = tf.debugging.check_numerics(
                    values, f"feature {name!r} has a non-finite value"
                )
            parsed[name] = values
        parsed = densify(parsed, schema)
        label = parsed.pop(schema.label.name)
        if not schema.weight:
            return parsed, encode_label(label), tf.ones(tf.shape(label), tf.float32)
        name = schema.weight.name
        weight = tf.debugging.check_numerics(
            tf.cast(parsed.pop(name), tf.float32), f"weight {name!r} has a non-finite value"
        )
        check = tf.debugging.assert_non_negative(
            weight, message=f"weight {name!r} has a negative value"
        )
        with tf.control_dependencies([check]):
            return parsed, encode_label(label), tf.identity(weight)

    return parse


def make_dataset(
    files: list[str],
    schema: schema_lib.Schema,
    *,
    batch_size: int,
    training: bool,
    seed: int = 0,
    shuffle_buffer: int = 10_000,
    num_shards: int = 1,
    shard_index: int = 0,
    shard_by: str = "record",
    step_size: int | None = None,
    start_step: int = 0,
    cache: str = "stream",
    records: int | None = None,
    skip_corrupt: bool = False,
    repeat: bool = False,
    keep=None,
) -> tf.data.Dataset:
    """Builds batches of (features, label) from local or real-GCS TFRecord paths.

    Training order is a function of `seed` alone (see `trainer.data.records`): that is what
    lets a restarted job continue exactly where it stopped, and workers that shard by
    record see disjoint records.

    Args:
      files: paths TensorFlow can open (see `Storage.path`).
      schema: features and label to parse.
      batch_size: examples per batch this dataset yields (per replica).
      training: shuffle and repeat forever; evaluation reads each record once, in order.
      seed: for the order of training records.
      shuffle_buffer: stream mode: records permuted together (a window).
      num_shards, shard_index: this input pipeline's share of the data.
      shard_by: 'file' or 'record'. By record, every pipeline makes the same stream of
        global steps and keeps its slice of each, so the k-th batches of all shards
        together are the k-th global batch of one pipeline.
      step_size: training records this pipeline yields per step (all its replicas
        together); default `batch_size`.
      start_step: steps already trained (resuming a job); the stream starts after them.
      cache: 'memory' or 'stream' (`trainer.plan.defaults.cache` decides).
      records: the records `keep` keeps of all of `files`, if known (the plan's count):
        a resumed stream then needs no count of its own.
      skip_corrupt: drop what cannot be read instead of failing. A TFRecord file cannot
        be resynchronised after a corrupt record, so the rest of that file is lost.
      repeat: read the data forever even when not training: evaluation over a fixed
        number of batches repeats, so it never runs out.
      keep: which records of the files to use (`trainer.data.splits.Part`); None: all.

    Returns:
      A dataset of (dict of feature tensors, label tensor, weight tensor).
    """
    if shard_by == "file" and num_shards > 1:
        files = files[shard_index::num_shards]
    parse = parser(schema)
    options = tf.data.Options()
    # Sharding is done here, explicitly; AUTO would re-shard and warn.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    if not training:
        ds = records_lib.read_blocks(files, skip_corrupt=skip_corrupt, keep=keep)
        if repeat:
            ds = ds.repeat()
        if shard_by == "record" and num_shards > 1:  # per record: evaluation is not hot
            ds = ds.unbatch().shard(num_shards, shard_index).batch(batch_size)
        else:
            ds = ds.rebatch(batch_size)
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=True)
        return ds.with_options(options).prefetch(AUTOTUNE)

    step_size = step_size or batch_size
    by_record = shard_by == "record" and num_shards > 1
    stream_step = step_size * num_shards if by_record else step_size
    start = start_step * stream_step
    if cache == "memory":
        data, n = records_lib.load(files, parse, skip_corrupt=skip_corrupt, keep=keep)
        if not n:
            raise DataError(f"no training records could be read from {len(files)} file(s)")
        ds = records_lib.memory_chunks(n, seed=seed, start=start)
        # The cached tensors are captured by the gather below; tf.data's static
        # optimisations would serialise them into a graph (10.9 s for 2.8 GB, and a
        # failure past 2 GB), and the pipeline needs none of them.
        options.experimental_optimization.apply_default_optimizations = False
        # No tf.data autotuning thread: freeing the iterator waited out its sleep, 5-9 s
        # in 1 default job of 6; randhie's stream ran at 12,033 examples/s without it,
        # 11,319 with it (docs/decisions.md, "The in-memory stream").
        options.autotune.enabled = False
        select = lambda indices: tf.nest.map_structure(  # noqa: E731
            lambda t: tf.gather(t, indices), data
        )
    else:
        # Skipping corrupt data or holding records out may leave nothing, and a stream of
        # empty epochs would never end: look for one record first when records can drop.
        if (skip_corrupt or keep) and not records_lib.any_record(
            files, skip_corrupt=skip_corrupt, keep=keep
        ):
            raise DataError(f"no training records could be read from {len(files)} file(s)")
        whole = not (shard_by == "file" and num_shards > 1)  # this pipeline reads every file
        ds = records_lib.stream_chunks(
            files,
            parse,
            seed=seed,
            window=shuffle_buffer,
            start=start,
            skip_corrupt=skip_corrupt,
            keep=keep,
            records=records if whole else None,
        )
        select = None  # parsed already
    ds = ds.rebatch(stream_step, drop_remainder=True)
    if by_record:
        ds = ds.map(
            lambda *batch: tf.nest.map_structure(
                lambda t: t[shard_index * step_size : (shard_index + 1) * step_size], batch
            )
        )
    if step_size != batch_size:
        ds = ds.rebatch(batch_size, drop_remainder=True)
    if select:
        ds = ds.map(select, num_parallel_calls=AUTOTUNE, deterministic=True)
    # The stream never ends (epochs up to 2**62), but tf.data cannot tell through the
    # flat_map: said here, a distributed iterator skips the all-reduce it otherwise runs
    # on every step to learn whether every worker still has data.
    ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    return ds.with_options(options).prefetch(AUTOTUNE)


def distribute(
    strategy: tf.distribute.Strategy,
    files: list[str],
    schema: schema_lib.Schema,
    *,
    global_batch_size: int,
    training: bool,
    seed: int,
    shuffle_buffer: int,
    shard_by: str,
    start_step: int = 0,
    cache: str = "stream",
    records: int | None = None,
    skip_corrupt: bool = False,
    repeat: bool = False,
    keep=None,
):
    """Builds the per-replica datasets of every worker for `strategy`.

    Args:
      start_step: global steps already trained; each pipeline skips its share of them.
      cache: 'memory' or 'stream', for training data.
      records: the records of `files` that `keep` keeps, if known (see `make_dataset`).
      keep: which records of the files to use (`trainer.data.splits.Part`); None: all.

    Returns:
      A distributed dataset whose elements are per-replica (features, label) batches;
      for training under MultiWorkerMirroredStrategy with one replica per worker, this
      worker's own dataset of its replica's batches (see below).
    """

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = ctx.get_per_replica_batch_size(global_batch_size)
        # Each step, every pipeline hands one batch to each of its local replicas.
        per_step = per_replica * strategy.num_replicas_in_sync // ctx.num_input_pipelines
        return make_dataset(
            files,
            schema,
            batch_size=per_replica,
            training=training,
            seed=seed,
            shuffle_buffer=shuffle_buffer,
            num_shards=ctx.num_input_pipelines,
            shard_index=ctx.input_pipeline_id,
            shard_by=choose_sharding(shard_by, len(files), ctx.num_input_pipelines),
            step_size=per_step,
            start_step=start_step,
            cache=cache,
            records=records,
            skip_corrupt=skip_corrupt,
            repeat=repeat,
            keep=keep,
        )

    if training and _one_replica_per_worker(strategy):
        # The same dataset_fn with the strategy's own input context, iterated plainly:
        # 566 steps/s against 488 through the distributed iterator (docs/decisions.md).
        return dataset_fn(strategy.extended._make_input_context())
    return strategy.distribute_datasets_from_function(dataset_fn)


def _one_replica_per_worker(strategy: tf.distribute.Strategy) -> bool:
    return (
        isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and len(strategy.extended.worker_devices) == 1
        and hasattr(strategy.extended, "_make_input_context")
    )
