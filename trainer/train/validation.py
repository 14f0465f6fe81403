"""Evaluation during and after training: over the validation data between inner loops
(an action of the outer loop: log, record, offer the model for selection, maybe stop),
and at the end over the selected model, whose figures `metrics.json` reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import tensorflow as tf

from trainer.base import contracts
from trainer.data import inputs
from trainer.data import splits as splits_lib
from trainer.evaluate import metrics as metrics_lib
from trainer.plan import plan as plan_lib
from trainer.train import actions
from trainer.train import history as history_lib
from trainer.train import loops as loops_lib
from trainer.train import selection as selection_lib

Evaluate = Callable[[], "dict | None"]


def evaluator(
    loops: loops_lib.Loops,
    paths: list[str],
    plan: plan_lib.Plan,
    part: splits_lib.Part | None = None,
) -> Evaluate:
    """A function that evaluates the model on the records of `paths` that `part` keeps
    and returns the summed `metrics.batch_sums` (as numpy); None without paths."""
    if not paths:
        return lambda: None
    dataset = inputs.distribute(
        loops.strategy,
        paths,
        plan.schema,
        global_batch_size=plan.batch_size,
        training=False,
        seed=0,
        shuffle_buffer=plan.shuffle_buffer,
        shard_by=plan.shard_by,
        skip_corrupt=plan.skip_corrupt_records,
        repeat=bool(plan.eval_steps),
        keep=part,
    )

    def evaluate() -> dict:
        if plan.eval_steps:
            sums = loops.evaluate_steps(iter(dataset), tf.constant(plan.eval_steps))
        else:
            sums = loops.evaluate_all(dataset)
        return {k: v.numpy() for k, v in sums.items()}

    return evaluate


class Validation(actions.Action):
    """The outer loop's validation action: every `every` steps and at step `last`,
    evaluates the model, logs and records it, offers it for selection, and stops training
    after `patience` evaluations in a row worse than the best (selection.MARGIN)."""

    def __init__(
        self,
        evaluate: Evaluate,
        loops: loops_lib.Loops,
        selection: selection_lib.Selection,
        history: history_lib.History,
        writer: tf.summary.SummaryWriter,
        every: int,
        last: int,
    ):
        self.evaluate, self.loops, self.selection = evaluate, loops, selection
        self.history, self.writer = history, writer
        self.when = actions.Every(every, last)

    def __call__(self, end: actions.LoopEnd) -> None:
        step = end.step
        sums = self.evaluate()
        assert sums is not None  # validation data exists, or no Validation is made
        metrics = metrics_lib.finish(self.loops.head, sums)
        better = self.selection.consider(step, metrics)
        logging.info(
            "validation at step %d: %s%s", step, fmt(metrics), " (best so far)" if better else ""
        )
        self.history.add_eval(step, metrics)
        with self.writer.as_default(step=step):
            for name, value in metrics.items():
                tf.summary.scalar(f"eval/{name}", value)
        selection = self.selection
        if selection.stopped:
            logging.info(
                "stopping early at step %d: %s worse than the best by more than %g%% "
                "in %d evaluations in a row (the best, %.5g, at step %d)",
                step,
                selection.metric,
                100 * selection_lib.MARGIN,
                selection.patience,
                selection.best_value,
                selection.selected_step,
            )
            end.stop = True


def final(
    loops: loops_lib.Loops,
    plan: plan_lib.Plan,
    selection: selection_lib.Selection | None,
    selected: int | None,
    validate: Evaluate,
    test: Evaluate,
) -> tuple[dict, dict | None, str | None]:
    """Evaluates the final model (the one selected at step `selected`, in place already,
    perhaps blended with trees) once more: on validation data, then on test data.

    Returns:
      (what metrics.json says besides the summary figures: `validation`, `test`,
      `selection`, `data`; the sums of the data the summary figures come from, None
      without any; that data's name).
    """
    head, splits = loops.head, plan.splits
    out: dict = {
        "data": {
            "training": splits.train_part.describe(plan.train_data)
            if splits.train_part
            else plan.train_data
        }
    }
    sums, data = None, None
    if selection:
        sums, data = validate(), splits.validation_name
        assert sums is not None  # a selection has validation data
        out["validation"] = metrics_lib.finish(head, sums)
        out["data"]["validation"] = data
        out["selection"] = {
            "metric": selection.metric,
            "step": selected,
            "value": selection.best_value if selected is not None else None,
            "goal": "minimize" if contracts.minimized(selection.metric) else "maximize",
            "stoppedEarly": selection.stopped,
        }
        logging.info(
            "the final model: step %s%s (%s=%.5g on validation)",
            selected,
            " blended with trees" if plan.trees else "",
            selection.metric,
            out["validation"][selection.metric],
        )
    test_sums = test()
    if test_sums is not None:
        sums, data = test_sums, plan.test_data
        out["test"] = metrics_lib.finish(head, sums)
        out["data"]["test"] = data
    if sums is not None:
        out["data"]["metrics"] = "test" if test_sums is not None else "validation"
    return out, sums, data


def fmt(metrics: dict) -> str:
    """The numbers of `metrics` as one log line's `name=value` pairs."""
    return " ".join(
        f"{k}={v:.5g}" for k, v in sorted(metrics.items()) if isinstance(v, (int, float))
    )
