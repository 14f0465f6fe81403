"""An ensemble of k MLPs in one model, sharing most of their weights (TabM).

TabM (Gorishniy et al., ICLR 2025; yandex-research/tabm) trains k members at once, each
with a head of its own, on its own loss (the mean of the members' losses, never the loss
of their mean: `Head.training_loss`), on the same batches (TabM's default,
`share_training_batches`); the prediction is the mean of the members' probabilities
(`Head.combine`). Where the members' own weights are (`adapters`):

- 'input' (TabM-mini, the default): each member scales the inputs by its own r_i,
  starting at one random sign per member and feature ("TabM init"); the hidden layers
  are shared. The paper's recommended "advanced" variant, with piecewise-linear
  encodings as here.
- 'every_layer' (TabM): every linear layer is a BatchEnsemble layer,
  `((x * r_i) @ W) * s_i + b_i` for member i, the members sharing W and differing in
  rank-one adapters r, s and biases b; r starts at the random signs in the first layer,
  at 1 after it.

The randomness is all in the initial weights, drawn from the job's seed like every other
weight: no per-step randomness, so eager and compiled, one replica or many, one worker or
several train the very same members.

Shapes: an input [batch, d] is seen by every member; hidden activations are
[batch, k, width]; `Heads` returns [batch, k, outputs].
"""

from __future__ import annotations

import keras
import numpy as np


class Members(keras.layers.Layer):
    """The first ensemble layer: [batch, d] -> [batch, k, units], `relu((x * r_i) @ W *
    s_i + b_i)` with r_i one random sign per feature (`chunks`: how many of the d inputs
    each feature has) and s_i = 1 at the start; with `adapters='input'`, `relu((x * r_i)
    @ W + b)`, one bias for all members and no s.

    Written as k scaled copies of x, [batch * k, d], times W: the same arithmetic as
    `x @ (r_i * W)` over a [d, k * units] kernel, whose assembly (a transpose and a
    [d, k, units] product, forwards and backwards) made the layer 1.5x as slow at batch
    64 (480 against 311 us, 2026-12-05); the copies are small, d is the encoded width.
    """

    def __init__(
        self,
        units: int,
        k: int,
        chunks: tuple[int, ...],
        seed: int,
        adapters: str = "input",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units, self.k, self.chunks, self.seed = units, k, tuple(chunks), seed
        self.adapters = adapters

    def build(self, input_shape):
        d = int(input_shape[-1])
        if sum(self.chunks) != d:
            raise ValueError(f"chunks {self.chunks} do not add up to the input's {d} values")
        self.kernel = self.add_weight(
            shape=(d, self.units), initializer="glorot_uniform", name="kernel"
        )
        self.r = self.add_weight(shape=(self.k, d), initializer=self._random_signs, name="r")
        if self.adapters == "input":
            self.s = None
            self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="b")
            return
        self.s = self.add_weight(shape=(self.k, self.units), initializer="ones", name="s")
        self.bias = self.add_weight(shape=(self.k, self.units), initializer="zeros", name="b")

    def _random_signs(self, shape, dtype=None):
        # One sign per member and feature, from the job's seed: every worker draws the same.
        signs = np.random.default_rng([self.seed % 2**32, 0x7AB3]).choice(
            [-1.0, 1.0], (self.k, len(self.chunks))
        )
        return keras.ops.convert_to_tensor(
            np.repeat(signs, self.chunks, axis=1), dtype or "float32"
        )

    def call(self, x):
        scaled = keras.ops.reshape(x[:, None, :] * self.r, (-1, self.kernel.shape[0]))
        h = keras.ops.reshape(keras.ops.matmul(scaled, self.kernel), (-1, self.k, self.units))
        return keras.ops.relu((h if self.s is None else h * self.s) + self.bias)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "k": self.k,
            "chunks": self.chunks,
            "seed": self.seed,
            "adapters": self.adapters,
        }


class BatchEnsembleDense(keras.layers.Layer):
    """A hidden BatchEnsemble layer: [batch, k, d] -> [batch, k, units],
    `relu(((x * r_i) @ W) * s_i + b_i)`, r and s starting at 1 (TabM init)."""

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        k, d = int(input_shape[-2]), int(input_shape[-1])
        self.kernel = self.add_weight(
            shape=(d, self.units), initializer="glorot_uniform", name="kernel"
        )
        self.r = self.add_weight(shape=(k, d), initializer="ones", name="r")
        self.s = self.add_weight(shape=(k, self.units), initializer="ones", name="s")
        self.bias = self.add_weight(shape=(k, self.units), initializer="zeros", name="b")

    def call(self, x):
        return keras.ops.relu(keras.ops.matmul(x * self.r, self.kernel) * self.s + self.bias)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class SharedDense(keras.layers.Layer):
    """A hidden layer all members share (TabM-mini): [batch, k, d] -> [batch, k, units],
    `relu(x @ W + b)` as one 2-D product over the k * batch rows. Keras' Dense on the
    3-D activations is the same arithmetic, but the default's step ran 1.15x TabM's
    with it and 1.22x with this (deliveries' schema, batch 128, in turns, 2026-12-06).
    """

    def __init__(self, units: int, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        d = int(input_shape[-1])
        self.kernel = self.add_weight(
            shape=(d, self.units), initializer="glorot_uniform", name="kernel"
        )
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def call(self, x):
        k, d = x.shape[-2], x.shape[-1]
        h = keras.ops.matmul(keras.ops.reshape(x, (-1, d)), self.kernel) + self.bias
        return keras.ops.reshape(keras.ops.relu(h), (-1, k, self.units))

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class Heads(keras.layers.Layer):
    """One linear head per member: [batch, k, d] -> [batch, k, outputs]."""

    def __init__(self, outputs: int, **kwargs):
        super().__init__(**kwargs)
        self.outputs = outputs

    def build(self, input_shape):
        k, d = int(input_shape[-2]), int(input_shape[-1])
        # Each member's head drawn like a Dense layer's own (glorot on d -> outputs).
        limit = float(np.sqrt(6.0 / (d + self.outputs)))
        self.kernel = self.add_weight(
            shape=(k, d, self.outputs), initializer=keras.initializers.RandomUniform(-limit, limit)
        )
        self.bias = self.add_weight(shape=(k, self.outputs), initializer="zeros", name="b")

    def call(self, x):
        return keras.ops.einsum("bkd,kdo->bko", x, self.kernel) + self.bias

    def get_config(self):
        return {**super().get_config(), "outputs": self.outputs}


def members_body(
    x,
    chunks: tuple[int, ...],
    hidden_units: tuple[int, ...],
    k: int,
    outputs: int,
    seed: int,
    dtype: str = "float32",
    adapters: str = "input",
):
    """The ensemble after the encoded features `x` ([batch, d]): hidden layers of
    `hidden_units` (Keras dtype policy `dtype`), k members whose own weights are where
    `adapters` says (config.ENSEMBLE_ADAPTERS), and [batch, k, outputs] float32 logits."""
    h = Members(hidden_units[0], k, chunks, seed, adapters, name="hidden_0", dtype=dtype)(x)
    for i, units in enumerate(hidden_units[1:], start=1):
        if adapters == "input":
            h = SharedDense(units, name=f"hidden_{i}", dtype=dtype)(h)
        else:
            h = BatchEnsembleDense(units, name=f"hidden_{i}", dtype=dtype)(h)
    return Heads(outputs, name="logits", dtype="float32")(h)
