"""What a `trainer.prepare` run is asked to do: one frozen, validated value."""

from __future__ import annotations

import dataclasses

from trainer.prep import sources as sources_lib
from trainer.prep import splits as splits_lib
from trainer.prep.errors import PrepareError


@dataclasses.dataclass(frozen=True)
class Options:
    output: str
    input: str | None = None
    bigquery_table: str | None = None
    bigquery_query: str | None = None
    project: str | None = None
    label: str | None = None
    columns: tuple = ()
    exclude: tuple = ()
    column_types: tuple = ()  # (name, type) pairs, CSV only
    split: splits_lib.Split = splits_lib.Split("random")
    key: str | None = None
    seed: int = 0
    num_shards: int = 0  # per split; 0: from the data size
    fake_gcs_root: str | None = None

    def __post_init__(self) -> None:
        given = [f for f in ("input", "bigquery_table", "bigquery_query") if getattr(self, f)]
        if len(given) != 1:
            raise PrepareError(
                "give exactly one of --input, --bigquery_table, "
                f"--bigquery_query (given: {', '.join(given) or 'none'})"
            )
        if not self.output:
            raise PrepareError("--output is required: the folder (local or gs://) to write")
        if self.num_shards < 0:
            raise PrepareError(f"--num_shards={self.num_shards}: expected 0 (automatic) or more")
        for name, kind in self.column_types:
            if kind not in sources_lib.COLUMN_TYPES:
                raise PrepareError(
                    f"--column_types: {name}:{kind}: expected one of "
                    f"{', '.join(sources_lib.COLUMN_TYPES)}"
                )
        if self.column_types and not self.input:
            raise PrepareError("--column_types applies to CSV input only")


def parse_column_types(items: list[str]) -> tuple:
    """`name:type` items of --column_types as pairs.

    Raises:
      PrepareError: naming the item that is not name:type.
    """
    out = []
    for item in items:
        name, sep, kind = item.rpartition(":")
        if not sep or not name:
            raise PrepareError(f"--column_types: {item!r}: expected COLUMN:TYPE")
        out.append((name, kind))
    return tuple(out)
