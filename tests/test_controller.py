"""The outer loop (trainer/train/controller.py) and when its actions are due
(trainer/train/actions.py): inner loops end exactly on each periodic action's step."""

from __future__ import annotations

import math

import pytest

from trainer.train import actions, controller


class Recorder(actions.Action):
    def __init__(self, when: actions.Every, log: list, stop_at: int | None = None):
        self.when, self.log, self.stop_at = when, log, stop_at

    def __call__(self, end: actions.LoopEnd) -> None:
        self.log.append((type(self).__name__, self.when.steps, end.step))
        if end.step == self.stop_at:
            end.stop = True

    def finish(self, step: int) -> None:
        self.log.append(("finish", self.when.steps, step))


def run(actions_, start=0, last=100, per_loop=30):
    loops, before = [], []

    def train(n: int) -> float:
        loops.append(n)
        return 0.5

    step, loss = controller.run(train, start, last, per_loop, 8, actions_, before.append)
    return step, loss, loops, before


def test_inner_loops_end_on_every_due_step_and_at_the_last():
    log: list = []
    every_loop = Recorder(actions.Every(), log)
    every_25 = Recorder(actions.Every(25), log)
    at_last = Recorder(actions.Every(0, last=100), log)
    step, loss, loops, before = run([every_loop, every_25, at_last])
    assert (step, loss) == (100, 0.5)
    # Loops of at most 30 steps, cut at 25, 50, 75 and 100.
    assert loops == [25, 25, 25, 25] and before == [0, 25, 50, 75]
    assert [e for e in log if e[1] == 25 and e[0] != "finish"] == [
        ("Recorder", 25, s) for s in (25, 50, 75, 100)
    ]
    assert ("Recorder", 0, 100) in log and sum(e[1] == 0 and e[0] != "finish" for e in log) == 1
    assert [e for e in log if e[0] == "finish"] == [
        ("finish", None, 100),
        ("finish", 25, 100),
        ("finish", 0, 100),
    ]


def test_an_action_can_stop_training_after_its_loop():
    log: list = []
    step, _, loops, _ = run([Recorder(actions.Every(), log, stop_at=60)])
    assert step == 60 and loops == [30, 30]
    assert log[-1] == ("finish", None, 60)


def test_a_resumed_loop_starts_where_it_stopped_and_keeps_the_period():
    step, _, loops, before = run([Recorder(actions.Every(40), [])], start=70, last=130)
    assert step == 130 and before == [70, 80, 110, 120] and loops == [10, 30, 10, 10]


def test_nothing_to_train_runs_no_loop():
    log: list = []
    step, loss, loops, _ = run([Recorder(actions.Every(), log)], start=100, last=100)
    assert (step, loops, log) == (100, [], [("finish", None, 100)]) and math.isnan(loss)


def test_every_is_due_on_multiples_and_at_its_last_step():
    assert actions.Every().due(7) and actions.Every().steps_until(7) is None
    never = actions.Every(0)
    assert not never.due(100) and never.steps_until(5) is None
    every = actions.Every(40, last=90)
    assert [s for s in range(1, 91) if every.due(s)] == [40, 80, 90]
    assert every.steps_until(70) == 10 and every.steps_until(80) == 40


class FakeCheckpoints:
    def __init__(self):
        self.saved = []

    def save(self, step):
        self.saved.append(step)

    def latest_step(self):
        return self.saved[-1] if self.saved else None


class FakeHistory:
    def __init__(self):
        self.saves = 0

    def save(self):
        self.saves += 1


def test_the_checkpoint_action_saves_at_the_end_unless_it_just_did():
    ckpt, history = FakeCheckpoints(), FakeHistory()
    checkpoint = actions.Checkpoint(ckpt, history, every=50)
    run([checkpoint])
    assert ckpt.saved == [50, 100] and history.saves == 2  # 100 once, not twice
    ckpt, history = FakeCheckpoints(), FakeHistory()
    run([actions.Checkpoint(ckpt, history, every=0)])
    assert ckpt.saved == [100] and history.saves == 1


def test_a_non_finite_loss_names_the_last_good_checkpoint():
    ckpt = FakeCheckpoints()
    ckpt.save(40)
    end = actions.LoopEnd(step=60, steps=20, loss=math.nan, seconds=1.0, global_batch_size=8)
    with pytest.raises(actions.TrainingError, match="up to 60.*checkpoint, step 40, is kept"):
        actions.CheckLoss(ckpt)(end)
    assert end.examples_per_second == 160
