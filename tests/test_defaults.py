"""The rules of the plan stage that fill in unset flags (trainer/plan/defaults.py): each
decides from the flags and the files alone, and says why."""

import pytest

from trainer.data import records
from trainer.plan import defaults

from conftest import data_globs


@pytest.mark.parametrize(
    "policy, size, expected",
    [
        ("auto", 10 * 1024**2, "memory"),
        ("auto", 3 * 1024**3, "stream"),
        ("memory", 3 * 1024**3, "memory"),
        ("off", 1024, "stream"),
    ],
)
def test_cache_choice_is_logged_with_its_reason(policy, size, expected):
    mode, why = defaults.cache(policy, size)
    assert mode == expected
    assert "the training files total" in why
    assert why.startswith("auto:" if policy == "auto" else f"--cache={policy}")


@pytest.mark.parametrize("batch_size, expected", [(4, 1280), (32, 1000)])
def test_default_train_steps_are_ten_epochs_and_at_least_a_thousand(store, batch_size, expected):
    files = store.glob(data_globs("binary")[0])  # 512 records in 4 files
    steps, why = defaults.train_steps(
        records.count([store.path(f) for f in files], skip_corrupt=False), batch_size
    )
    assert steps == expected  # 10 * 512 / 4 = 1280; 10 * 512 / 32 = 160, raised to 1000
    assert "10 epochs of 512 training records" in why


def test_default_train_steps_are_capped_on_large_data():
    """10M records at batch 64: 10 epochs would be 1,562,500 steps; the default stops at
    MAX_DEFAULT_STEPS and says so. Just under the cap, 10 epochs stand."""
    steps, why = defaults.train_steps(10_000_000, 64)
    assert steps == defaults.MAX_DEFAULT_STEPS == 500_000
    assert why == (
        "--train_steps unset: 10 epochs of 10,000,000 training records at "
        "--batch_size=64 would be 1,562,500; capped at 500,000 (3.2 epochs) so "
        "that a default job's length stays bounded; set --train_steps to train "
        "longer"
    )
    assert defaults.train_steps(3_200_000, 64)[0] == 500_000
    assert defaults.train_steps(3_100_000, 64)[0] == 484_375


@pytest.mark.parametrize("replicas, expected", [(1, 64), (2, 64), (3, 66), (5, 65), (128, 128)])
def test_an_unset_batch_splits_evenly_across_the_replicas(replicas, expected):
    batch, why = defaults.batch_size(replicas, "ple_mlp", 12_799)
    assert batch == expected and batch % replicas == 0 and batch >= 64
    if expected == 64:
        assert why == "--batch_size unset"
    else:
        assert why == f"--batch_size unset: 64, rounded up to a multiple of {replicas} replicas"


@pytest.mark.parametrize(
    "model, n, replicas, expected",
    [
        ("ple_mlp", 12_800, 1, 128),
        ("ple_mlp", 12_800, 3, 129),
        ("ple_mlp", None, 1, 64),  # not counted: --train_steps given and nothing to size
        ("mlp", 1_000_000, 1, 64),
        (None, 1_000_000, 1, 64),  # a --model_fn
    ],
)
def test_the_default_model_takes_a_larger_batch_and_rate_on_larger_tables(
    model, n, replicas, expected
):
    batch, why = defaults.batch_size(replicas, model, n)
    assert batch == expected
    if expected >= 128:
        assert why.startswith("--batch_size unset, --model=ple_mlp on 12,800+ training records")
    rate, why = defaults.learning_rate(model, batch)
    assert rate == (2e-3 if expected >= 128 else 1e-3)
    assert ("doubled with the batch" in why) == (expected >= 128)


def test_precision_is_asked_for_and_the_plan_says_what_the_machine_has():
    assert defaults.precision("float32", None, None) == ("float32", "--precision=float32")
    value, why = defaults.precision("float32", None, "AMX (CPU)")
    assert value == "float32" and "AMX (CPU) multiplies bf16: --precision=bfloat16" in why
    assert defaults.precision("bfloat16", None, "AMX (CPU)") == (
        "bfloat16",
        "--precision=bfloat16 (AMX (CPU))",
    )
    assert "slower than float32" in defaults.precision("bfloat16", None, None)[1]
    assert defaults.precision("float32", "m:f", "AMX (CPU)")[1].startswith("--model_fn builds")


def test_default_metric_and_evaluation_interval():
    assert defaults.selection_metric("regression")[0] == "rootMeanSquaredError"
    assert defaults.selection_metric("binary")[0] == "logLoss"
    assert defaults.selection_metric("multiclass")[0] == "logLoss"
    assert defaults.eval_every(1000, 100)[0] == 100  # 20 evaluations, whole loops
    assert defaults.eval_every(20_000, 100)[0] == 1000
    assert defaults.eval_every(600, 20)[0] == 40


@pytest.mark.parametrize(
    "steps, every, validation, expected",
    [
        (1129, 100, True, 3),  # deliveries: 12 evaluations, a quarter of the run is 2.8
        (20_000, 1000, True, 5),  # 20 evaluations: 5 of them
        (3036, 200, True, 4),  # diamonds
        (1000, 500, True, 2),  # at least 2: one is a single dip
        (1000, 100, False, 0),  # nothing to stop on
        (1000, 0, True, 0),  # one evaluation, at the end
    ],
)
def test_training_stops_after_a_quarter_of_the_run_without_a_better_model(
    steps, every, validation, expected
):
    patience, why = defaults.early_stopping_patience(steps, every, validation)
    assert patience == expected
    assert why.startswith("--early_stopping_patience unset")


def test_ple_mlp_width_follows_the_number_of_training_records():
    small, why = defaults.hidden_units("ple_mlp", 2_999)
    assert small == (64, 32)
    assert why == (
        "--model=ple_mlp on 2,999 training records, fewer than 3,000; from 3,000: 256,256,256"
    )
    assert defaults.hidden_units("ple_mlp", 3_000)[0] == (256, 256, 256)


@pytest.mark.parametrize(
    "policy, model, model_fn, validation, fragment",
    [
        ("auto", "ple_mlp", None, True, "auto: two LightGBM models' trees"),
        ("off", "ple_mlp", None, True, "--trees=off"),
        ("auto", "mlp", None, True, "--model=mlp is a neural model alone"),
        ("auto", "ple_mlp", "m:f", True, "--model_fn builds its own model"),
        ("auto", "ple_mlp", None, False, "no validation data"),
    ],
)
def test_trees_join_the_default_model_when_there_is_validation_data(
    policy, model, model_fn, validation, fragment
):
    joined, why = defaults.trees(policy, model, model_fn, validation)
    assert joined == (fragment == "auto: two LightGBM models' trees") and fragment in why


def test_trees_stay_out_without_lightgbm(monkeypatch):
    monkeypatch.setattr(defaults.importlib.util, "find_spec", lambda name: None)
    joined, why = defaults.trees("auto", "ple_mlp", None, True)
    assert not joined and "pip install lightgbm" in why


def test_the_default_model_is_an_ensemble_and_mlp_one_network():
    assert defaults.ensemble_size("ple_mlp", 100)[0] == defaults.ENSEMBLE_SIZE["ple_mlp"] > 1
    assert defaults.ensemble_size("mlp", 100) == (1, "--model=mlp is one MLP")
    assert defaults.ensemble_size("mlp", 100_000) == (1, "--model=mlp is one MLP")


def test_the_default_ensemble_has_half_the_members_from_3000_training_records():
    assert defaults.ensemble_size("ple_mlp", 2_999) == (
        8,
        "--model=ple_mlp on 2,999 training records, fewer than 3,000: 8 members sharing "
        "their weights (TabM)",
    )
    assert defaults.ensemble_size("ple_mlp", 3_000) == (
        4,
        "--model=ple_mlp on 3,000 training records or more: 4 members sharing their "
        "weights (TabM); 8 below",
    )
