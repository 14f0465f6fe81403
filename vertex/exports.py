"""What Vertex AI prediction needs of an export, checked before anything is uploaded.

`Model.upload(artifact_uri=...)` wants the SavedModel at the root of `artifact_uri`; online
prediction calls `serving_default` only; the prebuilt prediction images run an older
TensorFlow than training does. Each check raises `ExportError` naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import re

from trainer import storage as storage_lib

# Vertex's prebuilt TensorFlow prediction images; 2.15 is the newest there is (there is
# no 2.16+ image), and the oldest runtime CI serves this package's exports with.
PREDICTION_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-{kind}.{major}-{minor}:latest"
NEWEST_PREDICTION_TF = (2, 15)
OLDEST_TESTED_SERVING_TF = (2, 15)
IMAGE_TF = re.compile(r"/tf2-(cpu|gpu)\.(\d+)-(\d+)")
# What the trainer exports (trainer/export.py) and Vertex calls.
SIGNATURES = {"serving_default": ("examples",), "predict": None}  # None: the features


class ExportError(ValueError):
    """An export or image that Vertex prediction would reject or serve wrongly."""


@dataclasses.dataclass(frozen=True)
class Export:
    """An exported model as found in `model_dir`."""

    model_dir: str
    tensorflow_version: str                  # the TF that wrote it, as recorded in it
    signatures: dict[str, tuple[str, ...]]   # name -> input names
    task: str                                # from config.json
    metrics: dict                            # metrics.json

    @property
    def features(self) -> tuple[str, ...]:
        return self.signatures["predict"]


def inspect(storage: storage_lib.Storage, model_dir: str) -> Export:
    """Reads the SavedModel's signatures and TF version, config.json and metrics.json.

    Raises:
      ExportError: naming `model_dir` and what is missing.
    """
    from tensorflow.core.protobuf import saved_model_pb2  # only here: TF is slow to import

    pb = storage_lib.join(model_dir, "saved_model.pb")
    if not storage.exists(pb):
        raise ExportError(f"--model_dir={model_dir}: no saved_model.pb at its root; Vertex "
                          "needs the export folder itself (e.g. <job_dir>/model)")
    saved = saved_model_pb2.SavedModel.FromString(storage.read_bytes(pb))
    graph = saved.meta_graphs[0]
    signatures = {name: tuple(sorted(sig.inputs)) for name, sig in graph.signature_def.items()
                  if not name.startswith("__")}
    for name, expected in SIGNATURES.items():
        if name not in signatures:
            raise ExportError(f"{model_dir}: the SavedModel has no {name!r} signature "
                              f"(it has {', '.join(sorted(signatures)) or 'none'}); export it "
                              "with trainer.task")
        if expected and signatures[name] != expected:
            raise ExportError(f"{model_dir}: signature {name!r} takes {signatures[name]}, "
                              f"expected {expected}")
    try:
        config = storage.read_json(storage_lib.join(model_dir, "config.json"))
        metrics = storage.read_json(storage_lib.join(model_dir, "metrics.json"))
    except storage_lib.StorageError as e:
        raise ExportError(f"{model_dir}: {e}; export it with trainer.task") from None
    return Export(model_dir=model_dir, tensorflow_version=graph.meta_info_def.tensorflow_version,
                  signatures=signatures, task=config.get("task", ""), metrics=metrics)


def default_image(gpu: bool) -> str:
    """The newest prebuilt TF prediction image, CPU or GPU."""
    major, minor = NEWEST_PREDICTION_TF
    return PREDICTION_IMAGE.format(kind="gpu" if gpu else "cpu", major=major, minor=minor)


def check_image(image: str, export: Export, gpu: bool) -> None:
    """The serving image must run a TensorFlow that serves the export, on the right
    hardware. A custom image (not a prebuilt TF one) is its owner's business."""
    m = IMAGE_TF.search(image)
    if not m:
        return
    kind, version = m[1], (int(m[2]), int(m[3]))
    exported = _version(export.tensorflow_version)
    if version < OLDEST_TESTED_SERVING_TF and version < exported:
        raise ExportError(
            f"--serving_image={image} runs TensorFlow {version[0]}.{version[1]}, older than "
            f"the {export.tensorflow_version} that exported {export.model_dir}; exports are "
            f"tested to serve on {OLDEST_TESTED_SERVING_TF[0]}.{OLDEST_TESTED_SERVING_TF[1]} "
            f"and newer: use {default_image(gpu)}")
    if gpu and kind == "cpu":
        raise ExportError(f"--serving_image={image} is a CPU image but --accelerator_type "
                          f"asks for GPUs; use {default_image(True)}")
    if not gpu and kind == "gpu":
        raise ExportError(f"--serving_image={image} is a GPU image but no --accelerator_type "
                          f"is given; use {default_image(False)} or add a GPU")


def _version(text: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m[1]), int(m[2])) if m else (0, 0)
