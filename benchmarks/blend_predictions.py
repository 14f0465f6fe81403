"""`trainer.task`, keeping what its blend was weighed on: the selected neural model's and
the trees' validation and test predictions, in the .npz file named by the environment
variable BLEND_PREDICTIONS. `benchmarks.real_data --blend_predictions=DIR` runs its jobs
through this; `benchmarks.blend_rules` replays weight rules on the files.

The job itself is unchanged (the same model, metrics and export): the predictions are
read on the side, after the blend is chosen. `*_trees` are the trees members' blend (what
the last stage weighed against the networks), `*_member_NAME` each member's own scores.
The models' predictions are kept as they give them (regression's standardised), the
labels as the records hold them.
"""

from __future__ import annotations

import os

import numpy as np
from absl import app

from trainer import task
from trainer.train import forest, weighing

_choose_weight, _blend = weighing.choose_weight, forest.blend
_validation: dict = {}


def choose_weight(head, neural, scores, labels, weights, seed=0):
    """The job's own choice, its inputs kept (the last stage's: the networks against the
    trees members' blend)."""
    _validation.update(neural=neural, trees=scores, labels=labels, weights=weights, seed=seed)
    return _choose_weight(head, neural, scores, labels, weights, seed)


def blend(plan, neural, strategy, is_chief):
    """The job's own blend; then the models' test predictions and the trees members'
    own, saved beside the validation ones."""
    blended = _blend(plan, neural, strategy, is_chief)
    head, splits = plan.head, plan.splits
    validation = forest.matrix(plan, splits.validation_files, splits.validation_part, None)[0]
    x, labels, weights = forest.matrix(plan, splits.test_files, None, None)
    kept = {f"validation_{k}": np.asarray(v) for k, v in _validation.items()}
    for name in forest.MEMBERS:
        member = blended.model.get_layer(name)
        kept[f"validation_member_{name}"] = member(validation).numpy()
        kept[f"test_member_{name}"] = member(x).numpy()
    w1 = blended.info["treesWeight"]
    np.savez(
        os.environ["BLEND_PREDICTIONS"],
        **kept,
        test_neural=forest.neural_logits(plan, neural, splits.test_files, None),
        test_trees=weighing.blended(head, *(kept[f"test_member_{n}"] for n in forest.MEMBERS), w1),
        test_labels=labels,
        test_weights=weights,
        task=head.task,
        classes=len(head.classes),
        label_mean=head.label_mean,
        label_std=head.label_std,
        weight=blended.info["neuralWeight"],
        trees_weight=w1,
    )
    return blended


if __name__ == "__main__":
    weighing.choose_weight, forest.blend = choose_weight, blend
    app.run(task.main, flags_parser=task.parse_flags)
