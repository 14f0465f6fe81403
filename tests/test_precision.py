"""bf16 mixed precision (trainer.model.precision, --precision=bfloat16): the hidden layers
multiply in bfloat16, weights and logits stay float32, training follows float32's, and
what is evaluated and exported is float32 throughout. bf16 keeps 8 significant bits
(relative rounding up to 2**-9, 0.2%); the tolerances below are stated per test."""

import dataclasses
import json

import keras
import numpy as np
import tensorflow as tf
from test_model import BATCH, SCHEMA

from trainer.base import contracts
from trainer.model import precision
from trainer.model import tabular as model_lib

from conftest import make_config, run_job


def test_bf16_units_are_read_from_the_cpu_flags(tmp_path):
    amx, avx = tmp_path / "amx", tmp_path / "avx"
    amx.write_text("processor : 0\nflags : fpu avx512f amx_bf16 amx_tile\n")
    avx.write_text("processor : 0\nflags : fpu avx512f avx512_bf16\n")
    assert precision.bf16_units(str(amx)) == "AMX (CPU)"
    assert precision.bf16_units(str(avx)) is None  # bf16 instructions, no matrix units
    assert precision.bf16_units(str(tmp_path / "none")) is None


def _float_dtypes(model) -> set:
    """The float dtypes of what a call of `model` on BATCH computes."""
    graph = tf.function(lambda f: model(f, training=False)).get_concrete_function(BATCH).graph
    return {
        t.dtype.name
        for op in graph.get_operations()
        for t in op.outputs
        if t.dtype.is_floating and op.type != "Const"
    }


def test_a_bf16_model_multiplies_in_bf16_and_keeps_float32_weights_and_logits(fake_gcs, job_uri):
    config = dataclasses.replace(
        make_config(fake_gcs, job_uri, task="regression", precision="bfloat16"), ensemble_size=4
    )
    keras.utils.set_random_seed(1)
    model = model_lib.build(SCHEMA, 1, config)
    hidden = [layer for layer in model.layers if layer.name.startswith("hidden_")]
    assert hidden and {layer.compute_dtype for layer in hidden} == {"bfloat16"}
    assert {w.dtype for w in model.weights} <= {"float32", "int64", "string"}
    assert "bfloat16" in _float_dtypes(model)

    copy = precision.float32_copy(model, lambda c: model_lib.build(SCHEMA, 1, c), config)
    assert "bfloat16" not in _float_dtypes(copy)
    bf16, fp32 = model(BATCH).numpy(), copy(BATCH).numpy()
    assert model(BATCH).dtype == "float32"
    # Three bf16 layers: each rounds inputs and weights to 8 bits, so ~1% of the logits'
    # scale; here 5% of it, and not equal (it does multiply in bf16).
    scale = np.max(np.abs(fp32))
    assert np.max(np.abs(bf16 - fp32)) <= 0.05 * scale
    assert np.max(np.abs(bf16 - fp32)) > 0


def test_a_bf16_job_trains_like_float32_and_exports_float32(fake_gcs, job_uri, store):
    """Two jobs from the same seed, 20 steps of the default ensemble: their losses within
    0.5% (measured: 0.01%), and the bf16 job's served graph holds no bf16."""
    results = {}
    for name in ("float32", "bfloat16"):
        config = make_config(fake_gcs, f"{job_uri}/{name}", precision=name)
        results[name] = run_job(config)
        plan = store.read_json(f"{config.model_dir}/{contracts.PLAN_FILE}")
        assert plan["decided"]["precision"] == name
    fp32, bf16 = (results[n].metrics for n in ("float32", "bfloat16"))
    assert abs(bf16["train_loss"] - fp32["train_loss"]) <= 0.005 * fp32["train_loss"]
    assert abs(bf16["logLoss"] - fp32["logLoss"]) <= 0.005 * fp32["logLoss"]
    assert bf16["train_loss"] != fp32["train_loss"]  # the bf16 job did round

    served = tf.saved_model.load(store.path(f"{job_uri}/bfloat16/model"))
    graph = served.signatures["predict"].graph.as_graph_def()
    text = json.dumps([str(node.attr) for node in graph.node])
    functions = [str(f) for f in graph.library.function]
    assert "DT_BFLOAT16" not in text and not any("DT_BFLOAT16" in f for f in functions)
