"""What Vertex AI prediction needs of an export, checked before anything is uploaded.

`Model.upload(artifact_uri=...)` wants the SavedModel at the root of `artifact_uri`; online
prediction calls `serving_default` unless the body names another signature; Google's
prebuilt prediction images, still an option until their end of availability, run an
older TensorFlow than training does. Each check raises `ExportError` naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import datetime
import re

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.vertex import images

# The oldest TensorFlow CI serves this package's exports with: 2.15, the runtime of
# Vertex's newest (and last) prebuilt TensorFlow prediction images.
OLDEST_TESTED_SERVING_TF = (2, 15)
# What the trainer exports (trainer/export.py) and Vertex calls.
SIGNATURES = {
    contracts.SERVING_DEFAULT: ("examples",),
    contracts.PREDICT: None,
}  # None: the features


class ExportError(ValueError):
    """An export or image that Vertex prediction would reject or serve wrongly."""


@dataclasses.dataclass(frozen=True)
class Export:
    """An exported model as found in `model_dir`."""

    model_dir: str
    tensorflow_version: str  # the TF that wrote it, as recorded in it
    signatures: dict[str, tuple[str, ...]]  # name -> input names
    task: str  # from config.json
    metrics: dict  # metrics.json
    evaluation: dict | None = None  # evaluation.json, when evaluated
    importance: dict | None = None  # feature_importance.json, when evaluated

    @property
    def features(self) -> tuple[str, ...]:
        return self.signatures[contracts.PREDICT]


def inspect(storage: storage_lib.Storage, model_dir: str) -> Export:
    """Reads the SavedModel's signatures and TF version, config.json and metrics.json.

    Raises:
      ExportError: naming `model_dir` and what is missing.
    """
    from tensorflow.core.protobuf import saved_model_pb2  # only here: TF is slow to import

    pb = storage_lib.join(model_dir, contracts.SAVED_MODEL)
    if not storage.exists(pb):
        raise ExportError(
            f"--model_dir={model_dir}: no {contracts.SAVED_MODEL} at its root; Vertex "
            "needs the export folder itself (e.g. <job_dir>/model)"
        )
    saved = saved_model_pb2.SavedModel.FromString(storage.read_bytes(pb))
    graph = saved.meta_graphs[0]
    signatures = {
        name: tuple(sorted(sig.inputs))
        for name, sig in graph.signature_def.items()
        if not name.startswith("__")
    }
    for name, expected in SIGNATURES.items():
        if name not in signatures:
            raise ExportError(
                f"{model_dir}: the SavedModel has no {name!r} signature "
                f"(it has {', '.join(sorted(signatures)) or 'none'}); export it "
                "with trainer.task"
            )
        if expected and signatures[name] != expected:
            raise ExportError(
                f"{model_dir}: signature {name!r} takes {signatures[name]}, expected {expected}"
            )
    try:
        config = storage.read_json(storage_lib.join(model_dir, contracts.CONFIG_FILE))
        metrics = storage.read_json(storage_lib.join(model_dir, contracts.METRICS_FILE))
    except storage_lib.StorageError as e:
        raise ExportError(f"{model_dir}: {e}; export it with trainer.task") from None
    optional = {}
    for field, name in (
        ("evaluation", contracts.EVALUATION_FILE),
        ("importance", contracts.IMPORTANCE_FILE),
    ):
        path = storage_lib.join(model_dir, name)
        if storage.exists(path):
            optional[field] = storage.read_json(path)
    return Export(
        model_dir=model_dir,
        tensorflow_version=graph.meta_info_def.tensorflow_version,
        signatures=signatures,
        task=config.get("task", ""),
        metrics=metrics,
        **optional,
    )


def default_image(
    project: str, region: str, gpu: bool, repository: str = images.DEFAULT_REPOSITORY
) -> str:
    """The package's serving image in the region's Artifact Registry, CPU or GPU."""
    return images.own_image(project, region, "serve", gpu, repository)


def check_image(
    image: str, export: Export, gpu: bool, today: datetime.date | None = None
) -> str | None:
    """The serving image must be one Vertex still accepts, run a TensorFlow that serves
    the export, on the right hardware. A custom image is its owner's business.

    Returns:
      A warning (one line) for a prebuilt image that still works but not for long.
    """
    why = images.retired(image, "prediction", today or datetime.date.today())
    if why:
        raise ExportError(f"--serving_image={why}; use the package's serving image, the default")
    own, prebuilt = images.own_kind(image), images.prebuilt(image, "prediction")
    if own:
        if own[0] != "serve":
            raise ExportError(
                f"--serving_image={image} is the package's training image; "
                f"models are served by its serve-{own[1]} image"
            )
        kind = own[1]
    elif prebuilt:
        kind, version = prebuilt
        exported = _version(export.tensorflow_version)
        if version < OLDEST_TESTED_SERVING_TF and version < exported:
            raise ExportError(
                f"--serving_image={image} runs TensorFlow {version[0]}.{version[1]}, older "
                f"than the {export.tensorflow_version} that exported {export.model_dir}; "
                "exports are tested to serve on "
                f"{OLDEST_TESTED_SERVING_TF[0]}.{OLDEST_TESTED_SERVING_TF[1]} and newer"
            )
    else:
        return None
    if gpu and kind == "cpu":
        raise ExportError(
            f"--serving_image={image} is a CPU image but --accelerator_type "
            "asks for GPUs; use its GPU twin"
        )
    if not gpu and kind == "gpu":
        raise ExportError(
            f"--serving_image={image} is a GPU image but no --accelerator_type "
            "is given; use its CPU twin or add a GPU"
        )
    if prebuilt:
        date = images.end_of_availability(image, "prediction")
        assert date is not None  # every prebuilt image has one
        return (
            f"--serving_image={image} reaches its end of availability on "
            f"{date.isoformat()}: from then on Vertex AI refuses new deployments of it "
            "and may delete existing ones; the package's own serving image is the "
            "default"
        )
    return None


def _version(text: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m[1]), int(m[2])) if m else (0, 0)
