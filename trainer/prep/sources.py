"""Where rows come from: CSV or Parquet files (local or `gs://`) and BigQuery tables or
queries, each read as Arrow record batches.

A source is cut into `parts` (a file, a Parquet row group, a BigQuery read stream): small
picklable descriptions that this process reads one after another, or Beam workers read in
parallel, with the same `read`.
"""

from __future__ import annotations

import csv
import dataclasses
import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from trainer.base import storage as storage_lib
from trainer.prep.errors import PrepareError

BATCH_ROWS = 65_536
# Read at a time by the CSV reader; the first block of the first file also decides each
# column's type (a value later in the data that does not fit is an error that names it).
CSV_BLOCK = 8 << 20
COLUMN_TYPES = {
    "string": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("s"),
    "date": pa.date32(),
}


@dataclasses.dataclass(frozen=True)
class Part:
    """One independently readable piece of a source."""

    where: str  # a file, or a BigQuery read stream's name
    row_group: int = -1


class FileSource:
    """CSV (`.csv`, `.csv.gz`) or Parquet files matching a glob."""

    def __init__(
        self, pattern: str, storage: storage_lib.Storage, column_types: dict[str, str] | None = None
    ) -> None:
        try:
            self.files = storage.glob(pattern)
        except storage_lib.StorageError as e:
            raise PrepareError(f"--input: {e}") from None
        formats = {_format(f) for f in self.files}
        if None in formats or len(formats) != 1:
            bad = [f for f in self.files if _format(f) is None] or self.files
            raise PrepareError(
                f"--input={pattern}: expected only .csv, .csv.gz or .parquet "
                f"files, found {bad[0]!r}"
            )
        self.format = formats.pop()
        self.storage = storage
        self.column_types = column_types or {}
        self._csv_types = None
        if self.format == "csv":
            self._csv_types = self._infer_csv_types()

    def describe(self) -> str:
        return f"{len(self.files)} {self.format} file(s)"

    def parts(self) -> list[Part]:
        if self.format == "csv":
            return [Part(f) for f in self.files]
        return [
            Part(f, g) for f in self.files for g in range(self._parquet(f).metadata.num_row_groups)
        ]

    def estimate_rows(self) -> int:
        """Rows in the source: exact for Parquet, from file sizes for CSV."""
        if self.format == "parquet":
            return sum(self._parquet(f).metadata.num_rows for f in self.files)
        first = next(self.read(Part(self.files[0])), None)
        size = self.storage.size(self.files[0])
        rows_per_byte = (first.num_rows / min(size, CSV_BLOCK)) if first and size else 0
        return int(sum(self.storage.size(f) for f in self.files) * rows_per_byte)

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        if self.format == "parquet":
            yield from self._read_parquet(part)
        else:
            assert self._csv_types is not None  # inferred for every CSV source
            yield from self._read_csv(part.where, self._csv_types)

    def _parquet(self, uri: str) -> pq.ParquetFile:
        try:
            return pq.ParquetFile(self.storage.open_input(uri))
        except (pa.ArrowException, OSError) as e:
            raise PrepareError(f"{uri}: not a readable Parquet file ({_first_line(e)})") from None

    def _read_parquet(self, part: Part) -> Iterator[pa.RecordBatch]:
        try:
            yield from self._parquet(part.where).iter_batches(
                batch_size=BATCH_ROWS, row_groups=[part.row_group]
            )
        except (pa.ArrowException, OSError) as e:
            raise PrepareError(
                f"{part.where}: row group {part.row_group}: {_first_line(e)}"
            ) from None

    def _infer_csv_types(self) -> dict[str, pa.DataType]:
        first = self.files[0]
        reader = self._open_csv(first, {})
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            batch = None
        except pa.ArrowInvalid as e:
            raise self._csv_error(first, e, reader_types={}) from None
        if batch is None:
            raise PrepareError(f"{first}: no rows under the header")
        types = dict(zip(batch.schema.names, batch.schema.types))
        for name, given in self.column_types.items():
            if name not in types:
                raise PrepareError(
                    f"--column_types: {name!r} is not a column of {first} "
                    f"(columns: {', '.join(types)})"
                )
            types[name] = COLUMN_TYPES[given]
        # A column with no value in the first block is typed by its later values only if
        # they are numbers; --column_types says otherwise.
        return {n: (pa.float64() if pa.types.is_null(t) else t) for n, t in types.items()}

    def _open_csv(self, uri: str, types: dict) -> pacsv.CSVStreamingReader:
        try:
            reader = pacsv.open_csv(
                self.storage.open_input(uri),
                read_options=pacsv.ReadOptions(block_size=CSV_BLOCK),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=True
                ),
            )
        except pa.ArrowInvalid as e:
            raise self._csv_error(uri, e, types) from None
        except OSError as e:
            raise PrepareError(f"{uri}: {_first_line(e)}") from None
        try:
            reader.schema.names  # noqa: B018  # Arrow decodes the header here, as UTF-8
        except UnicodeDecodeError as e:
            raise PrepareError(
                f"{uri}: the header is not UTF-8 text ({e.reason} at byte {e.start}); "
                "save the file as UTF-8"
            ) from None
        return reader

    def _read_csv(self, uri: str, types: dict) -> Iterator[pa.RecordBatch]:
        reader = self._open_csv(uri, types)
        if reader.schema.names != list(types):
            raise PrepareError(
                f"{uri}: the header's columns {reader.schema.names} differ "
                f"from {self.files[0]}'s {list(types)}"
            )
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as e:
                raise self._csv_error(uri, e, types) from None
            for start in range(0, batch.num_rows, BATCH_ROWS):
                yield batch.slice(start, BATCH_ROWS)

    def _csv_error(self, uri: str, error: Exception, reader_types: dict) -> PrepareError:
        """Names the file, line and column of a CSV the Arrow reader rejected (Arrow's
        message has neither file nor line, so the file is scanned again to find it)."""
        text = _first_line(error)
        # Arrow quotes the row it choked on, whatever its size.
        shown = text if len(text) <= 300 else text[:297] + "..."
        ragged = re.search(r"Expected (\d+) columns, got (\d+)", text)
        bad = re.search(r"column #(\d+): CSV conversion error to (\S+): invalid value '(.*)'", text)
        with self.storage.open_text(uri) as f:
            rows = csv.reader(f)
            try:
                header = next(rows, [])
                for row in rows:
                    if ragged and len(row) != len(header):
                        return PrepareError(
                            f"{uri}:{rows.line_num}: expected {len(header)} "
                            f"columns as in the header, got {len(row)}"
                        )
                    if bad and len(row) > int(bad[1]) and row[int(bad[1])] == bad[3]:
                        name = header[int(bad[1])]
                        kind = {"double": "float"}.get(bad[2], bad[2])
                        return PrepareError(
                            f"{uri}:{rows.line_num}: column {name!r} holds {bad[3]!r}, not a "
                            f"{kind} like its first values; to read it as text, pass "
                            f"--column_types={name}:string"
                        )
            except csv.Error:  # a field past csv's limit, say: Arrow's line will do
                pass
        return PrepareError(f"{uri}: {shown}")


class BigQuerySource:
    """A BigQuery table, or the result of a query, read through the Storage Read API."""

    def __init__(
        self, table: str | None, query: str | None, project: str | None, max_streams: int = 0
    ) -> None:
        from trainer.prep import bigquery  # the Google clients, only when asked for

        self.session = bigquery.read_session(table, query, project, max_streams)
        self.what = table or "the query's result"

    def describe(self) -> str:
        return f"BigQuery {self.what}"

    def parts(self) -> list[Part]:
        return [Part(name) for name in self.session.streams]

    def estimate_rows(self) -> int:
        return self.session.estimated_rows

    def read(self, part: Part) -> Iterator[pa.RecordBatch]:
        from trainer.prep import bigquery

        for batch in bigquery.read_stream(self.session, part.where):
            for start in range(0, batch.num_rows, BATCH_ROWS):
                yield batch.slice(start, BATCH_ROWS)


def _format(uri: str) -> str | None:
    lower = uri.lower()
    if lower.endswith((".csv", ".csv.gz")):
        return "csv"
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    return None


def _first_line(e: BaseException) -> str:
    return storage_lib.first_line(e)
