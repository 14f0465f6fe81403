"""Checkpoints: restore the latest at start, save periodically and at the end.

In a multi-worker job every worker takes part in each save (saving can involve
collectives), but only the chief writes to `checkpoint_dir`; the others write to a
local scratch folder that is removed when the job ends. All workers restore from
`checkpoint_dir`, so they resume from the same state.
"""

from __future__ import annotations

import logging
import shutil
import tempfile

import tensorflow as tf

from trainer.base import storage as storage_lib


class CheckpointError(ValueError):
    """A checkpoint that cannot be restored into this model; the message names it."""


class Checkpoints:
    def __init__(
        self,
        storage: storage_lib.Storage,
        directory: str,
        is_chief: bool,
        max_to_keep: int = 3,
        alone: bool = True,
        **trackables,
    ):
        """Args:
        storage: resolves `directory`.
        directory: the job's checkpoint folder (URI).
        is_chief: whether this process writes there.
        max_to_keep: how many checkpoints to keep.
        alone: no other process takes part in a save: a failed write may be retried
          (in a cluster, a save is a collective that a retry on one task would hang).
        **trackables: what to save (model, optimizer, ...).
        """
        self.directory = directory
        self.is_chief = is_chief
        self.attempts = storage_lib.RETRY_ATTEMPTS if alone else 1
        self._read_path = storage.path(directory)
        if is_chief:
            storage.makedirs(directory)
            self._scratch = None
            write_path = self._read_path
        else:
            self._scratch = tempfile.mkdtemp(prefix="trainer-ckpt-")
            write_path = self._scratch
        self.checkpoint = tf.train.Checkpoint(**trackables)
        self.manager = tf.train.CheckpointManager(self.checkpoint, write_path, max_to_keep)

    def restore_latest(self) -> bool:
        """Restores the newest checkpoint of `directory`, if any; returns whether it did.

        Raises:
          CheckpointError: if the checkpoint does not fit the model (e.g. other flags).
        """
        latest = tf.train.latest_checkpoint(self._read_path)
        if not latest:
            return False
        try:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise CheckpointError(
                f"checkpoint {latest} does not fit this model ({storage_lib.first_line(e)}); "
                f"use the flags it was written with, or a new --checkpoint_dir"
            ) from None
        logging.info("restored checkpoint %s", latest)
        return True

    def latest_step(self) -> int | None:
        """The step of the newest checkpoint in `directory`, if any."""
        latest = tf.train.latest_checkpoint(self._read_path)
        return int(latest.rsplit("-", 1)[1]) if latest else None

    def save(self, step: int) -> None:
        """Saves (every worker must call it); writes to `directory` on the chief only.
        A write that fails leaves the earlier checkpoints as they were (TensorFlow names
        a checkpoint in its index only once its files are whole).

        Raises:
          storage.StorageError: one line, when the write fails for good.
        """
        storage_lib.retrying(
            f"saving the checkpoint of step {step} to {self.directory}",
            lambda: self.manager.save(checkpoint_number=step),
            attempts=self.attempts,
        )
        if self.is_chief:
            logging.info("saved checkpoint at step %d to %s", step, self.directory)

    def close(self) -> None:
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
