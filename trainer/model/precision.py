"""bf16 mixed precision for the built-in models (--precision=bfloat16): the hidden layers
multiply in bfloat16, fast where the machine has units for it (AMX on Sapphire Rapids and
later CPUs, such as Vertex's C3 and N4; NVIDIA GPUs from compute capability 8.0), while
the weights, the encodings, the logits, the loss and the optimizer stay float32 (Keras'
"mixed_bfloat16" policy on those layers alone).

What a job evaluates and exports is float32 throughout (`float32_copy`): served anywhere,
on any CPU, by TensorFlow 2.15.1, with the weights the bf16 run learned.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

# The Keras policy of the layers that multiply, per --precision (config.PRECISIONS).
POLICY = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def bf16_units(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """What on this machine multiplies bfloat16 natively ('AMX (CPU)', 'GPU compute
    capability 8.0'), or None."""
    for gpu in tf.config.list_physical_devices("GPU"):
        major, minor = tf.config.experimental.get_device_details(gpu).get(
            "compute_capability", (0, 0)
        )
        if major >= 8:
            return f"GPU compute capability {major}.{minor}"
    try:
        with open(cpuinfo) as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return None
    return "AMX (CPU)" if "amx_bf16" in flags.split() else None


def policy(config) -> str:
    """The Keras dtype policy of the multiplying layers of a model built from `config`."""
    return POLICY[config.precision]


def float32_copy(model: keras.Model, build, config) -> keras.Model:
    """The model `build(config)` builds in float32, holding `model`'s weights (all of
    them float32 whatever the policy). Call inside the strategy's scope."""
    copy = build(dataclasses.replace(config, precision="float32"))
    copy.set_weights(model.get_weights())
    return copy
