"""The outer loop: compiled inner loops up to the next step an action is due at, and the
actions between them (trainer.train.actions), until the last step or an action's stop."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

from trainer.train import actions as actions_lib


def run(
    train: Callable[[int], float],
    step: int,
    last: int,
    steps_per_loop: int,
    global_batch_size: int,
    actions: Sequence[actions_lib.Action],
    before_loop: Callable[[int], None],
) -> tuple[int, float]:
    """Trains from `step` to `last`.

    Args:
      train: runs that many steps (one inner loop) and returns their mean loss.
      actions: run in order after each inner loop when due; `finish`ed at the end.
      before_loop: called with the step before each inner loop (preemption).

    Returns:
      (the step reached, the last inner loop's mean loss).
    """
    loss = math.nan
    while step < last:
        before_loop(step)
        num_steps = min(
            steps_per_loop,
            last - step,
            *(n for n in (a.when.steps_until(step) for a in actions) if n),
        )
        started = time.monotonic()
        loss = train(num_steps)
        step += num_steps
        end = actions_lib.LoopEnd(
            step, num_steps, loss, time.monotonic() - started, global_batch_size
        )
        for action in actions:
            if action.when.due(step):
                action(end)
        if end.stop:
            break
    for action in actions:
        action.finish(step)
    return step, loss
