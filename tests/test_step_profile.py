"""benchmarks/step.py: a step's arithmetic counted from the traced graph, its ops per
iteration of the compiled loop, and the matmul rate it is compared with."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from benchmarks import step


def test_forward_flops_count_every_matrix_product_once():
    inputs = keras.Input((5,), name="x")
    hidden = keras.layers.Dense(7)(inputs)
    # [B, 3, 7] x [3, 7, 2]: an ensemble's per-member heads, as an einsum.
    members = keras.ops.einsum(
        "bkd,kdo->bko", keras.ops.repeat(hidden[:, None], 3, axis=1), tf.ones((3, 7, 2))
    )
    model = keras.Model({"x": inputs}, members)
    batch = {"x": tf.ones((4, 5))}
    assert step.forward_flops(model, batch) == 2 * 4 * 5 * 7 + 2 * 4 * 3 * 7 * 2


def test_forward_flops_need_a_batch_of_known_size():
    inputs = keras.Input((5,), name="x")
    model = keras.Model({"x": inputs}, keras.layers.Dense(3)(inputs))
    with pytest.raises(ValueError, match="static shape"):
        step.forward_flops(model, {"x": tf.TensorSpec((None, 5))})


def test_ops_per_step_are_the_loop_body_s_not_the_function_s():
    @tf.function
    def loop(x, n):
        x = tf.sqrt(x) + 1.0  # once, outside the loop
        for _ in tf.range(n):
            x = tf.tanh(tf.matmul(x, x))
        return x

    graph = loop.get_concrete_function(tf.ones((2, 2)), tf.constant(3)).graph
    counts = step.ops_per_step(graph.as_graph_def())
    assert counts["MatMul"] == 1 and counts["Tanh"] == 1
    assert counts["Sqrt"] == 0 and "Const" not in counts


def test_the_matmul_rate_is_in_gflop_per_second_for_each_type():
    # A CPU core does a few to a few hundred GFLOP/s: a unit slip (FLOP/s, or n^2 for
    # n^3) lands far outside.
    for dtype in (tf.float32, tf.bfloat16):
        assert 0.5 < step.matmul_gflops(dtype, n=256, seconds=0.1) < 50_000
