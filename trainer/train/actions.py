"""The outer loop's side effects, each a small action that knows when it is due.

After every inner loop the controller (trainer.train.controller) runs, in order, each
action whose `when` falls on the step reached; the inner loops are cut so that each
periodic action's step is reached exactly. An action reads and writes only what it was
given and the `LoopEnd` it is handed (an action may ask training to stop). Validation
and selection, the largest action, is `trainer.train.validation.Validation`.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

from trainer.train import checkpoints as checkpoints_lib
from trainer.train import history as history_lib
from trainer.train import loops as loops_lib
from trainer.train import preemption
from trainer.train import progress as progress_lib


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says where."""


@dataclasses.dataclass
class LoopEnd:
    """What the outer loop knows after an inner loop."""

    step: int  # global steps trained so far
    steps: int  # steps of this inner loop
    loss: float  # their mean loss
    seconds: float  # their training time, actions excluded
    global_batch_size: int
    stop: bool = False  # set by an action: no more inner loops

    @property
    def examples_per_second(self) -> float:
        return self.steps * self.global_batch_size / max(self.seconds, 1e-9)


@dataclasses.dataclass(frozen=True)
class Every:
    """When an action is due: after every inner loop (`steps` None), on the multiples of
    `steps` (0: never), and at step `last` if given."""

    steps: int | None = None
    last: int | None = None

    def due(self, step: int) -> bool:
        return (
            self.steps is None or step == self.last or (bool(self.steps) and step % self.steps == 0)
        )

    def steps_until(self, step: int) -> int | None:
        """Steps from `step` to the next multiple of `steps` (None: no bound)."""
        return self.steps - step % self.steps if self.steps else None


class Action:
    """A side effect of the outer loop: `__call__` when `when` is due, `finish` once
    after the last inner loop."""

    when = Every()

    def __call__(self, end: LoopEnd) -> None:
        raise NotImplementedError

    def finish(self, step: int) -> None:
        """After the last inner loop (`step` reached)."""


class CheckLoss(Action):
    """A non-finite loss ends the job, naming the last good checkpoint."""

    def __init__(self, ckpt: checkpoints_lib.Checkpoints):
        self.ckpt = ckpt

    def __call__(self, end: LoopEnd) -> None:
        if not math.isfinite(end.loss):
            last = self.ckpt.latest_step()
            raise TrainingError(
                f"loss became {end.loss} in the steps up to {end.step}; lower --learning_rate "
                "or look for extreme values in the data (the last good checkpoint, "
                f"{f'step {last}' if last is not None else 'none'}, is kept)"
            )


class Progress(Action):
    """One log line per inner loop: step, loss, examples/s, time left."""

    def __init__(self, progress: progress_lib.Progress):
        self.progress = progress

    def __call__(self, end: LoopEnd) -> None:
        self.progress.update(end.step, end.loss, end.seconds)


class RecordHistory(Action):
    """The training curve, kept for history.json (saved with each checkpoint)."""

    def __init__(self, history: history_lib.History):
        self.history = history

    def __call__(self, end: LoopEnd) -> None:
        self.history.add_train(end.step, end.loss, end.examples_per_second)


class Summaries(Action):
    """Loss and examples/s to TensorBoard (the chief's writer; a no-op elsewhere)."""

    def __init__(self, writer: tf.summary.SummaryWriter):
        self.writer = writer

    def __call__(self, end: LoopEnd) -> None:
        with self.writer.as_default(step=end.step):
            tf.summary.scalar("loss", end.loss)
            tf.summary.scalar("examples_per_second", end.examples_per_second)

    def finish(self, step: int) -> None:
        self.writer.flush()


class Checkpoint(Action):
    """Checkpoints (with the history) every --checkpoint_every_steps, and at the end
    unless the last loop just saved one."""

    def __init__(self, ckpt: checkpoints_lib.Checkpoints, history: history_lib.History, every: int):
        self.ckpt, self.history = ckpt, history
        self.when = Every(every)
        self.saved: int | None = None

    def save(self, step: int) -> None:
        self.ckpt.save(step)
        self.history.save()
        self.saved = step

    def __call__(self, end: LoopEnd) -> None:
        self.save(end.step)

    def finish(self, step: int) -> None:
        if self.saved != step:
            self.save(step)


class Preemption:
    """Before each inner loop: after SIGTERM (on any worker of a cluster: all must save
    together), checkpoint and raise `preemption.Preempted`."""

    def __init__(
        self,
        stop: preemption.StopRequest,
        loops: loops_lib.Loops,
        checkpoint: Checkpoint,
        in_cluster: bool,
        train_steps: int,
        checkpoint_dir: str,
    ):
        self.stop, self.loops, self.checkpoint = stop, loops, checkpoint
        self.in_cluster, self.train_steps = in_cluster, train_steps
        self.checkpoint_dir = checkpoint_dir

    def __call__(self, step: int) -> None:
        requested = (
            self.loops.any_replica(self.stop.requested) if self.in_cluster else self.stop.requested
        )
        if requested:
            self.checkpoint.save(step)
            raise preemption.Preempted(
                f"stopped by SIGTERM at step {step} of {self.train_steps}; checkpoint "
                f"saved to {self.checkpoint_dir}; run the job again to resume"
            )
