"""Tabular data to TFRecords: `python -m trainer.prepare`.

    python -m trainer.prepare --input='data/*.csv' --label=price --output=prepared/
    python -m trainer.prepare --bigquery_table=proj.ds.sales --label=y --output=gs://b/sales
    python -m trainer.prepare --input='gs://b/raw/*.parquet' --output=gs://b/prep \\
        --runner=DataflowRunner --project=P --region=us-central1 --temp_location=gs://b/tmp

writes OUTPUT/{train,validation,test}-NNNNN-of-NNNNN.tfrecord and OUTPUT/prepare.json,
all at once when complete. Flags only here; the work is in `trainer.prep`. A user
mistake is one line and exit code 2.
"""

from __future__ import annotations

import logging

from absl import app, flags
from absl import logging as absl_logging

from trainer.base import cli, contracts
from trainer.base import storage as storage_lib
from trainer.base.cli import fail as _fail
from trainer.base.cli import parse_flags
from trainer.prep.errors import PrepareError

F = flags.FLAGS
flags.DEFINE_string("input", None, "CSV (.csv, .csv.gz) or Parquet files: a glob, local or gs://.")
flags.DEFINE_string("bigquery_table", None, "A BigQuery table, PROJECT.DATASET.TABLE.")
flags.DEFINE_string("bigquery_query", None, "A standard-SQL query whose result is read.")
flags.DEFINE_string(
    "project",
    None,
    "Google Cloud project billed for BigQuery and running Dataflow (default: the table's project).",
)
flags.DEFINE_string(
    "output",
    None,
    f"Folder (local or gs://) for the TFRecords and {contracts.PREPARE_FILE}; replaced when "
    "the run completes.",
)
flags.DEFINE_string(
    "label",
    None,
    "The target column: kept with its type; rows without "
    "one are left out (and counted). Needed by stratified splits.",
)
flags.DEFINE_list(
    "columns", [], "Only these columns (a struct's name selects its fields); default all."
)
flags.DEFINE_list("exclude", [], "Columns left out.")
flags.DEFINE_list(
    "column_types",
    [],
    "CSV: COLUMN:TYPE where the first rows mislead "
    "type inference; TYPE is string, int, float, bool, timestamp or date.",
)
flags.DEFINE_string(
    "split",
    "random:0.8,0.1,0.1",
    "random:TRAIN,VAL,TEST, "
    "stratified:TRAIN,VAL,TEST, timestamp:COLUMN:TRAIN,VAL,TEST or "
    "column:COLUMN (TRAIN/VALIDATE/TEST values).",
)
flags.DEFINE_string(
    "key",
    None,
    "Hash this column instead of the whole row for random and "
    "stratified splits (an id keeps a row's split when its values change).",
)
flags.DEFINE_integer("seed", 0, "Key of the split's hash.")
flags.DEFINE_integer(
    "num_shards", 0, "Files per split; 0: ~128 MB each, at least 16 for a split over 64 MB."
)
flags.DEFINE_string(
    "runner",
    "local",
    "local (this process, all cores), DirectRunner, or DataflowRunner (needs the 'prepare' extra).",
)
flags.DEFINE_string("region", None, "Dataflow region.")
flags.DEFINE_string("temp_location", None, "Dataflow: gs:// folder for temporary files.")
flags.DEFINE_bool(
    "dry_run", False, "With Beam runners: print the pipeline's options and plan, submit nothing."
)
flags.DEFINE_enum(
    "log_format",
    "auto",
    list(cli.FORMATS),
    "json: JSON lines with their severity on stdout (Cloud Logging); auto: json on Vertex AI.",
)
flags.DEFINE_string(
    "fake_gcs_root", None, "Serve gs:// paths from this local folder (tests, local runs)."
)


def options_from_flags():
    from trainer.prep import options as options_lib
    from trainer.prep import splits

    return options_lib.Options(
        output=F.output,
        input=F.input,
        bigquery_table=F.bigquery_table,
        bigquery_query=F.bigquery_query,
        project=F.project,
        label=F.label,
        columns=tuple(F.columns),
        exclude=tuple(F.exclude),
        column_types=options_lib.parse_column_types(F.column_types),
        split=splits.parse(F.split),
        key=F.key,
        seed=F.seed,
        num_shards=F.num_shards,
        fake_gcs_root=F.fake_gcs_root,
    )


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        return _fail(f"unexpected arguments {argv[1:]}: every option is a --flag")
    cli.use_format(F.log_format)
    absl_logging.set_verbosity(absl_logging.INFO)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    from trainer.base.quiet import quiet_stderr

    with quiet_stderr():  # TensorFlow's C++ start-up lines say nothing about the data
        import tensorflow  # noqa: F401
    try:
        options = options_from_flags()
        storage = storage_lib.Storage(options.fake_gcs_root)
        from trainer.prep import prepared

        prepared.check_output(options, storage)
        if F.runner == "local":
            if F.dry_run:
                return _fail("--dry_run applies to the Beam runners")
            from trainer.prep import local

            local.run(options, storage)
        else:
            from trainer.prep import beam

            beam.run(
                options,
                storage,
                beam.pipeline_options(F.runner, F.project, F.region, F.temp_location),
                dry_run=F.dry_run,
            )
    except (PrepareError, storage_lib.StorageError) as e:
        return _fail(str(e))
    return 0


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
