"""Which records train, which validate (select the model) and which test it.

Validation data is --validation_data or, without it, records held out of the training
files (--holdout_fraction). A record is held out when the hash of its serialized bytes and
its position in its file falls in the first `fraction` of the hash's range: the choice
depends on the record and where it is, not on the order files are read in, sharding, the
number of workers or a restart. Identical records (copies) are held out like any others,
each on its own: where a table repeats records, validation repeats them as future data
will (hashing the bytes alone kept copies together, and validation then held only records
that training never saw: docs/decisions.md, "The holdout splits copies").
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from trainer.base import config as config_lib
from trainer.base import storage as storage_lib

# Hash buckets: a fraction is rounded to 1/BUCKETS.
BUCKETS = 10_000


@dataclasses.dataclass(frozen=True)
class Part:
    """One side of the split: the held-out records (`held_out`) or the rest."""

    fraction: float
    held_out: bool

    def __call__(self, serialized: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        """A bool mask: which of a vector of serialized records, at `positions` (int64,
        each record's index in its file), are on this side."""
        keys = tf.strings.join([serialized, tf.strings.as_string(positions)], separator="\0")
        # FarmHash Fingerprint64: stable across platforms and TensorFlow versions.
        bucket = tf.strings.to_hash_bucket_fast(keys, BUCKETS)
        inside = bucket < round(self.fraction * BUCKETS)
        return inside if self.held_out else tf.logical_not(inside)

    def describe(self, data: str) -> str:
        """Where these records come from, for logs and metrics.json."""
        share = self.fraction if self.held_out else 1 - self.fraction
        return f"{share:.4g} of the records of {data}, chosen by hash (--holdout_fraction)"


@dataclasses.dataclass(frozen=True)
class Splits:
    """The files of each use, and which of their records (`Part`, None: all)."""

    train_files: list[str]
    train_part: Part | None
    validation_files: list[str]  # empty: no validation, the last model is exported
    validation_part: Part | None
    validation_name: str  # where validation records come from, in words
    test_files: list[str]


def resolve(config: config_lib.Config, storage: storage_lib.Storage) -> Splits:
    """The job's splits, from --train_data, --validation_data, --test_data and
    --holdout_fraction (files listed now: globs are matched once per job)."""
    train_files = storage.glob(config.train_data)
    test_files = storage.glob(config.test_data) if config.test_data else []
    if config.validation_data:
        return Splits(
            train_files,
            None,
            storage.glob(config.validation_data),
            None,
            config.validation_data,
            test_files,
        )
    if not config.holdout_fraction:
        return Splits(train_files, None, [], None, "none", test_files)
    held_out = Part(config.holdout_fraction, held_out=True)
    return Splits(
        train_files,
        Part(config.holdout_fraction, held_out=False),
        train_files,
        held_out,
        held_out.describe(config.train_data),
        test_files,
    )
