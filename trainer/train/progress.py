"""Progress lines for the outer loop: step, loss, examples/s, and time left."""

from __future__ import annotations

import logging
import time


def format_duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Logs one line per inner loop. examples/s is the training steps' own rate (the
    actions between loops, such as validation, would otherwise dilute it by the
    evaluation's size); time left is estimated from the wall time per step since the
    first loop, actions included: not from the first loop (its tracing would skew the
    estimate for the rest of the run), nor from the latest alone (a loop after a
    validation would predict a validation after every loop)."""

    def __init__(
        self,
        total_steps: int,
        global_batch_size: int,
        start_step: int = 0,
        clock=time.monotonic,
        log=logging.info,
    ):
        self.total_steps = total_steps
        self.global_batch_size = global_batch_size
        self.step = start_step
        self.clock = clock
        self.log = log
        self.last_time = clock()
        self.rate: float | None = None  # training steps per second of the latest loop
        self.since: tuple[int, float] | None = None  # (step, time) at the first loop's end

    def update(self, step: int, loss: float, train_seconds: float | None = None) -> str:
        """Records that training reached `step` with mean `loss` over the last loop, whose
        steps took `train_seconds` (default: all the time since the last update)."""
        now = self.clock()
        steps, seconds = step - self.step, max(now - self.last_time, 1e-9)
        self.rate = steps / max(train_seconds or seconds, 1e-9)
        self.step, self.last_time = step, now
        if self.since:
            steps, seconds = step - self.since[0], now - self.since[1]
        else:
            self.since = (step, now)
        left = (self.total_steps - step) * seconds / steps if steps else 0.0
        line = (
            f"step {step}/{self.total_steps} loss={loss:.5g} "
            f"examples/s={self.rate * self.global_batch_size:,.0f} "
            f"time_left={format_duration(left)}"
        )
        self.log(line)
        return line
