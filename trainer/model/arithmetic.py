"""The order of a model's arithmetic in graphs: the same as eager's, in every process of
the package (the job's loops, `trainer.serve`, `trainer.predict`).

Grappler rewrites a graph before it runs; two of its passes change the arithmetic, not
only its speed: `arithmetic_optimization` regroups sums and products, `constant_folding`
precomputes parts of them. With them on, a compiled step differed from the same step run
eagerly by ~5e-7 after one step, and on the large-data default (256x3, 4 members, rate
2e-3) Adam and the ReLUs grew that to 2.9e-3 in 20 steps; with them off the two give the
very same bits, and `trainer.serve` answers as `trainer.predict` does, bit for bit
(tests/test_serve.py; docs/decisions.md).
"""

from __future__ import annotations

import tensorflow as tf

ARITHMETIC_CHANGING_PASSES = ("arithmetic_optimization", "constant_folding")


def compile_as_eager() -> None:
    """Turns off, for this process, the graph rewrites that would make a graph's
    arithmetic differ from the same ops run eagerly."""
    tf.config.optimizer.set_experimental_options(
        {name: False for name in ARITHMETIC_CHANGING_PASSES}
    )
