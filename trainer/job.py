"""One training job, top to bottom: data, schema, model, training, evaluation, export.

`run` is the library's entry point; `trainer.task` only turns flags into a Config and
creates the strategy before calling it. Side effects (progress lines, summaries,
checkpoints, preemption, export) happen in the Python outer loop, between compiled
inner loops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import shutil
import tempfile
import time
import uuid

import keras
import tensorflow as tf

from trainer import checkpoints as checkpoints_lib
from trainer import config as config_lib
from trainer import distribution
from trainer import evaluation
from trainer import export
from trainer import heads
from trainer import history as history_lib
from trainer import importance
from trainer import inputs
from trainer import metrics as metrics_lib
from trainer import model as model_lib
from trainer import optimizers
from trainer import preemption
from trainer import profile
from trainer import progress as progress_lib
from trainer import records
from trainer import report
from trainer import schema as schema_lib
from trainer import selection as selection_lib
from trainer import splits as splits_lib
from trainer import storage as storage_lib
from trainer import training
from trainer import validation


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says where."""


# Errors caused by the user's data, flags or environment: reported as one line, exit 2.
USER_ERRORS = (config_lib.ConfigError, storage_lib.StorageError, schema_lib.SchemaError,
               inputs.DataError, distribution.ClusterError, checkpoints_lib.CheckpointError,
               model_lib.ModelFnError, TrainingError)


@dataclasses.dataclass
class Result:
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
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
                                      config.label, config.task, config.weight)
        # The first records only: the start of a job must not read a whole file.
        bad = None if config.skip_corrupt_records else inputs.find_bad_record(
            storage, files[:1], schema, limit=config.schema_sample_records)
        if bad:
            raise inputs.DataError(f"{bad} (with schema {config.schema})")
        return schema
    records = inputs.sample_records(storage, files, config.schema_sample_records,
                                    config.skip_corrupt_records)
    schema = schema_lib.infer(records, config.label, config.task, config.weight)
    logging.info("inferred schema from up to %d records: %d features, label %r%s",
                 config.schema_sample_records, len(schema.features), schema.label.name,
                 f" with classes {list(schema.label.classes)[:10]}" if schema.label.classes else "")
    return schema


def run(config: config_lib.Config, strategy: tf.distribute.Strategy,
        cluster: distribution.Cluster | None = None) -> Result:
    """Trains, evaluates and exports as `config` says, under `strategy`.

    Raises:
      USER_ERRORS: whose message names the culprit.
      preemption.Preempted: after SIGTERM, once a checkpoint is saved.
      distribution.PeerLost: when another task of the cluster died.
    """
    storage = config.storage()
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise config_lib.ConfigError(
            f"--batch_size={config.batch_size} does not divide evenly across {replicas} "
            f"replicas; use a multiple of {replicas}")
    splits = splits_lib.resolve(config, storage)
    if config.skip_corrupt_records:
        for problem in inputs.bad_records(storage, splits.train_files, None):
            logging.warning("skipping the rest of a corrupt file: %s", problem)
    schema = load_schema(config, storage, splits.train_files)
    head = heads.make_head(config.task, schema)
    config = decide_defaults(config, storage, splits, schema)

    keras.utils.set_random_seed(config.effective_seed())
    with strategy.scope():
        model = model_lib.build(schema, head.units, config)
        optimizer = optimizers.make_optimizer(config.learning_rate, config.model,
                                              config.train_steps)
        # Slot variables must exist before the first step is traced under a strategy.
        optimizer.build(model.trainable_variables)
    selection = selection_lib.Selection(model, config.selection_metric,
                                        config.early_stopping_patience
                                        ) if splits.validation_files else None
    ckpt = checkpoints_lib.Checkpoints(
        storage, config.checkpoint_dir, distribution.is_chief(cluster), model=model,
        optimizer=optimizer, **({"selection": selection} if selection else {}))
    job = _Job(config, storage, strategy, cluster, schema, ckpt,
               training.Loops(strategy, model, optimizer, head, config.batch_size,
                              config.run_eagerly),
               history_lib.History(storage, config.checkpoint_dir,
                                   distribution.is_chief(cluster)),
               splits, selection)
    try:
        return job.run()
    except tf.errors.OpError as e:
        peer = distribution.lost_peer(e, cluster) if cluster else None
        if not peer:
            raise
        last = ckpt.latest_step()
        raise distribution.PeerLost(
            f"{peer}; restart every task to resume from "
            f"{f'the checkpoint of step {last}' if last is not None else 'the start'}"
        ) from None
    finally:
        ckpt.close()


def decide_defaults(config: config_lib.Config, storage: storage_lib.Storage,
                    splits: splits_lib.Splits, schema: schema_lib.Schema) -> config_lib.Config:
    """`config` with --train_steps, --hidden_units (of a model whose width follows the
    data), --eval_every_steps and --selection_metric filled in where unset (from the files
    alone, so every worker and every restart decide alike), saying why."""
    sized = (config.hidden_units is None and not config.model_fn
             and config.model in model_lib.SMALL_DATA_HIDDEN_UNITS)
    if config.train_steps is None or sized:
        with naming_bad_records(storage, splits.train_files, schema):
            # The model's width needs to know only whether the data is small.
            n = records.count([storage.path(f) for f in splits.train_files],
                              skip_corrupt=config.skip_corrupt_records,
                              keep=splits.train_part,
                              limit=None if config.train_steps is None
                              else model_lib.SMALL_DATA_RECORDS)
    if config.train_steps is None:
        steps, why = records.steps_for(n, config.batch_size)
        logging.info("training for %s steps (%s)", f"{steps:,}", why)
        config = dataclasses.replace(config, train_steps=steps)
    if sized:
        units, why = model_lib.default_hidden_units(config.model, n)
        logging.info("hidden layers %s (%s)", ",".join(map(str, units)), why)
        config = dataclasses.replace(config, hidden_units=units)
    if config.eval_every_steps is None:
        every, why = selection_lib.eval_every(config.train_steps, config.steps_per_loop)
        if splits.validation_files:
            logging.info("evaluating every %s steps (%s)", f"{every:,}", why)
        config = dataclasses.replace(config, eval_every_steps=every)
    if config.selection_metric is None:
        config = dataclasses.replace(
            config, selection_metric=selection_lib.default_metric(config.task))
    if splits.validation_files:
        metric = config.selection_metric
        logging.info("selecting the model with the %s %s on %s",
                     "lowest" if selection_lib.minimized(metric) else "highest", metric,
                     splits.validation_name)
    return config


@contextlib.contextmanager
def naming_bad_records(storage: storage_lib.Storage, files: list[str],
                       schema: schema_lib.Schema):
    """Turns a read or parse error of the training data into a DataError naming it."""
    try:
        yield
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
        # TensorFlow's error names neither file nor record: find them. If the data
        # is fine, the error is not the user's: let it through as it is.
        bad = inputs.find_bad_record(storage, files, schema)
        if bad:
            raise inputs.DataError(bad) from None
        raise


@dataclasses.dataclass
class _Job:
    config: config_lib.Config
    storage: storage_lib.Storage
    strategy: tf.distribute.Strategy
    cluster: distribution.Cluster | None
    schema: schema_lib.Schema
    ckpt: checkpoints_lib.Checkpoints
    loops: training.Loops
    history: history_lib.History
    splits: splits_lib.Splits
    selection: selection_lib.Selection | None  # None: no validation data

    @property
    def is_chief(self) -> bool:
        return distribution.is_chief(self.cluster)

    def run(self) -> Result:
        config = self.config
        resumed = self.ckpt.restore_latest()
        start_step = int(self.loops.optimizer.iterations.numpy())
        if resumed:
            self.history.restore(start_step)
        finished = start_step >= config.train_steps or (self.selection and
                                                        self.selection.stopped)
        if resumed and finished and self._exported(start_step):
            logging.info("already finished: step %d of %d, model at %s; nothing to do",
                         start_step, config.train_steps, config.model_dir)
            return self._result(self.storage.read_json(self._model_file("metrics.json")))
        if resumed:
            logging.info("resuming at step %d of %d", start_step, config.train_steps)
        validate = self._evaluator(self.splits.validation_files, self.splits.validation_part)
        step, loss = self._train(start_step, validate)
        return self._finish(step, loss, validate)

    def _finish(self, step: int, loss: float, validate) -> Result:
        """Puts the selected model in place, evaluates it and exports it."""
        summary, sums, data = validation.final(
            self.loops, self.splits, self.config, self.selection, validate,
            self._evaluator(self.splits.test_files))
        files = {}
        if sums is not None:
            files["evaluation.json"] = evaluation.evaluate(self.loops.head, self.schema, sums,
                                                           data=data)
            if self.is_chief and self.splits.validation_files:
                files.update(self._on_a_sample(step))
        metrics = {**(metrics_lib.finish(self.loops.head, sums) if sums is not None else {}),
                   **summary, "train_loss": loss, "step": step}
        files[history_lib.FILE] = self.history.to_json()
        logging.info("final metrics: %s%s", validation.fmt(metrics),
                     f" (on the {summary['data']['metrics']} data)" if sums is not None else "")
        self._export(metrics, files)
        return self._result(metrics)

    def _result(self, metrics: dict) -> Result:
        return Result(model=self.loops.model, optimizer=self.loops.optimizer,
                      schema=self.schema, head=self.loops.head, metrics=metrics,
                      step=int(metrics["step"]))

    def _train(self, step, validate) -> tuple[int, float]:
        """The outer loop: inner loops of `steps_per_loop` steps, and actions between."""
        config, storage, files = self.config, self.storage, self.splits.train_files
        if step >= config.train_steps or (self.selection and self.selection.stopped):
            # Trained already (stopped before its export): the last loop's loss.
            return step, self.history.train[-1]["loss"] if self.history.train else math.nan
        size = sum(storage.size(f) for f in files)
        if not size:  # a stream of empty epochs would never end
            raise inputs.DataError(f"the training files of {config.train_data!r} are empty")
        cache, why = records.choose_cache(config.cache, size)
        logging.info("training records from %s (%s)", cache, why)
        with naming_bad_records(storage, files, self.schema):
            dataset = inputs.distribute(
                self.strategy, [storage.path(f) for f in files], self.schema,
                global_batch_size=config.batch_size, training=True,
                seed=config.effective_seed(), shuffle_buffer=config.shuffle_buffer,
                shard_by=config.shard_by, start_step=step, cache=cache,
                skip_corrupt=config.skip_corrupt_records, keep=self.splits.train_part)
        iterator = iter(dataset)
        if self.strategy.num_replicas_in_sync > 1 and not config.run_eagerly:
            per_step, per_loop = self.loops.collectives_per_step(
                iterator, min(config.steps_per_loop, config.train_steps - step))
            logging.info("the compiled loop waits on %g collective(s) per step and %g per "
                         "loop of %d steps", per_step, per_loop, config.steps_per_loop)
        writer = self._writer
        validating = validation.Validation(validate, self.loops, self.selection, self.history,
                                           writer, config.eval_every_steps,
                                           config.train_steps) if self.selection else None
        progress = progress_lib.Progress(config.train_steps, config.batch_size, step)
        loss, saved = math.nan, None
        with preemption.StopRequest() as stop:
            while step < config.train_steps:
                self._stop_if_requested(stop, step)
                num_steps = min(config.steps_per_loop, config.train_steps - step,
                                *(_until(step, every) for every in
                                  (config.eval_every_steps, config.checkpoint_every_steps)
                                  if every))
                started = time.monotonic()
                with naming_bad_records(storage, files, self.schema):
                    loss = float(self.loops.train(iterator, tf.constant(num_steps)))
                train_seconds = time.monotonic() - started
                step += num_steps
                if not tf.math.is_finite(loss):
                    last = self.ckpt.latest_step()
                    raise TrainingError(
                        f"loss became {loss} in the steps up to {step}; lower --learning_rate "
                        "or look for extreme values in the data (the last good checkpoint, "
                        f"{f'step {last}' if last is not None else 'none'}, is kept)")
                progress.update(step, loss, train_seconds)
                self.history.add_train(step, loss, progress.rate * config.batch_size)
                with writer.as_default(step=step):
                    tf.summary.scalar("loss", loss)
                    tf.summary.scalar("examples_per_second", progress.rate * config.batch_size)
                stopped = bool(validating and validating.due(step) and validating(step))
                if _due(step, config.checkpoint_every_steps):
                    self._checkpoint(step)
                    saved = step
                if stopped:
                    break  # early: `patience` evaluations without a better model
        if saved != step:
            self._checkpoint(step)  # the end, unless the loop just saved it
        writer.flush()
        return step, loss

    def _checkpoint(self, step: int) -> None:
        self.ckpt.save(step)
        self.history.save()

    def _stop_if_requested(self, stop: preemption.StopRequest, step: int) -> None:
        # In a cluster, SIGTERM may reach one worker only; all must save together.
        requested = (self.loops.any_replica(stop.requested) if self.cluster
                     else stop.requested)
        if requested:
            self._checkpoint(step)
            raise preemption.Preempted(
                f"stopped by SIGTERM at step {step} of {self.config.train_steps}; checkpoint "
                f"saved to {self.config.checkpoint_dir}; run the job again to resume")

    def _evaluator(self, files: list[str], part: splits_lib.Part | None = None):
        return validation.evaluator(self.loops, [self.storage.path(f) for f in files],
                                    self.schema, self.config, part)

    def _on_a_sample(self, step: int) -> dict:
        """What the chief measures on a sample of the validation data: feature importance
        (also written to TensorBoard) and the data's profile (profile.py)."""
        start = time.monotonic()
        splits = self.splits
        sample = [r for _, r in inputs.sample_records(
            self.storage, splits.validation_files, importance.SAMPLE,
            self.config.skip_corrupt_records, keep=splits.validation_part)]
        found = importance.permutation_importance(
            self.loops.model, self.loops.head, self.schema, sample, splits.validation_name)
        data = profile.profile(self.loops.model, self.loops.head, self.schema, sample,
                               splits.validation_name)
        logging.info("feature importance (loss increase when shuffled, %d records, %.1fs): "
                     "%s", len(sample), time.monotonic() - start,
                     " ".join(f"{r['name']}={r['importance']:.4g}"
                              for r in found["features"][:10]))
        with self._writer.as_default(step=step):
            for row in found["features"]:
                tf.summary.scalar(f"importance/{row['name']}", row["importance"])
        self._writer.flush()
        return {"feature_importance.json": found, "profile.json": data}

    @functools.cached_property
    def _writer(self):
        """The run's one TensorBoard writer (the chief's; a no-op elsewhere)."""
        if not self.is_chief:
            return tf.summary.create_noop_writer()
        self.storage.makedirs(self.config.tensorboard_dir)
        return tf.summary.create_file_writer(self.storage.path(self.config.tensorboard_dir))

    def _model_file(self, name: str) -> str:
        return storage_lib.join(self.config.model_dir, name)

    def _exported(self, step: int) -> bool:
        """Whether model_dir holds the export of the checkpoint at `step`."""
        if not self.storage.exists(self._model_file("saved_model.pb")):
            return False
        metrics = self._model_file("metrics.json")
        return self.storage.exists(metrics) and self.storage.read_json(metrics).get("step") == step

    def _export(self, metrics: dict, files: dict) -> None:
        """Writes the SavedModel, its JSON files and `files` (name -> JSON); model_dir
        appears whole or not at all.

        The chief writes into a sibling folder and renames it into place once complete;
        other workers (who must take part in saving) write to a scratch folder.
        """
        config, storage, model = self.config, self.storage, self.loops.model
        start = time.monotonic()
        if not self.is_chief:
            scratch = tempfile.mkdtemp(prefix="trainer-export-")
            try:
                export.write_saved_model(model, self.schema, self.loops.head, scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return
        parent, name = config.model_dir.rsplit("/", 1) if "/" in config.model_dir else (
            ".", config.model_dir)
        storage.makedirs(parent)
        for stale in storage.listdir(parent):  # left by an export that crashed
            if stale.startswith(f"{name}.partial-"):
                storage.remove_tree(storage_lib.join(parent, stale))
        partial = f"{config.model_dir}.partial-{uuid.uuid4().hex[:8]}"
        logging.info("exporting the model to %s", config.model_dir)
        try:
            export.write_saved_model(model, self.schema, self.loops.head,
                                     storage.path(partial))
            storage.write_json(storage_lib.join(partial, "schema.json"), self.schema.to_json())
            storage.write_json(storage_lib.join(partial, "config.json"), config.to_json())
            storage.write_json(storage_lib.join(partial, "metrics.json"), metrics)
            for name, content in files.items():
                storage.write_json(storage_lib.join(partial, name), content)
            report.write(storage, partial)
            storage.replace_dir(partial, config.model_dir)
        finally:
            storage.remove_tree(partial)
        logging.info("exported the model to %s in %.1fs", config.model_dir,
                     time.monotonic() - start)


def _due(step: int, every: int) -> bool:
    """Whether a periodic action (every `every` steps, 0: never) falls on `step`."""
    return bool(every) and step % every == 0


def _until(step: int, every: int) -> int:
    """Steps from `step` to the next multiple of `every`."""
    return every - step % every
