"""The Apache Beam runner: the same conversion as `local`, one source part per element,
on the DirectRunner (tests) or Dataflow (tables beyond one machine).

Parts are read and converted by workers; stratified and timestamp splits gather each
row's (group, order, hash) into one side input for the cut points (8-24 bytes a row on
one worker); each split is written by `WriteToTFRecord` with the shard count the local
runner would use, to a temporary folder that replaces the output when the job is done.
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

from trainer.base import storage as storage_lib
from trainer.prep import convert as convert_lib
from trainer.prep import prepared as prepared_lib
from trainer.prep import splits as splits_lib
from trainer.prep.errors import PrepareError
from trainer.prep.options import Options

_METRICS = "trainer.prepare"


def _beam():
    try:
        import apache_beam
    except ImportError:
        raise PrepareError(
            "Beam runners need the 'prepare' extra: pip install 'trainer[prepare]'"
        ) from None
    return apache_beam


def pipeline_options(
    runner: str, project: str | None, region: str | None, temp_location: str | None
) -> dict:
    """Beam pipeline options for `runner`; Dataflow gets this package and what its
    conversion imports (TensorFlow for the hash, Arrow).

    Raises:
      PrepareError: a Dataflow flag missing.
    """
    if runner not in ("DirectRunner", "DataflowRunner"):
        raise PrepareError(f"--runner={runner!r}: expected local, DirectRunner or DataflowRunner")
    if runner == "DirectRunner":
        return {"runner": runner, "direct_num_workers": 1, "direct_running_mode": "in_memory"}
    missing = [
        f"--{n}"
        for n, v in (("project", project), ("region", region), ("temp_location", temp_location))
        if not v
    ]
    if missing:
        raise PrepareError(f"--runner=DataflowRunner needs {', '.join(missing)}")
    from importlib import metadata

    setup = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "setup.py"
    )
    requirements = os.path.join(tempfile.mkdtemp(prefix="prepare-"), "requirements.txt")
    with open(requirements, "w") as f:  # the workers' versions = this machine's
        for dist in (
            "tensorflow-cpu" if _has("tensorflow-cpu") else "tensorflow",
            "pyarrow",
            "google-cloud-bigquery-storage",
        ):
            if _has(dist):
                f.write(f"{dist}=={metadata.version(dist)}\n")
    options = {
        "runner": runner,
        "project": project,
        "region": region,
        "temp_location": temp_location,
        "requirements_file": requirements,
        "job_name": f"trainer-prepare-{time.strftime('%Y%m%d-%H%M%S')}",
    }
    if os.path.exists(setup):
        options["setup_file"] = setup
    return options


def run(
    options: Options, storage: storage_lib.Storage, beam_options: dict, dry_run: bool = False
) -> dict | None:
    """Runs the conversion on Beam; returns prepare.json's content (None on a dry run)."""
    beam = _beam()
    start = time.time()
    prepared = prepared_lib.prepare(options, storage)
    if dry_run:
        print(
            json.dumps(
                {"pipeline_options": beam_options, "plan": describe(prepared)},
                indent=2,
                default=str,
            )
        )
        return None
    from apache_beam.options.pipeline_options import PipelineOptions

    with storage.publishing(options.output.rstrip("/")) as tmp:
        with beam.Pipeline(options=PipelineOptions.from_dictionary(beam_options)) as p:
            build(p, prepared, storage, tmp)
        counts = _counts(p)
        files = sorted(
            os.path.basename(f) for f in storage.matches(storage_lib.join(tmp, "*.tfrecord"))
        )
        return prepared_lib.publish(
            prepared, storage, tmp, counts[:3], counts[3], files, time.time() - start
        )


def _cuts(seen: list, fractions: tuple) -> splits_lib.Cuts:
    """The split's cut points from every row's (group, order, hash)."""
    groups, order, hashes = (np.concatenate(a) for a in zip(*seen))
    return splits_lib.cuts(groups, order, hashes, fractions)


def describe(prepared: prepared_lib.Prepared) -> dict:
    """What the pipeline will do, for --dry_run."""
    return {
        "source": prepared.source.describe(),
        "parts": len(prepared.source.parts()),
        "estimated_rows": prepared.estimated_rows,
        "columns": prepared.plan.to_json(),
        "split": prepared.plan.split.to_json(),
        "shards": dict(zip(splits_lib.NAMES, prepared.shards)),
        "steps": [
            "read and convert each part",
            *(
                ["gather (group, order, hash) of every row for the cut points"]
                if prepared.plan.split.needs_pass
                else []
            ),
            "assign splits",
            "write each split's shards",
        ],
    }


def build(p, prepared: prepared_lib.Prepared, storage: storage_lib.Storage, tmp: str):
    """Adds the conversion to pipeline `p`."""
    beam = _beam()
    source, plan = prepared.source, prepared.plan
    rows = (
        p
        | "Parts" >> beam.Create(source.parts())
        | "Spread" >> beam.Reshuffle()
        | "Convert" >> beam.FlatMap(_convert_part, source, plan)
    )
    cuts = None
    if plan.split.needs_pass:
        cuts = beam.pvalue.AsSingleton(
            rows
            | "SplitInputs" >> beam.Map(lambda r: (r.groups, r.order, r.hashes))
            | "Gather" >> beam.combiners.ToList()
            | "Cuts" >> beam.Map(_cuts, plan.split.fractions)
        )
    records = rows | "Assign" >> beam.FlatMap(_assign, plan, cuts)
    by_split = records | "BySplit" >> beam.Partition(lambda kv, n: kv[0], 3)
    for s, name in enumerate(splits_lib.NAMES):
        if plan.split.method != "column" and plan.split.fractions[s] == 0:
            continue
        (
            by_split[s]
            | f"Records{s}" >> beam.Values()
            | f"Write{s}"
            >> beam.io.WriteToTFRecord(
                storage.path(storage_lib.join(tmp, name)),
                file_name_suffix=".tfrecord",
                num_shards=prepared.shards[s],
                shard_name_template="-SSSSS-of-NNNNN",
            )
        )


def _convert_part(part, source, plan):
    from apache_beam.metrics import Metrics

    for batch in source.read(part):
        rows = convert_lib.convert(plan, batch, part.where)
        Metrics.counter(_METRICS, "without_label").inc(rows.dropped)
        yield rows


def _assign(rows, plan, cuts):
    from apache_beam.metrics import Metrics

    split = convert_lib.assign(plan, rows, cuts)
    for s, name in enumerate(splits_lib.NAMES):
        Metrics.counter(_METRICS, name).inc(int((split == s).sum()))
    return zip(split.tolist(), rows.records)


def _counts(p) -> list:
    from apache_beam.metrics.metric import MetricsFilter

    found: dict = {}
    for c in p.result.metrics().query(MetricsFilter().with_namespace(_METRICS))["counters"]:
        found[c.key.metric.name] = found.get(c.key.metric.name, 0) + (
            c.committed if c.committed is not None else c.attempted
        )
    return [found.get(n, 0) for n in (*splits_lib.NAMES, "without_label")]


def _has(dist: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False
