"""benchmarks/op_profile.py: the profiler's ops read back by kind and by layer."""

from __future__ import annotations

import pytest
import tensorflow as tf

from benchmarks import op_profile


def test_a_profiled_loop_reads_back_its_matrix_products(tmp_path):
    a = tf.random.stateless_normal((256, 256), seed=(1, 2))

    @tf.function(autograph=False)
    def loop(x):
        def body(i, x):
            return i + 1, tf.nn.relu(tf.matmul(x, a)) * 1e-2 + 1.0

        return tf.while_loop(lambda i, x: i < 50, body, (tf.constant(0), x))[1]

    loop(a).numpy()  # traced before the profile
    tf.profiler.experimental.start(str(tmp_path))
    loop(a).numpy()
    tf.profiler.experimental.stop()

    profile = op_profile.read(str(tmp_path))
    products = [kind for kind in profile.by_kind if "MatMul" in kind]
    assert products, profile.by_kind
    assert sum(profile.calls[kind] for kind in products) == 50  # one per iteration
    assert 0 < profile.products <= profile.total
    assert profile.total == pytest.approx(sum(profile.by_layer.values()), rel=1e-12)


def test_op_names_are_read_as_layers_forward_backward_and_the_optimizer():
    body = "while/body/_1/"
    assert op_profile._layer(body + "while/tabular_1/hidden_1_1/Relu") == "forward hidden_1"
    assert (
        op_profile._layer(body + "gradient_tape/while/tabular_1/hidden_2_1/MatMul/MatMul_1")
        == "backward hidden_2"
    )
    assert op_profile._layer(body + "while/adam_w/sub_2") == "optimizer"
    assert op_profile._layer(body + "while/Mean") == "forward Mean"
