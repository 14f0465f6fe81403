"""The plan stage (trainer/plan/plan.py): everything read and decided before a model is
built, made without a strategy; bad inputs fail there; a restart reuses its count."""

from __future__ import annotations

import logging

import pytest
import tensorflow as tf

from trainer import sample_data
from trainer.base import config as config_lib
from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.data import inputs, records
from trainer.model import tabular
from trainer.plan import defaults
from trainer.plan import plan as plan_lib

from conftest import make_config, run_job


def test_a_plan_reads_and_decides_without_a_strategy(fake_gcs, job_uri):
    """The tiny binary data: 512 training records in 4 files, validation files given."""
    config = make_config(
        fake_gcs,
        job_uri,
        train_steps=None,
        batch_size=None,
        hidden_units=None,
        eval_every_steps=None,
        trees="auto",
    )
    plan = plan_lib.make_plan(config)
    assert plan.train_records == 512 and plan.counted_to is None
    assert plan.batch_size == 64
    assert plan.train_steps == 1000  # 10 epochs at batch 64 is 80: at least 1,000
    assert plan.hidden_units == (64, 32)  # fewer than 3,000 records
    assert plan.eval_every_steps == 50  # 20 evaluations over 1,000 steps, loops of 10
    assert plan.early_stopping_patience == 5  # a quarter of 1,000 steps: 5 evaluations
    assert plan.selection_metric == "logLoss" and plan.cache == "memory"
    assert plan.seed == 7 and plan.head.task == "binary" and len(plan.splits.train_files) == 4
    # What was asked stays as asked; what was not decided reads through.
    assert plan.config.train_steps is None and plan.label == config.label
    assert plan.config.learning_rate is None and plan.learning_rate == 1e-3  # batch 64
    assert plan.resolved().learning_rate == 1e-3
    assert plan.resolved().train_steps == 1000 and plan.resolved().hidden_units == (64, 32)
    assert plan.config.batch_size is None and plan.resolved().batch_size == 64
    assert plan.ensemble_size == defaults.ENSEMBLE_SIZE["ple_mlp"]
    assert plan.resolved().ensemble_size == plan.ensemble_size
    assert [what for what, _ in plan.reasons] == [
        "batch_size",
        "learning_rate",
        "train_steps",
        "hidden_units",
        "ensemble_size",
        "trees",
        "precision",
        "eval_every_steps",
        "early_stopping_patience",
        "selection_metric",
        "cache",
        "seed",
    ]
    table = plan.table()
    assert "512 records" in table and "64,32 (--model=ple_mlp on 512 training records" in table
    written = plan_lib.json_form(plan.to_json())
    assert written["decided"]["train_steps"] == 1000 and written["decided"]["batch_size"] == 64
    assert written["decided"]["learning_rate"] == 1e-3
    assert written["decided"]["ensemble_size"] == plan.ensemble_size
    assert written["decided"]["early_stopping_patience"] == 5
    assert plan.resolved().early_stopping_patience == 5  # as a flag, it repeats the run
    assert plan.trees and written["decided"]["trees"]  # validation data, LightGBM installed
    assert written["data"]["train_records"] == 512


def test_given_flags_are_kept_and_only_what_needs_a_count_counts(fake_gcs, job_uri, monkeypatch):
    """--train_steps and --hidden_units given: nothing to count, nothing read but the
    schema's sample."""
    monkeypatch.setattr(records, "count", lambda *a, **k: pytest.fail("counted"))
    plan = plan_lib.make_plan(make_config(fake_gcs, job_uri, model="mlp"))
    assert (plan.train_steps, plan.hidden_units, plan.train_records) == (20, (16, 8), None)
    assert plan.records_of_stream() is None


def test_an_unset_batch_splits_across_the_replicas_without_a_count(fake_gcs, job_uri, monkeypatch):
    """--train_steps given, --batch_size not: nothing is counted, and three replicas get
    66, not an error."""
    monkeypatch.setattr(records, "count", lambda *a, **k: pytest.fail("counted"))
    config = make_config(fake_gcs, job_uri, model="mlp", batch_size=None)
    plan = plan_lib.make_plan(config, replicas=3)
    assert (plan.train_records, plan.batch_size, plan.train_steps) == (None, 66, 20)
    assert dict(plan.reasons)["batch_size"].startswith("66 (--batch_size unset: 64, rounded up")


def test_the_default_ensemble_counts_to_its_threshold_and_has_4_members_past_it(
    fake_gcs, job_uri, monkeypatch
):
    """--train_steps and --hidden_units given, --ensemble_size not: the members follow the
    data, so ple_mlp counts as far as SMALL_DATA_RECORDS; past it (here lowered to the
    tiny data's 512 records) the plan takes 4 members instead of 8."""
    config = make_config(fake_gcs, job_uri, model="ple_mlp", hidden_units="16,8")
    plan = plan_lib.make_plan(config)
    assert (plan.train_records, plan.counted_to) == (512, defaults.SMALL_DATA_RECORDS)
    assert plan.ensemble_size == defaults.ENSEMBLE_SIZE["ple_mlp"] == 8
    monkeypatch.setattr(defaults, "SMALL_DATA_RECORDS", 500)
    plan = plan_lib.make_plan(config)
    assert plan.ensemble_size == 4 and plan.hidden_units == (16, 8)
    assert dict(plan.reasons)["ensemble_size"].startswith(
        "4 (--model=ple_mlp on 500 training records or more"
    )


def test_the_default_model_counts_to_its_larger_batch_and_takes_it_with_a_doubled_rate(
    fake_gcs, job_uri, monkeypatch
):
    """--train_steps given, --batch_size and --learning_rate not: ple_mlp counts as far as
    its larger batch's threshold; past it (here lowered to the tiny data's 512 records)
    the plan takes that batch and twice the rate."""
    config = make_config(fake_gcs, job_uri, model="ple_mlp", batch_size=None, hidden_units=None)
    plan = plan_lib.make_plan(config)
    assert (plan.train_records, plan.counted_to) == (512, defaults.LARGE_BATCH["ple_mlp"][1])
    assert (plan.batch_size, plan.learning_rate) == (64, 1e-3)
    monkeypatch.setitem(defaults.LARGE_BATCH, "ple_mlp", (128, 500))
    plan = plan_lib.make_plan(config, replicas=3)
    assert (plan.batch_size, plan.learning_rate) == (129, 2e-3)
    reasons = dict(plan.reasons)
    assert reasons["batch_size"].startswith("129 (--batch_size unset, --model=ple_mlp on 500+")
    assert reasons["learning_rate"].startswith("0.002 (--learning_rate unset: 0.001, doubled")
    given = make_config(fake_gcs, job_uri, batch_size=128, learning_rate=5e-4)
    assert plan_lib.make_plan(given).learning_rate == 5e-4


@pytest.mark.parametrize(
    "overrides, error, fragment",
    [
        (dict(batch_size=33), config_lib.ConfigError, "does not divide evenly across 2 replicas"),
        (
            dict(train_data="gs://test-bucket/none-*.tfrecord"),
            storage_lib.StorageError,
            "no file matches 'gs://test-bucket/none-\\*.tfrecord'",
        ),
    ],
)
def test_bad_inputs_fail_in_the_plan(fake_gcs, job_uri, overrides, error, fragment):
    config = make_config(fake_gcs, job_uri, **overrides)
    with pytest.raises(error, match=fragment):
        plan_lib.make_plan(config, replicas=2)


def test_empty_training_files_fail_before_a_model_is_built(fake_gcs, store, job_uri, monkeypatch):
    empty = "gs://test-bucket/empty/part-0.tfrecord"
    store.write_bytes(empty, b"")
    schema = f"{job_uri}/schema.json"
    exported = plan_lib.make_plan(make_config(fake_gcs, job_uri)).schema.to_json()
    store.write_json(schema, exported)
    monkeypatch.setattr(tabular, "build", lambda *a: pytest.fail("a model was built"))
    with pytest.raises(inputs.DataError, match="are empty"):
        run_job(make_config(fake_gcs, job_uri, train_data=empty, schema=schema))


def test_a_restart_reuses_the_count_of_its_plan(fake_gcs, store, job_uri, monkeypatch, caplog):
    """The job keeps its plan beside the checkpoints; planning it again (a restart) reads
    the count from there while the files are the same, and counts again when they change."""
    config = make_config(fake_gcs, job_uri, train_steps=None, model="mlp", hidden_units="8")
    run_job(config)
    kept = store.read_json(f"{job_uri}/checkpoints/{contracts.PLAN_FILE}")
    assert kept["data"]["train_records"] == 512
    assert store.read_json(f"{job_uri}/model/{contracts.PLAN_FILE}") == kept
    counted = records.count
    monkeypatch.setattr(records, "count", lambda *a, **k: pytest.fail("counted again"))
    with caplog.at_level(logging.INFO):
        again = plan_lib.make_plan(config)
    assert again.train_records == 512 and again.train_steps == 1000
    assert "as counted before this restart" in caplog.text
    # Other files: counted anew.
    monkeypatch.setattr(records, "count", counted)
    fewer = make_config(
        fake_gcs,
        job_uri,
        train_steps=None,
        model="mlp",
        hidden_units="8",
        train_data="gs://test-bucket/binary/train-0000[01]-*",
    )
    assert plan_lib.make_plan(fewer).train_records < 512


def test_classes_the_schema_sample_missed_are_found_in_the_training_files(
    fake_gcs, store, job_uri, caplog
):
    """Records sorted by label (a table exported in order): the first records hold one
    class only; the plan still knows every class."""
    records = sample_data.make_examples(300, "multiclass", seed=3)

    def label(record: bytes) -> str:
        feature = tf.train.Example.FromString(record).features.feature["label"]
        return feature.bytes_list.value[0].decode()

    ordered = sorted(records, key=label)
    prefix = f"{job_uri}/sorted/train"
    sample_data.write_tfrecords(store, prefix, ordered, 1)
    config = make_config(
        fake_gcs,
        job_uri,
        task="multiclass",
        train_data=f"{prefix}-*",
        validation_data=None,
        schema_sample_records=50,
    )
    with caplog.at_level(logging.INFO):
        plan = plan_lib.make_plan(config)
    assert plan.schema.label.classes == tuple(sorted({label(r) for r in records}))
    assert "the schema sample (50 records) missed class(es)" in caplog.text
