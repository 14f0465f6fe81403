"""model_dir, whole or not at all: the SavedModel and the JSON files beside it
(contracts' model_dir names), published by the chief at the end of a job."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time

import keras

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.evaluate import report
from trainer.model import heads
from trainer.plan import plan as plan_lib
from trainer.serving import export


def write(
    plan: plan_lib.Plan,
    model: keras.Model,
    head: heads.Head,
    metrics: dict,
    files: dict,
    is_chief: bool,
    attempts: int = 1,
) -> None:
    """Writes the SavedModel, its JSON files and `files` (name -> JSON, or text) into
    `plan.model_dir` (the chief publishes it, `Storage.publishing`; other workers, who
    must take part in saving, write to a scratch folder that is removed).

    Args:
      attempts: how often the chief tries the whole export (storage_lib.retrying) before it gives
        up with one line; 1 in a cluster, where saving is a collective.

    Raises:
      storage.StorageError: when the export fails for good; model_dir is then as it was.
    """
    storage = plan.storage
    start = time.monotonic()
    if not is_chief:
        scratch = tempfile.mkdtemp(prefix="trainer-export-")
        try:
            export.write_saved_model(model, plan.schema, head, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    logging.info("exporting the model to %s", plan.model_dir)

    def publish() -> None:
        with storage.publishing(plan.model_dir) as partial:
            export.write_saved_model(model, plan.schema, head, storage.path(partial))
            for name, content in {
                contracts.SCHEMA_FILE: plan.schema.to_json(),
                contracts.CONFIG_FILE: plan.resolved().to_json(),
                contracts.METRICS_FILE: metrics,
                **files,
            }.items():
                if isinstance(content, str):
                    storage.write_bytes(storage_lib.join(partial, name), content.encode())
                else:
                    storage.write_json(storage_lib.join(partial, name), content)
            report.write(storage, partial)

    storage_lib.retrying(f"exporting the model to {plan.model_dir}", publish, attempts=attempts)
    logging.info("exported the model to %s in %.1fs", plan.model_dir, time.monotonic() - start)


def exported_step(storage: storage_lib.Storage, model_dir: str) -> int | None:
    """The step of the export in `model_dir` (its metrics' step), None without one."""
    metrics = storage_lib.join(model_dir, contracts.METRICS_FILE)
    if not (
        storage.exists(storage_lib.join(model_dir, contracts.SAVED_MODEL))
        and storage.exists(metrics)
    ):
        return None
    return storage.read_json(metrics).get("step")
