"""Config: flag validation, Vertex's AIP_* defaults, and the thin entry point's errors."""

import dataclasses

import pytest

from trainer.base import config as config_lib

from conftest import run_task

BASE = dict(train_data="gs://b/train-*", label="y", task="binary", job_dir="gs://b/job")


def test_job_dir_gives_vertex_layout():
    config = config_lib.make_config(env={}, **BASE)
    assert (config.model_dir, config.checkpoint_dir, config.tensorboard_dir) == (
        "gs://b/job/model",
        "gs://b/job/checkpoints",
        "gs://b/job/logs",
    )


def test_vertex_environment_is_the_default():
    env = {
        "AIP_MODEL_DIR": "gs://v/out/model/",
        "AIP_CHECKPOINT_DIR": "gs://v/out/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": "gs://v/out/logs/",
        "AIP_TRAINING_DATA_URI": "gs://v/t-*",
        "AIP_VALIDATION_DATA_URI": "gs://v/e-*",
    }
    config = config_lib.make_config(env=env, label="y", task="regression")
    assert config.model_dir == "gs://v/out/model"  # trailing slash dropped
    assert config.checkpoint_dir == "gs://v/out/checkpoints"
    assert config.tensorboard_dir == "gs://v/out/logs"
    assert (config.train_data, config.validation_data) == ("gs://v/t-*", "gs://v/e-*")
    assert config.test_data is None
    assert (
        config_lib.make_config(
            env={**env, "AIP_TEST_DATA_URI": "gs://v/x-*"}, label="y", task="regression"
        ).test_data
        == "gs://v/x-*"
    )


def test_gcs_mount_paths_are_their_gs_twins_in_flags_and_environment():
    env = {
        "AIP_CHECKPOINT_DIR": "/gcs/v/out/checkpoints/",
        "AIP_VALIDATION_DATA_URI": "/gcs/v/e-*",
        "AIP_TEST_DATA_URI": "gs://v/x-*",
    }
    config = config_lib.make_config(
        env=env, train_data="/gcs/b/train-*", job_dir="/gcs/b/job", label="y", task="binary"
    )
    assert (config.train_data, config.validation_data, config.test_data) == (
        "gs://b/train-*",
        "gs://v/e-*",
        "gs://v/x-*",
    )
    assert (config.model_dir, config.checkpoint_dir) == (
        "gs://b/job/model",
        "gs://v/out/checkpoints",
    )
    # One name per object: the same seed as the gs:// spelling of the same job.
    same = config_lib.make_config(
        env={},
        train_data="gs://b/train-*",
        checkpoint_dir="gs://v/out/checkpoints",
        job_dir="gs://b/job",
        label="y",
        task="binary",
    )
    assert config.effective_seed() == same.effective_seed()
    with pytest.raises(
        config_lib.ConfigError, match="--model_dir: bad Cloud Storage path 'gs:///m'"
    ):
        config_lib.make_config(env={}, model_dir="/gcs//m", **BASE)


def test_flags_win_over_environment():
    env = {"AIP_MODEL_DIR": "gs://v/model"}
    config = config_lib.make_config(env=env, model_dir="/tmp/m", **BASE)
    assert config.model_dir == "/tmp/m"


def test_config_is_frozen_and_serialisable():
    config = config_lib.make_config(env={}, hidden_units="256,128", **BASE)
    assert config.hidden_units == (256, 128)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 3
    assert config.to_json()["hidden_units"] == [256, 128]


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(batch_size=0), "--batch_size=0: expected an integer >= 1"),
        (dict(train_steps=-5), "--train_steps=-5"),
        (dict(task="ranking"), "--task='ranking': expected one of regression, binary, multiclass"),
        (dict(strategy="tpu"), "--strategy='tpu'"),
        (dict(shard_by="row"), "--shard_by='row'"),
        (dict(learning_rate=0.0), "--learning_rate=0.0"),
        (dict(hidden_units="64,x"), "--hidden_units='64,x'"),
        (dict(hidden_units="0"), "--hidden_units='0'"),
        (dict(label=""), "--label is not set"),
        (dict(train_data=None), "--train_data is not set"),
        (
            dict(job_dir=None),
            "--model_dir is not set: pass --job_dir, --model_dir, or set AIP_MODEL_DIR",
        ),
        (dict(validation_data="gs:///x"), "--validation_data: bad Cloud Storage path"),
        (dict(test_data="gs://"), "--test_data: bad Cloud Storage path"),
        (
            dict(selection_metric="auc"),
            "--selection_metric='auc': --task=binary reports loss, logLoss, accuracy",
        ),
        (dict(holdout_fraction=0.9), "--holdout_fraction=0.9: expected a number from 0"),
        (dict(early_stopping_patience=-1), "--early_stopping_patience=-1: expected an integer"),
        (dict(eval_every_steps=-1), "--eval_every_steps=-1: expected an integer >= 0"),
        (dict(ensemble_size=0), "--ensemble_size=0: expected an integer >= 1"),
        (
            dict(ensemble_size=4, model_fn="m:f"),
            "--ensemble_size=4 is for the built-in models; --model_fn='m:f' builds its own",
        ),
        (
            dict(ensemble_adapters="tabm"),
            "--ensemble_adapters='tabm': expected one of input, every_layer",
        ),
        (dict(trees="on"), "--trees='on': expected one of auto, off"),
        (dict(precision="fp16"), "--precision='fp16': expected one of float32, bfloat16"),
        (
            dict(precision="bfloat16", model_fn="m:f"),
            "--precision=bfloat16 is for the built-in models; --model_fn='m:f' sets its own",
        ),
    ],
)
def test_bad_values_name_the_flag(overrides, fragment):
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.make_config(env={}, **{**BASE, **overrides})
    assert fragment in str(e.value)


def test_entry_point_reports_bad_flags_in_one_line():
    """The whole of stderr is the one line: flags are checked before TensorFlow is
    imported, whose C++ start-up lines would come first."""
    proc = run_task(
        [
            "--train_data=gs://b/t-*",
            "--label=y",
            "--task=binary",
            "--job_dir=/tmp/x",
            "--batch_size=0",
        ],
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: --batch_size=0: expected an integer >= 1"]


def test_entry_point_rejects_unknown_task():
    proc = run_task(["--label=y", "--task=ranking"], timeout=60)
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: flag --task=ranking: value should be one of"), line
