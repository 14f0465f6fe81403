"""One training job, top to bottom, from its plan: model, training, evaluation, export.

`run` is the library's entry point; `trainer.task` turns flags into a Config, creates
the strategy and makes the plan (trainer.plan) before calling it. Side effects between
the compiled inner loops are the actions of trainer.train.actions, run by
trainer.train.controller.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time

import keras
import tensorflow as tf

from trainer.base import config as config_lib
from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.data import inputs, scan
from trainer.data import schema as schema_lib
from trainer.evaluate import evaluation, importance, profile
from trainer.evaluate import metrics as metrics_lib
from trainer.model import heads, optimizers, precision
from trainer.model import tabular as model_lib
from trainer.plan import plan as plan_lib
from trainer.train import actions as actions_lib
from trainer.train import checkpoints as checkpoints_lib
from trainer.train import controller, distribution, forest, model_dir, preemption, validation
from trainer.train import history as history_lib
from trainer.train import loops as loops_lib
from trainer.train import progress as progress_lib
from trainer.train import selection as selection_lib

# Errors caused by the user's data, flags or environment: reported as one line, exit 2.
USER_ERRORS = (
    config_lib.ConfigError,
    storage_lib.StorageError,
    schema_lib.SchemaError,
    inputs.DataError,
    distribution.ClusterError,
    checkpoints_lib.CheckpointError,
    model_lib.ModelFnError,
    actions_lib.TrainingError,
)


@dataclasses.dataclass
class Result:
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    schema: schema_lib.Schema
    head: heads.Head
    metrics: dict
    step: int


def run(
    plan: plan_lib.Plan,
    strategy: tf.distribute.Strategy,
    cluster: distribution.Cluster | None = None,
) -> Result:
    """Trains, evaluates and exports as `plan` says, under `strategy`.

    Raises:
      USER_ERRORS: whose message names the culprit.
      preemption.Preempted: after SIGTERM, once a checkpoint is saved.
      distribution.PeerLost: when another task of the cluster died.
    """
    logging.info("plan:\n%s", plan.table())
    keras.utils.set_random_seed(plan.seed)
    with strategy.scope():
        model = model_lib.build(plan.schema, plan.head.units, plan)
        optimizer = optimizers.make_optimizer(plan.learning_rate, plan.model, plan.train_steps)
        # Slot variables must exist before the first step is traced under a strategy.
        optimizer.build(model.trainable_variables)
    selection = (
        selection_lib.Selection(model, plan.selection_metric, plan.early_stopping_patience)
        if plan.splits.validation_files
        else None
    )
    is_chief = distribution.is_chief(cluster)
    storage = plan.storage
    ckpt = checkpoints_lib.Checkpoints(
        storage,
        plan.checkpoint_dir,
        is_chief,
        alone=cluster is None or len(cluster.training_tasks) == 1,
        model=model,
        optimizer=optimizer,
        **({"selection": selection} if selection else {}),
    )
    if is_chief:  # a restart reuses what it counted (plan.make_plan)
        storage.write_json(plan_lib.previous_path(plan.config), plan.to_json())
    job = _Job(
        plan,
        storage,
        strategy,
        cluster,
        ckpt,
        loops_lib.Loops(strategy, model, optimizer, plan.head, plan.batch_size, plan.run_eagerly),
        history_lib.History(storage, plan.checkpoint_dir, is_chief),
        selection,
    )
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


@dataclasses.dataclass
class _Job:
    plan: plan_lib.Plan
    storage: storage_lib.Storage
    strategy: tf.distribute.Strategy
    cluster: distribution.Cluster | None
    ckpt: checkpoints_lib.Checkpoints
    loops: loops_lib.Loops
    history: history_lib.History
    selection: selection_lib.Selection | None  # None: no validation data

    @property
    def is_chief(self) -> bool:
        return distribution.is_chief(self.cluster)

    def run(self) -> Result:
        plan = self.plan
        resumed = self.ckpt.restore_latest()
        start_step = int(self.loops.optimizer.iterations.numpy())
        if resumed:
            self.history.restore(start_step)
        finished = start_step >= plan.train_steps or (self.selection and self.selection.stopped)
        exported = model_dir.exported_step(self.storage, plan.model_dir) if resumed else None
        if finished and exported == start_step:
            logging.info(
                "already finished: step %d of %d, model at %s; nothing to do",
                start_step,
                plan.train_steps,
                plan.model_dir,
            )
            metrics = storage_lib.join(plan.model_dir, contracts.METRICS_FILE)
            return self._result(self.storage.read_json(metrics))
        if resumed:
            logging.info("resuming at step %d of %d", start_step, plan.train_steps)
        validate = self._evaluator(plan.splits.validation_files, plan.splits.validation_part)
        step, loss = self._train(start_step, validate)
        return self._finish(step, loss, validate)

    def _train(self, step: int, validate: validation.Evaluate) -> tuple[int, float]:
        """Inner loops of `steps_per_loop` steps, and the actions between them."""
        plan, storage, files = self.plan, self.storage, self.plan.splits.train_files
        if step >= plan.train_steps or (self.selection and self.selection.stopped):
            # Trained already (stopped before its export): the last loop's loss.
            return step, self.history.train[-1]["loss"] if self.history.train else math.nan
        iterator = self._training_iterator(step)

        def train(num_steps: int) -> float:
            with scan.naming_bad_records(storage, files, plan.schema):
                return float(self.loops.train(iterator, tf.constant(num_steps)))

        checkpoint = actions_lib.Checkpoint(self.ckpt, self.history, plan.checkpoint_every_steps)
        with preemption.StopRequest() as stop:
            return controller.run(
                train,
                step,
                plan.train_steps,
                plan.steps_per_loop,
                plan.batch_size,
                self._actions(step, validate, checkpoint),
                actions_lib.Preemption(
                    stop,
                    self.loops,
                    checkpoint,
                    bool(self.cluster),
                    plan.train_steps,
                    plan.checkpoint_dir,
                ),
            )

    def _training_iterator(self, step: int):
        """The training stream from `step` on; logs the collectives of a compiled step."""
        plan, storage, files = self.plan, self.storage, self.plan.splits.train_files
        with scan.naming_bad_records(storage, files, plan.schema):
            dataset = inputs.distribute(
                self.strategy,
                [storage.path(f) for f in files],
                plan.schema,
                global_batch_size=plan.batch_size,
                training=True,
                seed=plan.seed,
                shuffle_buffer=plan.shuffle_buffer,
                shard_by=plan.shard_by,
                start_step=step,
                cache=plan.cache,
                records=plan.records_of_stream(),
                skip_corrupt=plan.skip_corrupt_records,
                keep=plan.splits.train_part,
            )
        iterator = iter(dataset)
        if self.strategy.num_replicas_in_sync > 1 and not plan.run_eagerly:
            per_step, per_loop = self.loops.collectives_per_step(
                iterator, min(plan.steps_per_loop, plan.train_steps - step)
            )
            logging.info(
                "the compiled loop waits on %g collective(s) per step and %g per loop of %d steps",
                per_step,
                per_loop,
                plan.steps_per_loop,
            )
        return iterator

    def _actions(
        self, step: int, validate: validation.Evaluate, checkpoint: actions_lib.Checkpoint
    ) -> list[actions_lib.Action]:
        """The outer loop's actions, in the order they run after an inner loop."""
        plan = self.plan
        progress = progress_lib.Progress(plan.train_steps, plan.batch_size, step)
        actions: list[actions_lib.Action] = [
            actions_lib.CheckLoss(self.ckpt),
            actions_lib.Progress(progress),
            actions_lib.RecordHistory(self.history),
            actions_lib.Summaries(self._writer),
        ]
        if self.selection:
            actions.append(
                validation.Validation(
                    validate,
                    self.loops,
                    self.selection,
                    self.history,
                    self._writer,
                    plan.eval_every_steps,
                    plan.train_steps,
                )
            )
        return [*actions, checkpoint]

    def _finish(self, step: int, loss: float, validate: validation.Evaluate) -> Result:
        """Puts the selected model in place, evaluates it and exports it."""
        plan = self.plan
        selected = self.selection.restore_best() if self.selection else None
        if plan.precision != "float32":  # from here on float32: what is exported
            with self.strategy.scope():
                model = precision.float32_copy(
                    self.loops.model,
                    lambda config: model_lib.build(plan.schema, plan.head.units, config),
                    plan,
                )
            self.loops = self.loops.with_model(model)
            validate = self._evaluator(plan.splits.validation_files, plan.splits.validation_part)
        blended = None
        if plan.trees:  # from here on, the job's model is the blend
            blended = forest.blend(plan, self.loops.model, self.strategy, self.is_chief)
            self.loops = self.loops.with_model(blended.model)
            validate = self._evaluator(plan.splits.validation_files, plan.splits.validation_part)
        self.history.trained()
        summary, sums, data = validation.final(
            self.loops,
            plan,
            self.selection,
            selected,
            validate,
            self._evaluator(plan.splits.test_files),
        )
        if blended:
            summary["blend"] = blended.info
        files: dict[str, dict | str] = {}
        if sums is not None:
            assert data is not None  # the name of the data summed
            files[contracts.EVALUATION_FILE] = evaluation.evaluate(
                self.loops.head, plan.schema, sums, data=data
            )
            if self.is_chief and plan.splits.validation_files:
                files.update(self._on_a_sample(step))
        metrics = {
            **(metrics_lib.finish(self.loops.head, sums) if sums is not None else {}),
            **summary,
            "train_loss": loss,
            "step": step,
        }
        files[contracts.HISTORY_FILE] = self.history.to_json()
        if blended:
            files.update(blended.trees)
        files[contracts.PLAN_FILE] = plan.to_json()
        logging.info(
            "final metrics: %s%s",
            validation.fmt(metrics),
            f" (on the {summary['data']['metrics']} data)" if sums is not None else "",
        )
        model_dir.write(
            plan,
            self.loops.model,
            self.loops.head,
            metrics,
            files,
            self.is_chief,
            attempts=self.ckpt.attempts,
        )
        return self._result(metrics)

    def _result(self, metrics: dict) -> Result:
        return Result(
            model=self.loops.model,
            optimizer=self.loops.optimizer,
            schema=self.plan.schema,
            head=self.loops.head,
            metrics=metrics,
            step=int(metrics["step"]),
        )

    def _evaluator(self, files: list[str], part=None) -> validation.Evaluate:
        return validation.evaluator(
            self.loops, [self.storage.path(f) for f in files], self.plan, part
        )

    def _on_a_sample(self, step: int) -> dict:
        """What the chief measures on a sample of the validation data: feature importance
        (also written to TensorBoard) and the data's profile (profile.py)."""
        start = time.monotonic()
        plan, splits = self.plan, self.plan.splits
        sample = [
            r
            for _, r in scan.sample_records(
                self.storage,
                splits.validation_files,
                importance.SAMPLE,
                plan.skip_corrupt_records,
                keep=splits.validation_part,
            )
        ]
        found = importance.permutation_importance(
            self.loops.model, self.loops.head, plan.schema, sample, splits.validation_name
        )
        data = profile.profile(
            self.loops.model, self.loops.head, plan.schema, sample, splits.validation_name
        )
        logging.info(
            "feature importance (loss increase when shuffled, %d records, %.1fs): %s",
            len(sample),
            time.monotonic() - start,
            " ".join(f"{r['name']}={r['importance']:.4g}" for r in found["features"][:10]),
        )
        with self._writer.as_default(step=step):
            for row in found["features"]:
                tf.summary.scalar(f"importance/{row['name']}", row["importance"])
        self._writer.flush()
        return {contracts.IMPORTANCE_FILE: found, contracts.PROFILE_FILE: data}

    @functools.cached_property
    def _writer(self) -> tf.summary.SummaryWriter:
        """The run's one TensorBoard writer (the chief's; a no-op elsewhere)."""
        if not self.is_chief:
            return tf.summary.create_noop_writer()
        self.storage.makedirs(self.plan.tensorboard_dir)
        return tf.summary.create_file_writer(self.storage.path(self.plan.tensorboard_dir))
