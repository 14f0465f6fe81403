"""The ensemble inside one model (trainer.model.ensemble) and how heads treat its members.
Tolerances are maximum absolute differences."""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_model import BATCH, SCHEMA

from trainer.model import ensemble, heads
from trainer.model import tabular as model_lib

from conftest import make_config

RNG = np.random.default_rng(0)
MEMBER_LOGITS = tf.constant(RNG.normal(0, 3, (5, 4, 3)), tf.float32)  # batch 5, k 4


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_combined_prediction_is_the_mean_of_the_members_probabilities():
    z = MEMBER_LOGITS.numpy()
    binary = heads.Head("binary", (0, 1))
    p = binary.probabilities(MEMBER_LOGITS[:, :, :1]).numpy()
    np.testing.assert_allclose(p[:, 1], _sigmoid(z[:, :, 0]).mean(1), atol=1e-6)
    multiclass = heads.Head("multiclass", ("a", "b", "c"))
    p = multiclass.probabilities(MEMBER_LOGITS).numpy()
    np.testing.assert_allclose(p, _softmax(z).mean(1), atol=1e-6)
    regression = heads.Head("regression", label_mean=3.0, label_std=2.0)
    predicted = regression.predictions(MEMBER_LOGITS[:, :, :1]).numpy()
    np.testing.assert_allclose(predicted, z[:, :, 0].mean(1) * 2 + 3, atol=1e-5)


def test_confident_members_combine_without_overflow():
    z = tf.constant([[[200.0], [-200.0]], [[90.0], [95.0]]])
    p = heads.Head("binary", (0, 1)).probabilities(z).numpy()
    np.testing.assert_allclose(p[:, 1], [0.5, 1.0], atol=1e-6)
    assert np.all(np.isfinite(heads.Head("binary", (0, 1)).loss(tf.constant([1, 0]), z).numpy()))


def test_plain_logits_pass_through_unchanged():
    head = heads.Head("multiclass", ("a", "b", "c"))
    logits = MEMBER_LOGITS[:, 0]
    np.testing.assert_array_equal(head.combine(logits).numpy(), logits.numpy())
    labels = tf.constant([0, 1, 2, 1, 0])
    np.testing.assert_array_equal(
        head.training_loss(labels, logits).numpy(), head.loss(labels, logits).numpy()
    )


@pytest.mark.parametrize(
    "task, classes, labels",
    [
        ("binary", (0, 1), [0, 1, 1, 0, 1]),
        ("multiclass", ("a", "b", "c"), [0, 2, 1, 1, 0]),
        ("regression", (), [0.5, -1.0, 2.0, 0.0, 1.5]),
    ],
)
def test_members_learn_on_their_own_losses_not_on_their_mean(task, classes, labels):
    head = heads.Head(task, classes)
    logits = MEMBER_LOGITS if task == "multiclass" else MEMBER_LOGITS[:, :, :1]
    labels = tf.constant(labels)
    each = np.stack([head.loss(labels, logits[:, i]).numpy() for i in range(4)], axis=1)
    np.testing.assert_allclose(head.training_loss(labels, logits).numpy(), each.mean(1), atol=1e-5)
    # ... which is not the loss of the combined prediction (Jensen: it is larger).
    assert np.all(head.training_loss(labels, logits).numpy() >= head.loss(labels, logits).numpy())
    assert np.max(each.mean(1) - head.loss(labels, logits).numpy()) > 1e-2


def test_the_first_layer_is_k_scaled_copies_of_one_layer():
    layer = ensemble.Members(6, k=3, chunks=(2, 1, 2), seed=5, adapters="every_layer")
    x = tf.constant(RNG.normal(size=(4, 5)), tf.float32)
    layer.build(x.shape)
    w, r, s, b = (v.numpy() for v in (layer.kernel, layer.r, layer.s, layer.bias))
    layer.s.assign(RNG.normal(size=s.shape))  # s and b move in training
    layer.bias.assign(RNG.normal(size=b.shape))
    out = layer(x).numpy()
    s, b = layer.s.numpy(), layer.bias.numpy()
    expected = np.stack(
        [np.maximum((x.numpy() * r[i]) @ w * s[i] + b[i], 0) for i in range(3)], axis=1
    )
    np.testing.assert_allclose(out, expected, atol=1e-5)
    # One random sign per member and feature: constant within each feature's columns.
    for member in r:
        assert set(np.abs(member)) == {1.0}
        assert member[0] == member[1] and member[3] == member[4]


def test_input_adapters_scale_the_inputs_and_share_the_rest():
    layer = ensemble.Members(6, k=3, chunks=(2, 1, 2), seed=5, adapters="input")
    x = tf.constant(RNG.normal(size=(4, 5)), tf.float32)
    layer.build(x.shape)
    assert layer.s is None and tuple(layer.bias.shape) == (6,)  # TabM-mini: no s, one bias
    layer.r.assign(RNG.normal(size=layer.r.shape))  # r moves in training
    layer.bias.assign(RNG.normal(size=layer.bias.shape))
    w, r, b = (v.numpy() for v in (layer.kernel, layer.r, layer.bias))
    expected = np.stack([np.maximum((x.numpy() * r[i]) @ w + b, 0) for i in range(3)], axis=1)
    np.testing.assert_allclose(layer(x).numpy(), expected, atol=1e-5)


def test_members_start_differently_for_each_seed_and_alike_for_the_same():
    def signs(seed):
        layer = ensemble.Members(4, k=8, chunks=(1,) * 6, seed=seed)
        layer.build((None, 6))
        return layer.r.numpy()

    np.testing.assert_array_equal(signs(1), signs(1))
    assert np.any(signs(1) != signs(2))
    assert len({tuple(row) for row in signs(1)}) > 1  # members differ from each other


def test_hidden_layers_and_heads_against_numpy():
    x = tf.constant(RNG.normal(size=(4, 3, 5)), tf.float32)
    dense = ensemble.BatchEnsembleDense(2)
    dense.build(x.shape)
    for v in (dense.r, dense.s, dense.bias):
        v.assign(RNG.normal(size=v.shape))
    w, r, s, b = (v.numpy() for v in (dense.kernel, dense.r, dense.s, dense.bias))
    expected = np.maximum((x.numpy() * r) @ w * s + b, 0)
    np.testing.assert_allclose(dense(x).numpy(), expected, atol=1e-5)
    shared = ensemble.SharedDense(2)
    shared.build(x.shape)
    shared.bias.assign(RNG.normal(size=shared.bias.shape))
    expected = np.maximum(x.numpy() @ shared.kernel.numpy() + shared.bias.numpy(), 0)
    np.testing.assert_allclose(shared(x).numpy(), expected, atol=1e-5)
    out = ensemble.Heads(2)
    out.build(x.shape)
    expected = np.einsum("bkd,kdo->bko", x.numpy(), out.kernel.numpy()) + out.bias.numpy()
    np.testing.assert_allclose(out(x).numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("adapters", ["input", "every_layer"])
@pytest.mark.parametrize("task, units", [("regression", 1), ("multiclass", 3)])
def test_the_built_in_model_returns_one_row_of_logits_per_member(
    fake_gcs, job_uri, task, units, adapters
):
    config = dataclasses.replace(
        make_config(fake_gcs, job_uri, task=task), ensemble_size=4, ensemble_adapters=adapters
    )
    keras.utils.set_random_seed(1)
    model = model_lib.build(SCHEMA, units, config)
    logits = model(BATCH).numpy()
    assert logits.shape == (2, 4, units)
    assert np.all(np.isfinite(logits))
    assert np.max(np.abs(logits[:, 0] - logits[:, 1])) > 1e-4  # members differ at the start
    # The hidden layers after the first: one kernel and bias for all members (TabM-mini),
    # or adapters and biases of each member's own (TabM).
    own = {v.path.rsplit("/", 1)[-1] for v in model.get_layer("hidden_1").weights}
    assert own == ({"kernel", "bias"} if adapters == "input" else {"kernel", "r", "s", "b"})
