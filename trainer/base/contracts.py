"""The names the outside world reads, each spelled here once: what lands in model_dir,
the exported signatures, the metrics each task reports and which way is better, Vertex
AI's schema URIs, the serving image's routes, and the variable that names a staged
package. Standard library only: flags are checked with these before TensorFlow starts.
"""

from __future__ import annotations

# model_dir: the SavedModel and the JSON files beside it, written together (atomically)
# by the chief at export; `trainer.report`, the server, the deploy checks and the
# benchmarks read them by these names.
SAVED_MODEL = "saved_model.pb"
SCHEMA_FILE = "schema.json"  # the schema trained with (`--schema` repeats the run)
CONFIG_FILE = "config.json"  # the flags as given (trainer.base.config.Config)
PLAN_FILE = "plan.json"  # what the plan stage read and decided (trainer.plan)
METRICS_FILE = "metrics.json"  # the selected model's figures
EVALUATION_FILE = "evaluation.json"  # Vertex's model evaluation schema
HISTORY_FILE = "history.json"  # loss and validation curves (also in checkpoint_dir)
IMPORTANCE_FILE = "feature_importance.json"
PROFILE_FILE = "profile.json"
REPORT_FILE = "report.html"
# The boosted-trees members in LightGBM's text format (also in checkpoint_dir, where a
# restarted job finds them), the meta-tuned trees and the shallow ones
# (trainer.train.forest.MEMBERS); the SavedModel holds the same trees as TensorFlow ops.
TREES_FILE = "trees.txt"
SHALLOW_TREES_FILE = "shallow_trees.txt"
# trainer.prepare's output folder: its record counts and column kinds.
PREPARE_FILE = "prepare.json"
# ...and its splits, each in files named SPLIT-00000-of-00004.tfrecord (trainer.prep.shards):
# the pipeline's train step reads them as --train_data=OUT/train-* and so on.
SPLITS = ("train", "validation", "test")

# The export's signatures: serialized tf.Examples (Vertex online prediction), and raw
# named features (rawPredict, the `instances` of a JSON body).
SERVING_DEFAULT = "serving_default"
PREDICT = "predict"
SIGNATURES = (SERVING_DEFAULT, PREDICT)

# What each task reports (metrics.json, --selection_metric, --hptune_metric), in Vertex
# AI's model evaluation names; mae and rmse are the older short names, kept as aliases.
# trainer.evaluate.metrics computes them, with `examples` besides.
TASK_METRICS = {
    "regression": (
        "loss",
        "meanAbsoluteError",
        "rootMeanSquaredError",
        "rSquared",
        "meanAbsolutePercentageError",
        "rootMeanSquaredLogError",
        "mae",
        "rmse",
    ),
    "binary": ("loss", "logLoss", "accuracy", "precision", "recall", "f1", "auRoc", "auPrc"),
    "multiclass": ("loss", "logLoss", "accuracy", "auRoc"),
}
# Better smaller (errors and losses); every other metric is better larger.
MINIMIZED = (
    "loss",
    "logLoss",
    "mae",
    "rmse",
    "meanAbsoluteError",
    "rootMeanSquaredError",
    "meanAbsolutePercentageError",
    "rootMeanSquaredLogError",
)
# Each task's proper loss: what selects the model unless --selection_metric says.
PROPER_LOSS = {"regression": "rootMeanSquaredError", "binary": "logLoss", "multiclass": "logLoss"}


def minimized(metric: str) -> bool:
    """Whether lower is better for `metric`."""
    return metric in MINIMIZED


# Vertex AI's model evaluation schemas (evaluation.json's metricsSchemaUri).
EVALUATION_SCHEMAS = "gs://google-cloud-aiplatform/schema/modelevaluation/"
CLASSIFICATION_SCHEMA = EVALUATION_SCHEMAS + "classification_metrics_1.0.0.yaml"
REGRESSION_SCHEMA = EVALUATION_SCHEMAS + "regression_metrics_1.0.0.yaml"
# The summary metrics those schemas hold (evaluation.json's `metrics`, the Model
# Registry's evaluation), and the package's older short names for some of them.
SCHEMA_METRICS = {
    "classification": ("auRoc", "auPrc", "logLoss"),
    "regression": (
        "meanAbsoluteError",
        "rootMeanSquaredError",
        "rSquared",
        "meanAbsolutePercentageError",
        "rootMeanSquaredLogError",
    ),
}
SHORT_NAMES = {
    "classification": {"loss": "logLoss"},
    "regression": {"mae": "meanAbsoluteError", "rmse": "rootMeanSquaredError"},
}

# The serving image's contract with Vertex (its Model's containerSpec): the defaults of
# AIP_HTTP_PORT, AIP_HEALTH_ROUTE and AIP_PREDICT_ROUTE.
HTTP_PORT = 8080
HEALTH_ROUTE = "/health"
PREDICT_ROUTE = "/predict"

# The training image installs the sdist this variable names before it runs trainer.task.
PACKAGE_ENV = "TRAINER_PACKAGE_URI"
