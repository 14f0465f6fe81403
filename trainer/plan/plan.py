"""The plan stage: everything a job reads and decides before a model is built.

`make_plan` lists the files of each split, loads or infers the schema, checks the data
(empty, corrupt, not fitting a given schema), counts the training records where a
default needs them, and fills in every unset default with its reason
(trainer.plan.defaults). The result is one frozen `Plan`: what the user asked (`config`)
and what was decided, logged once as a short table and written beside the checkpoints
(a resumed job reuses its record count) and into model_dir (contracts.PLAN_FILE).

It needs no strategy and builds no model: a bad input fails here, in seconds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import tensorflow as tf

from trainer.base import config as config_lib
from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.data import inference, inputs, records, scan
from trainer.data import schema as schema_lib
from trainer.data import splits as splits_lib
from trainer.model import heads, precision
from trainer.plan import defaults


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a job was asked (`config`) and what it decided, read-only.

    A field of `Config` that the plan does not decide reads through: `plan.label` is
    `plan.config.label`, while `plan.train_steps` is the decided number of steps
    (`plan.config.train_steps` what was asked, perhaps None). Model builders receive the
    plan as their `config` argument.
    """

    config: config_lib.Config
    splits: splits_lib.Splits
    schema: schema_lib.Schema
    head: heads.Head
    replicas: int
    seed: int
    train_bytes: int  # the training files' total size
    fingerprint: tuple  # what a record count depends on (see `_fingerprint`)
    train_records: int | None  # kept training records, counted up to `counted_to`
    counted_to: int | None  # the count's limit; None: all records were counted
    cache: str  # 'memory' or 'stream'
    batch_size: int  # global, a multiple of `replicas`
    learning_rate: float  # the first (ple_mlp's schedule decays it)
    train_steps: int
    hidden_units: tuple[int, ...] | None  # None: the --model_fn's own
    ensemble_size: int | None  # members of a built-in model; None: the --model_fn's own
    trees: bool  # boosted trees blended in at the end (trainer.train.forest)
    precision: str  # what the built-in model's hidden layers multiply in (model.precision)
    eval_every_steps: int
    early_stopping_patience: int  # evaluations; 0: never stops early
    selection_metric: str
    reasons: tuple[tuple[str, str], ...]  # (what, why) of each decision, in order

    def __getattr__(self, name: str) -> Any:
        if name == "config":  # not set yet (copy, unpickle): no read-through
            raise AttributeError(name)
        return getattr(self.config, name)

    @property
    def storage(self) -> storage_lib.Storage:
        return self.config.storage()

    def resolved(self) -> config_lib.Config:
        """The Config this run amounts to: the flags with the decided values filled in
        (contracts.CONFIG_FILE; given as flags, they repeat the run)."""
        return dataclasses.replace(
            self.config,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            train_steps=self.train_steps,
            hidden_units=self.hidden_units,
            ensemble_size=self.ensemble_size,
            precision=self.precision,
            eval_every_steps=self.eval_every_steps,
            early_stopping_patience=self.early_stopping_patience,
            selection_metric=self.selection_metric,
        )

    def records_of_stream(self) -> int | None:
        """The kept training records, when all of them were counted (None otherwise)."""
        return self.train_records if self.counted_to is None else None

    def to_json(self) -> dict:
        """contracts.PLAN_FILE: the decisions with their reasons, and the data's facts."""
        return {
            "decided": {
                "batch_size": self.batch_size,
                "learning_rate": self.learning_rate,
                "train_steps": self.train_steps,
                "hidden_units": list(self.hidden_units or ()) or None,
                "ensemble_size": self.ensemble_size,
                "trees": self.trees,
                "precision": self.precision,
                "eval_every_steps": self.eval_every_steps,
                "early_stopping_patience": self.early_stopping_patience,
                "selection_metric": self.selection_metric,
                "cache": self.cache,
                "seed": self.seed,
            },
            "reasons": dict(self.reasons),
            "data": {
                "train_files": len(self.splits.train_files),
                "train_bytes": self.train_bytes,
                "train_records": self.train_records,
                "counted_to": self.counted_to,
                "fingerprint": self.fingerprint,
                "validation": self.splits.validation_name,
                "validation_files": len(self.splits.validation_files),
                "test_files": len(self.splits.test_files),
                "features": len(self.schema.features),
            },
            "replicas": self.replicas,
        }

    def table(self) -> str:
        """The plan as a few aligned lines, for the log."""
        counted = ""
        if self.train_records is not None:  # counted up to a limit: "at least"
            more = "+" if self.counted_to and self.train_records >= self.counted_to else ""
            counted = f", {self.train_records:,}{more} records"
        size = storage_lib.human_bytes(self.train_bytes)
        label = f"label {self.schema.label.name!r} ({self.head.task})"
        rows = [
            ("data", f"{len(self.splits.train_files)} training file(s), {size}{counted}"),
            ("validation", self.splits.validation_name),
            ("schema", f"{len(self.schema.features)} features, {label}"),
            *self.reasons,
        ]
        width = max(len(what) for what, _ in rows)
        return "\n".join(f"  {what:<{width}}  {why}" for what, why in rows)


def make_plan(config: config_lib.Config, replicas: int = 1) -> Plan:
    """Reads and decides everything the job needs before a model is built.

    Args:
      config: what the user asked.
      replicas: replicas in sync under the job's strategy (the global batch is split
        across them).

    Raises:
      ConfigError, StorageError, SchemaError, DataError: naming the flag, file or feature.
    """
    if config.batch_size is not None and config.batch_size % replicas:
        raise config_lib.ConfigError(
            f"--batch_size={config.batch_size} does not divide evenly across {replicas} "
            f"replicas; use a multiple of {replicas}"
        )
    storage = config.storage()
    splits = splits_lib.resolve(config, storage)
    if config.skip_corrupt_records:
        for problem in scan.bad_records(storage, splits.train_files, None):
            logging.warning("skipping the rest of a corrupt file: %s", problem)
    schema = load_schema(config, storage, splits.train_files)
    sizes = [storage.size(f) for f in splits.train_files]
    if not sum(sizes):  # a stream of empty epochs would never end
        raise inputs.DataError(f"the training files of {config.train_data!r} are empty")
    fingerprint = _fingerprint(config, splits, sizes)
    n, counted_to = None, None
    # The model's width and the batch need to know only whether the data is small.
    limits = [defaults.SMALL_DATA_RECORDS] if _sized(config) else []
    if config.batch_size is None and _built_in(config) in defaults.LARGE_BATCH:
        limits.append(defaults.LARGE_BATCH[config.model][1])
    if config.ensemble_size is None and _built_in(config) in defaults.LARGE_DATA_ENSEMBLE_SIZE:
        limits.append(defaults.SMALL_DATA_RECORDS)
    if config.train_steps is None or limits:
        counted_to = None if config.train_steps is None else max(limits)
        n = _count(config, storage, splits, schema, fingerprint, counted_to)
    decided, reasons = _decide(config, splits, n, sum(sizes), replicas)
    return Plan(
        config=config,
        splits=splits,
        schema=schema,
        head=heads.make_head(config.task, schema),
        replicas=replicas,
        train_bytes=sum(sizes),
        fingerprint=fingerprint,
        train_records=n,
        counted_to=counted_to,
        reasons=tuple(reasons),
        **decided,
    )


def _built_in(config: config_lib.Config) -> str | None:
    """The built-in model the job trains (config.MODELS), None for a --model_fn."""
    return None if config.model_fn else config.model


def _sized(config: config_lib.Config) -> bool:
    """Whether the model's width follows the data (a built-in model, no --hidden_units)."""
    return config.hidden_units is None and _built_in(config) in defaults.SMALL_DATA_HIDDEN_UNITS


def _decide(
    config: config_lib.Config,
    splits: splits_lib.Splits,
    n: int | None,
    train_bytes: int,
    replicas: int,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Every default the flags left unset, and (what, why) of each decision worth a line
    (on `n` training records, counted when a rule needs them)."""
    model = _built_in(config)
    decided: dict[str, Any] = {
        "batch_size": config.batch_size,
        "learning_rate": config.learning_rate,
        "train_steps": config.train_steps,
        "hidden_units": config.hidden_units,
        "eval_every_steps": config.eval_every_steps,
    }
    reasons = []
    if config.batch_size is None:
        decided["batch_size"], why = defaults.batch_size(replicas, model, n)
        reasons.append(("batch_size", f"{decided['batch_size']} ({why})"))
    if config.learning_rate is None:
        decided["learning_rate"], why = defaults.learning_rate(model, decided["batch_size"])
        reasons.append(("learning_rate", f"{decided['learning_rate']:g} ({why})"))
    if config.train_steps is None:
        assert n is not None
        decided["train_steps"], why = defaults.train_steps(n, decided["batch_size"])
        reasons.append(("train_steps", f"{decided['train_steps']:,} ({why})"))
    if _sized(config):
        assert n is not None
        units, why = defaults.hidden_units(config.model, n)
        decided["hidden_units"] = units
        reasons.append(("hidden_units", f"{','.join(map(str, units))} ({why})"))
    decided["ensemble_size"] = config.ensemble_size
    if not config.model_fn and config.ensemble_size is None:
        k, why = defaults.ensemble_size(config.model, n)
        decided["ensemble_size"] = k
        reasons.append(("ensemble_size", f"{k} ({why})"))
    decided["trees"], why = defaults.trees(
        config.trees, config.model, config.model_fn, bool(splits.validation_files)
    )
    reasons.append(("trees", f"{'yes' if decided['trees'] else 'no'} ({why})"))
    decided["precision"], why = defaults.precision(
        config.precision, config.model_fn, precision.bf16_units()
    )
    reasons.append(("precision", f"{decided['precision']} ({why})"))
    if config.eval_every_steps is None:
        every, why = defaults.eval_every(decided["train_steps"], config.steps_per_loop)
        decided["eval_every_steps"] = every
        if splits.validation_files:
            reasons.append(("eval_every_steps", f"{every:,} ({why})"))
    decided["early_stopping_patience"] = config.early_stopping_patience
    if config.early_stopping_patience is None:
        patience, why = defaults.early_stopping_patience(
            decided["train_steps"], decided["eval_every_steps"], bool(splits.validation_files)
        )
        decided["early_stopping_patience"] = patience
        if splits.validation_files:
            reasons.append(("early_stopping_patience", f"{patience} ({why})"))
    metric, why = (config.selection_metric, "--selection_metric")
    if metric is None:
        metric, why = defaults.selection_metric(config.task)
    decided["selection_metric"] = metric
    if splits.validation_files:
        best = "lowest" if contracts.minimized(metric) else "highest"
        reasons.append(
            ("selection_metric", f"the {best} {metric} on {splits.validation_name} ({why})")
        )
    decided["cache"], why = defaults.cache(config.cache, train_bytes)
    reasons.append(("cache", f"{decided['cache']} ({why})"))
    decided["seed"] = config.effective_seed()
    why = "--seed" if config.seed is not None else "derived from --train_data and --checkpoint_dir"
    reasons.append(("seed", f"{decided['seed']} ({why})"))
    return decided, reasons


def load_schema(
    config: config_lib.Config, storage: storage_lib.Storage, files: list[str]
) -> schema_lib.Schema:
    """Reads --schema, or infers the schema from a sample of the training records.

    A given schema is checked against the first records, so a mismatch fails now,
    naming the file and feature, rather than minutes into training.
    """
    if config.schema:
        schema = schema_lib.from_json(
            storage.read_json(config.schema),
            config.schema,
            config.label,
            config.task,
            config.weight,
        )
        # The first records only: the start of a job must not read a whole file.
        bad = (
            None
            if config.skip_corrupt_records
            else scan.find_bad_record(
                storage, files[:1], schema, limit=config.schema_sample_records
            )
        )
        if bad:
            raise inputs.DataError(f"{bad} (with schema {config.schema})")
        return schema
    sample = scan.sample_records(
        storage, files, config.schema_sample_records, config.skip_corrupt_records
    )
    sampled = list(sample)
    classes = None
    if config.task != "regression" and len(sampled) >= config.schema_sample_records:
        classes = _every_class(config, storage, files, sampled)
    schema = inference.infer(sampled, config.label, config.task, config.weight, classes)
    logging.info(
        "inferred schema from up to %d records: %d features, label %r%s",
        config.schema_sample_records,
        len(schema.features),
        schema.label.name,
        f" with classes {list(schema.label.classes)[:10]}" if schema.label.classes else "",
    )
    return schema


def _every_class(
    config: config_lib.Config,
    storage: storage_lib.Storage,
    files: list[str],
    sampled: list[tuple[str, bytes]],
) -> set | None:
    """Every value of the label in the training files, not only the sample's: data sorted
    by label (a table exported in order) leaves classes out of its first records. One
    pass that parses the label alone. None when the sample shows no class label, or the
    files cannot be read (the record count, next, names the bad record)."""
    dtype, seen = inference.sampled_labels(sampled, config.label)
    if dtype in (None, "float"):  # inference names the problem
        return None
    try:
        found = records.label_values(
            [storage.path(f) for f in files],
            config.label,
            schema_lib.DTYPES[dtype],
            skip_corrupt=config.skip_corrupt_records,
        )
    except (tf.errors.InvalidArgumentError, tf.errors.DataLossError):
        return None
    missed = sorted(found - seen)
    if missed:
        logging.info(
            "label %r: the schema sample (%s records) missed class(es) %s, found in the "
            "training files",
            config.label,
            f"{len(sampled):,}",
            missed[:10],
        )
    return found


def previous_path(config: config_lib.Config) -> str:
    """Where a job keeps its plan beside its checkpoints."""
    return storage_lib.join(config.checkpoint_dir, contracts.PLAN_FILE)


def _count(
    config: config_lib.Config,
    storage: storage_lib.Storage,
    splits: splits_lib.Splits,
    schema: schema_lib.Schema,
    fingerprint: tuple,
    limit: int | None,
) -> int:
    """The kept training records (up to `limit`): the previous run's count when its plan,
    beside the checkpoints, counted the same records (up to the same limit, or all of
    them), else counted now."""
    path = previous_path(config)
    if storage.exists(path):
        data = storage.read_json(path).get("data", {})
        if data.get("fingerprint") == json_form(fingerprint) and data.get("counted_to") in (
            None,
            limit,
        ):
            n = data["train_records"]
            logging.info("training records: %s, as counted before this restart", f"{n:,}")
            return n if limit is None else min(n, limit)
    with scan.naming_bad_records(storage, splits.train_files, schema):
        return records.count(
            [storage.path(f) for f in splits.train_files],
            skip_corrupt=config.skip_corrupt_records,
            keep=splits.train_part,
            limit=limit,
        )


def _fingerprint(config: config_lib.Config, splits: splits_lib.Splits, sizes: list[int]) -> tuple:
    """What a record count depends on: the files and their sizes, which records are kept
    and whether corrupt ones are skipped."""
    part = splits.train_part
    return (
        tuple(zip(splits.train_files, sizes)),
        (part.fraction, part.held_out) if part else None,
        config.skip_corrupt_records,
    )


def json_form(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))
