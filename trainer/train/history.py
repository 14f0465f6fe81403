"""The run's curves: training loss per inner loop and evaluation metrics per evaluation,
kept beside the checkpoints (so a resumed job keeps its past) and exported as
model_dir/history.json (what trainer.report draws), with the job's times: `seconds`,
from the model's construction to the export (evaluations, importance and profile
included), and `training_seconds`, to the final model (networks trained and selected,
trees fitted and blended): what a library's fit time compares with."""

from __future__ import annotations

import time

from trainer.base import contracts
from trainer.base import storage as storage_lib


class History:
    """Appended to by the outer loop; saved with each checkpoint by the chief."""

    def __init__(self, storage: storage_lib.Storage, checkpoint_dir: str, is_chief: bool) -> None:
        self.storage, self.is_chief = storage, is_chief
        self.path = storage_lib.join(checkpoint_dir, contracts.HISTORY_FILE)
        self.train: list[dict] = []
        self.eval: list[dict] = []
        self.seconds = 0.0  # the job's time before this process, from the checkpoints
        self._start = time.monotonic()
        self._trained: float | None = None  # when the final model was in place

    def restore(self, step: int) -> None:
        """Keeps what was recorded up to `step` (the checkpoint resumed from)."""
        if not self.storage.exists(self.path):
            return
        saved = self.storage.read_json(self.path)
        self.train = [e for e in saved.get("train", []) if e["step"] <= step]
        self.eval = [e for e in saved.get("eval", []) if e["step"] <= step]
        self.seconds = float(saved.get("seconds", 0.0))

    def add_train(self, step: int, loss: float, examples_per_second: float) -> None:
        self.train.append({"step": step, "loss": loss, "examples_per_second": examples_per_second})

    def add_eval(self, step: int, metrics: dict) -> None:
        self.eval = [e for e in self.eval if e["step"] != step] + [{"step": step, **metrics}]

    def trained(self) -> None:
        """Marks the end of training: the final model is in place."""
        self._trained = time.monotonic()

    def save(self) -> None:
        if self.is_chief:
            self.storage.write_json(self.path, self.to_json())

    def to_json(self) -> dict:
        out = {
            "train": self.train,
            "eval": self.eval,
            "seconds": round(self.seconds + time.monotonic() - self._start, 3),
        }
        if self._trained is not None:
            out["training_seconds"] = round(self.seconds + self._trained - self._start, 3)
        return out
