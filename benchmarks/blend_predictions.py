"""`trainer.task`, keeping what its blend was weighed on: the selected neural model's and
the trees' validation and test predictions, in the .npz file named by the environment
variable BLEND_PREDICTIONS. `benchmarks.real_data --blend_predictions=DIR` runs its jobs
through this; `benchmarks.blend_rules` replays weight rules on the files.

The job itself is unchanged (the same model, metrics and export): the predictions are
read on the side, after the blend is chosen. The models' predictions are kept as they
give them (regression's standardised), the labels as the records hold them.
"""

from __future__ import annotations

import os

import numpy as np
from absl import app

from trainer import task
from trainer.train import forest

_choose_weight, _blend = forest.choose_weight, forest.blend
_validation: dict = {}


def choose_weight(head, neural, scores, labels, weights, seed=0):
    """The job's own choice, its inputs kept."""
    _validation.update(neural=neural, trees=scores, labels=labels, weights=weights, seed=seed)
    return _choose_weight(head, neural, scores, labels, weights, seed)


def blend(plan, neural, strategy, is_chief):
    """The job's own blend; then the two models' test predictions, saved beside the
    validation ones."""
    blended = _blend(plan, neural, strategy, is_chief)
    x, labels, weights = forest.matrix(plan, plan.splits.test_files, None, None)
    head = plan.head
    np.savez(
        os.environ["BLEND_PREDICTIONS"],
        **{f"validation_{k}": np.asarray(v) for k, v in _validation.items()},
        test_neural=forest.neural_logits(plan, neural, plan.splits.test_files, None),
        test_trees=blended.model.get_layer("trees")(x).numpy(),
        test_labels=labels,
        test_weights=weights,
        task=head.task,
        classes=len(head.classes),
        label_mean=head.label_mean,
        label_std=head.label_std,
        weight=blended.info["neuralWeight"],
    )
    return blended


if __name__ == "__main__":
    forest.choose_weight, forest.blend = choose_weight, blend
    app.run(task.main, flags_parser=task.parse_flags)
