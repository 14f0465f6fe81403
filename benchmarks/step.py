"""Where a training step goes: how many ops the compiled loop runs per step, how much
arithmetic a step is, and what fraction of the machine's matmul rate it reaches.

Issue 29's question: the default step is bound by dispatching hundreds of small ops, not
by arithmetic. The roofline here is TensorFlow's own matmul rate, measured in the same
run (a 2048x2048 product, fp32 and bf16); a step's arithmetic is 3x its forward matmuls
(the forward pass, and two products per kernel backwards), counted in the traced graph.
"""

from __future__ import annotations

import collections
import re
import time

import tensorflow as tf

from trainer.base import config as config_lib
from trainer.train import collectives

# What the loop's body runs without computing: graph plumbing, not kernels dispatched.
PLUMBING = frozenset({"Const", "Identity", "NoOp", "Placeholder", "_Arg", "_Retval"})
PRODUCTS = frozenset({"MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"})


def model_config(
    model: str,
    ensemble_size: int,
    hidden_units: tuple[int, ...] | None = None,
    precision: str = "float32",
    ensemble_adapters: str = "input",
) -> config_lib.Config:
    """A built-in `model` with `ensemble_size` members (at its own width unless
    `hidden_units`, their own weights where `ensemble_adapters` says) multiplying in
    `precision`, as the benchmarks build it: data and output paths unused."""
    return config_lib.make_config(
        env={},
        train_data="x",
        label="label",
        task="binary",
        job_dir="/tmp/unused",
        model=model,
        hidden_units=hidden_units,
        ensemble_size=ensemble_size,
        precision=precision,
        ensemble_adapters=ensemble_adapters,
    )


def matmul_gflops(dtype: tf.DType, n: int = 2048, seconds: float = 1.0) -> float:
    """TensorFlow's rate for an n x n matmul of `dtype` on this machine (GFLOP/s), the
    best of a few timed bursts of about `seconds` in all."""
    a = tf.random.stateless_normal((n, n), seed=(1, 2), dtype=tf.float32)
    a = tf.cast(a, dtype)

    @tf.function
    def products(x, times):
        for _ in tf.range(times):
            x = tf.matmul(x, a) * tf.constant(1e-3, dtype)  # keeps values finite
        return x

    products(a, tf.constant(1)).numpy()  # compiles
    times, best = 4, 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        products(a, tf.constant(times)).numpy()
        elapsed = time.perf_counter() - start
        best = max(best, 2 * n**3 * times / elapsed / 1e9)
        times = min(times * 2, 64)
    return best


def forward_flops(model, features: dict) -> float:
    """Floating-point operations of the matrix products of one forward pass of `model`
    over `features` (one batch), from the traced graph's static shapes."""
    graph = tf.function(lambda f: model(f, training=False)).get_concrete_function(features).graph
    return float(sum(_product_flops(op) for op in _operations(graph)))


def _operations(graph):
    """The graph's ops and those of the functions it calls (Keras may trace layers apart)."""
    yield from graph.get_operations()
    for function in getattr(graph, "_functions", {}).values():
        inner = getattr(function, "graph", None)
        if inner is not None:
            yield from _operations(inner)


def _product_flops(op) -> int:
    if op.type not in PRODUCTS:
        return 0
    out = op.outputs[0].shape
    if not out.is_fully_defined():
        raise ValueError(f"{op.type} {op.name} has no static shape {out}: trace on a batch")
    if op.type == "Einsum":
        # 2 x the product of every index's size, each index counted once.
        equation = op.get_attr("equation").decode()
        inputs, _ = equation.split("->")
        sizes: dict[str, int] = {}
        for term, tensor in zip(inputs.split(","), op.inputs):
            for letter, size in zip(re.sub(r"[^a-z]", "", term), tensor.shape):
                sizes[letter] = int(size)
        total = 2
        for size in sizes.values():
            total *= size
        return total
    a = op.inputs[0].shape
    transposed = op.get_attr("transpose_a") if op.type == "MatMul" else op.get_attr("adj_x")
    inner = a[-2] if transposed else a[-1]
    return 2 * out.num_elements() * int(inner)


def ops_per_step(graph_def) -> collections.Counter:
    """The ops that one iteration of a traced loop runs (its body and the functions it
    calls), by type, plumbing left out."""
    counts = collectives.loop_ops(graph_def)
    return collections.Counter({k: v for k, v in counts.items() if k not in PLUMBING})
