"""Feature importance: a planted strong, weak and useless feature rank in that order."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow as tf

from trainer.base import config as config_lib
from trainer.base import storage as storage_lib
from trainer.data import scan
from trainer.evaluate import importance
from trainer.prep import local, splits
from trainer.prep.options import Options

from conftest import run_job


def test_planted_features_rank_strong_weak_useless(tmp_path):
    rng = np.random.default_rng(0)
    n = 3000
    strong, weak, useless = rng.normal(size=(3, n))
    color = rng.choice(["red", "blue"], n)
    y = 3 * strong + 0.7 * weak + 0.1 * rng.normal(size=n)
    pq.write_table(
        pa.table({"strong": strong, "weak": weak, "useless": useless, "color": color, "y": y}),
        tmp_path / "t.parquet",
    )
    data = str(tmp_path / "data")
    local.run(
        Options(
            output=data,
            input=str(tmp_path / "t.parquet"),
            label="y",
            split=splits.parse("random:0.8,0.2,0"),
        ),
        storage_lib.Storage(),
    )
    config = config_lib.make_config(
        env={},
        train_data=f"{data}/train-*",
        validation_data=f"{data}/validation-*",
        label="y",
        task="regression",
        job_dir=str(tmp_path / "job"),
        train_steps=600,
        batch_size=64,
        hidden_units="32,16",
        seed=3,
    )
    result = run_job(config)
    found = json.load(open(os.path.join(config.model_dir, "feature_importance.json")))
    ranked = [row["name"] for row in found["features"]]
    assert ranked.index("strong") < ranked.index("weak") < ranked.index("useless"), found
    by_name = {row["name"]: row["importance"] for row in found["features"]}
    assert by_name["strong"] > 5 * by_name["weak"] > 0
    assert abs(by_name["useless"]) < 0.1 * by_name["weak"]
    assert found["data"] == f"{data}/validation-*" and found["records"] > 500
    # Deterministic: the same model and data give the same figures.
    records = [
        r
        for _, r in scan.sample_records(
            storage_lib.Storage(), [f for f in tf.io.gfile.glob(f"{data}/validation-*")], 2000
        )
    ]
    again = importance.permutation_importance(
        result.model, result.head, result.schema, records, found["data"]
    )
    assert again["features"] == found["features"]
