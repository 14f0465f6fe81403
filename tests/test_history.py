"""history.json: the curves, and the job's times: `seconds` to the export,
`training_seconds` to the final model, both counted over restarts."""

from __future__ import annotations

import json
import os

import pytest

from trainer.base import storage as storage_lib
from trainer.train import history as history_lib


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(history_lib.time, "monotonic", clock)
    return clock


def test_training_time_ends_where_the_final_model_is_in_place(tmp_path, clock):
    history = history_lib.History(storage_lib.Storage(), str(tmp_path), is_chief=True)
    clock.now += 4.0
    assert history.to_json()["seconds"] == 4.0
    assert "training_seconds" not in history.to_json()  # still training
    clock.now += 1.5
    history.trained()
    clock.now += 3.0  # final evaluations, importance, export
    saved = history.to_json()
    assert (saved["training_seconds"], saved["seconds"]) == (5.5, 8.5)


def test_a_restarted_job_counts_the_time_before_its_restart(tmp_path, clock):
    storage = storage_lib.Storage()
    first = history_lib.History(storage, str(tmp_path), is_chief=True)
    first.add_train(10, 0.5, 1000.0)
    clock.now += 7.0
    first.save()  # with the checkpoint of step 10; then the job is killed
    clock.now += 60.0  # the restart's wait: not the job's
    second = history_lib.History(storage, str(tmp_path), is_chief=True)
    second.restore(10)
    clock.now += 2.0
    second.trained()
    clock.now += 1.0
    saved = second.to_json()
    assert saved["train"] == [{"step": 10, "loss": 0.5, "examples_per_second": 1000.0}]
    assert (saved["training_seconds"], saved["seconds"]) == (9.0, 10.0)


def test_the_job_s_history_has_its_training_time_within_its_time(exported):
    with open(os.path.join(exported["regression"], "history.json")) as f:
        saved = json.load(f)
    assert 0 < saved["training_seconds"] < saved["seconds"]
    with open(os.path.join(exported["regression"], "report.html")) as f:
        assert f"trained for {saved['training_seconds']:.0f} s" in f.read()
