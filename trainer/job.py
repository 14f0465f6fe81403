"""One training job, top to bottom: data, schema, model, training, evaluation, export.

`run` is the library's entry point; `trainer.task` only turns flags into a Config and
creates the strategy before calling it. Side effects (progress lines, summaries,
checkpoints, export) happen in the Python outer loop, between compiled inner loops.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import time
import uuid

import keras
import tensorflow as tf

from trainer import checkpoints as checkpoints_lib
from trainer import config as config_lib
from trainer import distribution
from trainer import export
from trainer import heads
from trainer import inputs
from trainer import model as model_lib
from trainer import progress as progress_lib
from trainer import schema as schema_lib
from trainer import storage as storage_lib
from trainer import training


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says where."""


# Errors caused by the user's data, flags or environment: reported as one line, exit 2.
USER_ERRORS = (config_lib.ConfigError, storage_lib.StorageError, schema_lib.SchemaError,
               inputs.DataError, distribution.ClusterError, checkpoints_lib.CheckpointError,
               model_lib.ModelFnError, TrainingError)


@dataclasses.dataclass
class Result:
    model: keras.Model
    schema: schema_lib.Schema
    head: heads.Head
    metrics: dict
    step: int


def load_schema(config: config_lib.Config, storage: storage_lib.Storage,
                files: list[str]) -> schema_lib.Schema:
    """Reads --schema, or infers the schema from a sample of the training records.

    A given schema is checked against the first records, so a mismatch fails now,
    naming the file and feature, rather than minutes into training.
    """
    if config.schema:
        schema = schema_lib.from_json(storage.read_json(config.schema), config.schema,
                                      config.label, config.task)
        bad = inputs.find_bad_record(storage, files[:1], schema)
        if bad:
            raise inputs.DataError(f"{bad} (with schema {config.schema})")
        return schema
    records = inputs.sample_records(storage, files, config.schema_sample_records)
    schema = schema_lib.infer(records, config.label, config.task)
    logging.info("inferred schema from up to %d records: %d features, label %r%s",
                 config.schema_sample_records, len(schema.features), schema.label.name,
                 f" with classes {list(schema.label.classes)[:10]}" if schema.label.classes else "")
    return schema


def run(config: config_lib.Config, strategy: tf.distribute.Strategy,
        cluster: distribution.Cluster | None = None) -> Result:
    """Trains, evaluates and exports as `config` says, under `strategy`.

    Raises:
      ConfigError, StorageError, SchemaError, DataError, CheckpointError, TrainingError:
        user-facing errors whose message names the culprit.
    """
    storage = config.storage()
    is_chief = distribution.is_chief(cluster)
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise config_lib.ConfigError(
            f"--batch_size={config.batch_size} does not divide evenly across {replicas} "
            f"replicas; use a multiple of {replicas}")
    train_files = storage.glob(config.train_data)
    eval_files = storage.glob(config.eval_data) if config.eval_data else []
    schema = load_schema(config, storage, train_files)
    head = heads.make_head(config.task, schema)

    if config.seed is not None:
        keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        model = model_lib.build(schema, head.units, config)
        optimizer = keras.optimizers.Adam(config.learning_rate)
        # Slot variables must exist before the first step is traced under a strategy.
        optimizer.build(model.trainable_variables)
    ckpt = checkpoints_lib.Checkpoints(storage, config.checkpoint_dir, is_chief,
                                       model=model, optimizer=optimizer)
    try:
        resumed = ckpt.restore_latest()
        start_step = step = int(optimizer.iterations.numpy())
        if resumed:
            logging.info("resuming at step %d of %d", step, config.train_steps)
        loops = training.Loops(strategy, model, optimizer, head, config.batch_size,
                               config.run_eagerly)
        evaluate = _evaluator(config, storage, strategy, schema, loops, eval_files)
        step, metrics = _train(config, storage, strategy, schema, loops, ckpt, evaluate,
                               train_files, step, is_chief)
        metrics = evaluate() or metrics
        logging.info("final metrics: %s", _fmt(metrics))
        if step > start_step:
            ckpt.save(step)
        _export(config, storage, model, schema, head, metrics, is_chief)
    finally:
        ckpt.close()
    return Result(model=model, schema=schema, head=head, metrics=metrics, step=step)


def _train(config, storage, strategy, schema, loops, ckpt, evaluate, train_files,
           step, is_chief):
    """The outer loop: inner loops of `steps_per_loop` steps, and actions between them."""
    if step >= config.train_steps:
        return step, {}
    dataset = inputs.distribute(
        strategy, [storage.path(f) for f in train_files], schema,
        global_batch_size=config.batch_size, training=True, seed=config.seed,
        shuffle_buffer=config.shuffle_buffer, shard_by=config.shard_by)
    iterator = iter(dataset)
    writer = _summary_writer(storage, config.tensorboard_dir, is_chief)
    progress = progress_lib.Progress(config.train_steps, config.batch_size, step)
    loss = float("nan")
    while step < config.train_steps:
        num_steps = min(config.steps_per_loop, config.train_steps - step,
                        *(_until(step, every) for every in
                          (config.eval_every_steps, config.checkpoint_every_steps) if every))
        try:
            loss = float(loops.train(iterator, tf.constant(num_steps)))
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
            # TensorFlow's error names neither file nor record: find them. If the data is
            # fine, the error is not the user's: let it through with its stack trace.
            bad = inputs.find_bad_record(storage, train_files, schema)
            if bad:
                raise inputs.DataError(bad) from None
            raise
        step += num_steps
        if not tf.math.is_finite(loss):
            raise TrainingError(f"loss became {loss} in the loop ending at step {step}; "
                                "lower --learning_rate or check the data for extreme values")
        progress.update(step, loss)
        with writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("examples_per_second", progress.rate * config.batch_size)
        if config.eval_every_steps and step % config.eval_every_steps == 0 \
                and step < config.train_steps:
            metrics = evaluate()
            if metrics:
                logging.info("eval at step %d: %s", step, _fmt(metrics))
                with writer.as_default(step=step):
                    for name, value in metrics.items():
                        tf.summary.scalar(f"eval/{name}", value)
        if config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0:
            ckpt.save(step)
    writer.flush()
    return step, {"train_loss": loss}


def _until(step: int, every: int) -> int:
    """Steps from `step` to the next multiple of `every`."""
    return every - step % every


def _evaluator(config, storage, strategy, schema, loops, eval_files):
    """Returns a function that evaluates on --eval_data, or returns {} without it."""
    if not eval_files:
        return dict
    dataset = inputs.distribute(
        strategy, [storage.path(f) for f in eval_files], schema,
        global_batch_size=config.batch_size, training=False, seed=config.seed,
        shuffle_buffer=config.shuffle_buffer, shard_by=config.shard_by)

    def evaluate() -> dict:
        if config.eval_steps:
            sums = loops.evaluate_steps(iter(dataset), tf.constant(config.eval_steps))
        else:
            sums = loops.evaluate_all(dataset)
        return loops.head.metrics({k: float(v) for k, v in sums.items()})

    return evaluate


def _summary_writer(storage, directory: str, is_chief: bool):
    if not is_chief:
        return tf.summary.create_noop_writer()
    storage.makedirs(directory)
    return tf.summary.create_file_writer(storage.path(directory))


def _export(config, storage, model, schema, head, metrics, is_chief) -> None:
    """Writes the SavedModel and its JSON files; the model_dir appears whole or not at all.

    The chief writes into a sibling folder and renames it into place once complete;
    other workers (who must take part in saving) write to a scratch folder.
    """
    start = time.monotonic()
    if not is_chief:
        scratch = tempfile.mkdtemp(prefix="trainer-export-")
        try:
            export.write_saved_model(model, schema, head, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    partial = f"{config.model_dir}.partial-{uuid.uuid4().hex[:8]}"
    storage.makedirs(partial)
    try:
        export.write_saved_model(model, schema, head, storage.path(partial))
        storage.write_json(storage_lib.join(partial, "schema.json"), schema.to_json())
        storage.write_json(storage_lib.join(partial, "config.json"), config.to_json())
        storage.write_json(storage_lib.join(partial, "metrics.json"), metrics)
        storage.replace_dir(partial, config.model_dir)
    finally:
        storage.remove_tree(partial)
    logging.info("exported the model to %s in %.1fs", config.model_dir,
                 time.monotonic() - start)


def _fmt(metrics: dict) -> str:
    return " ".join(f"{k}={v:.5g}" for k, v in sorted(metrics.items()))
