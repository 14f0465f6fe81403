"""BigQuery through its Storage Read API, as Arrow: the one module that talks to Google.

A table (or a query's result table) is opened as a read session of several streams;
each stream is read on its own (here, or by a Beam worker). `clients` is the boundary
the tests replace.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

import pyarrow as pa

from trainer.prep.errors import PrepareError

_TABLE = re.compile(r"^([\w.:-]+)\.(\w+)\.([\w$-]+)$")


@dataclasses.dataclass(frozen=True)
class Session:
    """An open read session: picklable, so Beam workers can read its streams."""

    table: str  # projects/P/datasets/D/tables/T
    streams: tuple  # stream names
    estimated_rows: int
    raw: bytes  # the serialized ReadSession (its Arrow schema)


def clients(project: str):
    """(bigquery.Client, BigQueryReadClient) for `project`."""
    try:
        from google.cloud import bigquery, bigquery_storage_v1
    except ImportError:
        raise PrepareError(
            "reading BigQuery needs the 'prepare' extra: pip install 'trainer[prepare]'"
        ) from None
    return bigquery.Client(project=project), bigquery_storage_v1.BigQueryReadClient()


def table_path(table: str) -> str:
    """`project.dataset.table` as the Storage API's resource name.

    Raises:
      PrepareError: naming the flag, for anything else.
    """
    m = _TABLE.match(table or "")
    if not m:
        raise PrepareError(f"--bigquery_table={table!r}: expected PROJECT.DATASET.TABLE")
    return f"projects/{m[1]}/datasets/{m[2]}/tables/{m[3]}"


def read_session(
    table: str | None, query: str | None, project: str | None, max_streams: int = 0
) -> Session:
    """Opens a read session on `table`, or on the result of `query` (standard SQL, run as
    a job billed to `project`)."""
    from google.cloud.bigquery_storage_v1 import types

    path = table_path(table) if table else None
    project = project or (path.split("/")[1] if path else None)
    if not project:
        raise PrepareError("--bigquery_query needs --project (the project billed for it)")
    bq, read = clients(project)
    if query:
        from google.cloud import bigquery

        job = bq.query(query, job_config=bigquery.QueryJobConfig(use_legacy_sql=False))
        job.result()  # waits; a failing query raises here with BigQuery's message
        dest = job.destination
        path = f"projects/{dest.project}/datasets/{dest.dataset_id}/tables/{dest.table_id}"
    assert path  # a table, or the query's destination
    session = read.create_read_session(
        parent=f"projects/{project}",
        read_session=types.ReadSession(table=path, data_format=types.DataFormat.ARROW),
        max_stream_count=max_streams,
    )
    return Session(
        table=path,
        streams=tuple(s.name for s in session.streams),
        estimated_rows=int(session.estimated_row_count),
        raw=types.ReadSession.serialize(session),
    )


def read_stream(session: Session, stream: str) -> Iterator[pa.RecordBatch]:
    """The rows of one stream of `session`, as record batches."""
    from google.cloud.bigquery_storage_v1 import types

    _, read = clients(session.table.split("/")[1])
    proto = types.ReadSession.deserialize(session.raw)
    for page in read.read_rows(stream).rows(proto).pages:
        yield page.to_arrow()
