"""trainer.prepare: CSV, Parquet and (intercepted) BigQuery tables to TFRecords, with
Vertex's splits, in process and on Beam's DirectRunner."""

from __future__ import annotations

import csv
import datetime
import decimal
import glob
import json
import os
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from trainer.base import storage as storage_lib
from trainer.data import inference
from trainer.prep import beam as beam_lib
from trainer.prep import bigquery as bigquery_lib
from trainer.prep import local, splits
from trainer.prep.errors import PrepareError
from trainer.prep.options import Options

from conftest import run_python

STORE = storage_lib.Storage()
NAMES = ("train", "validation", "test")


def examples(folder: str, split: str) -> list[dict]:
    """Every record of a split as {feature: [values]}, in file order."""
    out = []
    for f in sorted(glob.glob(os.path.join(folder, f"{split}-*.tfrecord"))):
        for r in tf.data.TFRecordDataset(f):
            ex = tf.train.Example.FromString(r.numpy())
            out.append(
                {
                    k: list(getattr(v, v.WhichOneof("kind")).value)
                    for k, v in ex.features.feature.items()
                }
            )
    return out


def all_examples(folder: str) -> list[dict]:
    return [e for s in NAMES for e in examples(folder, s)]


def raw_records(folder: str, split: str) -> list[bytes]:
    return sorted(
        r.numpy()
        for f in glob.glob(os.path.join(folder, f"{split}-*"))
        for r in tf.data.TFRecordDataset(f)
    )


def prepare(tmp_path, name="out", **kw) -> tuple[str, dict]:
    out = str(tmp_path / name)
    report = local.run(Options(output=out, **kw), STORE)
    assert json.load(open(os.path.join(out, "prepare.json"))) == report
    return out, report


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_python("-m", "trainer.prepare", *args)


def write_csv(path, header, rows) -> str:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def by_id(exs: list[dict]) -> dict:
    return {e["id"][0]: e for e in exs}


# --- Types ----------------------------------------------------------------------------


def test_csv_round_trip_covers_every_type_and_missing_value(tmp_path):
    rows = [
        [1, "2.5", "red", "true", "2024-01-02", "2024-01-02 03:04:05", "7"],
        [2, "", "", "false", "2024-03-01", "", "-3"],
        [3, "-1e3", "NA", "", "", "1970-01-01 00:00:01", ""],
        [4, "0.1", "multi\nline, quoted", "true", "1969-12-31", "2000-02-29 23:59:59", "0"],
    ]
    path = write_csv(tmp_path / "t.csv", ["id", "f", "s", "b", "d", "ts", "y"], rows)
    out, report = prepare(
        tmp_path, input=path, label="y", split=splits.Split("random", (1.0, 0.0, 0.0))
    )
    got = by_id(all_examples(out))
    # Expected, computed from the rows by hand-written rules (docs/guide/data.md).
    day = datetime.date(1970, 1, 1)
    epoch = datetime.datetime(1970, 1, 1)
    assert got[1] == {
        "id": [1],
        "f": [pytest.approx(2.5)],
        "s": [b"red"],
        "b": [1],
        "d": [(datetime.date(2024, 1, 2) - day).days],
        "ts": [int((datetime.datetime(2024, 1, 2, 3, 4, 5) - epoch).total_seconds())],
        "y": [7],
    }
    assert got[2] == {"id": [2], "b": [0], "d": [(datetime.date(2024, 3, 1) - day).days], "y": [-3]}
    assert got[4]["s"] == [b"multi\nline, quoted"] and got[4]["d"] == [-1]
    assert got[4]["ts"] == [951868799]
    assert 3 not in got  # no label: left out, and counted
    assert report["rows"] == {"read": 4, "without_label": 1, "train": 3, "validation": 0, "test": 0}
    types = {c["name"]: c["dtype"] for c in report["columns"]}
    assert types == {
        "id": "int",
        "f": "float",
        "s": "string",
        "b": "int",
        "d": "int",
        "ts": "int",
        "y": "int",
    }


def parquet_table(n: int = 40) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.uint32)),
            "x": pa.array([None if i % 5 == 0 else float(rng.normal()) for i in range(n)]),
            "nan": pa.array([float("nan") if i % 2 else 1.5 for i in range(n)], pa.float32()),
            "tags": pa.array(
                [None if i % 7 == 0 else [f"t{j}" for j in range(i % 4)] for i in range(n)],
                pa.list_(pa.string()),
            ),
            "scores": pa.array([[1.0, None, float(i)] for i in range(n)], pa.list_(pa.float64())),
            "matrix": pa.array(
                [[[i], [i, i + 1]] for i in range(n)], pa.list_(pa.list_(pa.int64()))
            ),
            "geo": pa.array(
                [None if i % 6 == 0 else {"lat": float(i), "city": f"c{i % 3}"} for i in range(n)]
            ),
            "visits": pa.array(
                [[{"page": "home", "ms": i}, {"page": None, "ms": 2 * i}] for i in range(n)]
            ),
            "color": pa.array([["red", "blue"][i % 2] for i in range(n)]).dictionary_encode(),
            "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(10, 2)),
            "at": pa.array(
                [
                    datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone.utc)
                    + datetime.timedelta(seconds=37 * i)
                    for i in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "y": pa.array([i % 3 == 0 for i in range(n)]),
        }
    )


def test_parquet_round_trip_lists_nested_and_typed_columns(tmp_path):
    table = parquet_table()
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=16)
    out, report = prepare(tmp_path, input=str(tmp_path / "t.parquet"), label="y")
    got = by_id(all_examples(out))
    assert len(got) == table.num_rows  # every row once across the splits
    for row in table.to_pylist():
        want = {
            "id": [row["id"]],
            "y": [int(row["y"])],
            "color": [row["color"].encode()],
            "price": [pytest.approx(float(row["price"]))],
            "at": [int(row["at"].timestamp())],
            "scores": [pytest.approx(v) for v in row["scores"] if v is not None],
            "matrix": [v for inner in row["matrix"] for v in inner],
            "visits_page": [b"home"],
            "visits_ms": [v["ms"] for v in row["visits"]],
        }
        if row["x"] is not None:
            want["x"] = [pytest.approx(row["x"])]
        if row["nan"] == row["nan"]:
            want["nan"] = [1.5]
        if row["tags"]:
            want["tags"] = [t.encode() for t in row["tags"]]
        if row["geo"] is not None:
            want["geo_lat"] = [pytest.approx(row["geo"]["lat"])]
            want["geo_city"] = [row["geo"]["city"].encode()]
        assert got[row["id"]] == want, row["id"]
    kinds = {c["name"]: (c["dtype"], c["list"]) for c in report["columns"]}
    assert kinds["tags"] == ("string", True) and kinds["geo_lat"] == ("float", False)
    assert kinds["visits_ms"] == ("int", True) and kinds["y"] == ("int", False)


def test_encoding_matches_protobuf_serialization_byte_for_byte(tmp_path):
    # One feature per record, so map order cannot differ: the bytes must be the same.
    values = [0, 1, -1, 127, 128, 2**40, -(2**63), 2**63 - 1]
    pq.write_table(pa.table({"v": values}), tmp_path / "v.parquet")
    out, _ = prepare(
        tmp_path,
        input=str(tmp_path / "v.parquet"),
        num_shards=1,
        split=splits.Split("random", (1.0, 0.0, 0.0)),
    )
    want = sorted(
        tf.train.Example(
            features=tf.train.Features(
                feature={"v": tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))}
            )
        ).SerializeToString()
        for v in values
    )
    assert raw_records(out, "train") == want


def test_trainer_schema_agrees_with_prepare_json(tmp_path):
    pq.write_table(parquet_table(60), tmp_path / "t.parquet")
    out, report = prepare(tmp_path, input=str(tmp_path / "t.parquet"), label="y")
    records = [
        (f, r.numpy()) for f in glob.glob(f"{out}/*.tfrecord") for r in tf.data.TFRecordDataset(f)
    ]
    inferred = inference.infer(records, label="y", task="binary")
    said = {c["name"]: c for c in report["columns"]}
    for f in inferred.features:
        assert f.dtype == said[f.name]["dtype"], f.name
        if f.varlen:
            assert said[f.name]["list"], f.name
    assert inferred.label.dtype == said["y"]["dtype"]
    assert {f.name for f in inferred.features} | {"y"} == set(said)


# --- Splits ---------------------------------------------------------------------------


def numbers_csv(path, ids, label=lambda i: i % 2) -> str:
    return write_csv(path, ["id", "x", "y"], [[i, i * 0.5, label(i)] for i in ids])


def test_random_split_proportions_and_purity(tmp_path):
    n = 20_000
    path = numbers_csv(tmp_path / "a.csv", range(n))
    out, report = prepare(tmp_path, input=path, label="y")
    for name, f in zip(NAMES, (0.8, 0.1, 0.1)):
        # Binomial: within 4 standard deviations.
        assert abs(report["rows"][name] - f * n) <= 4 * np.sqrt(n * f * (1 - f)), name
    ids = {s: {e["id"][0] for e in examples(out, s)} for s in NAMES}
    assert sum(map(len, ids.values())) == n and len(set.union(*ids.values())) == n
    # Rows shuffled into two files, more rows added, other shard counts: no row moves.
    order = np.random.default_rng(0).permutation(n + 3000)
    numbers_csv(tmp_path / "b1.csv", [int(i) for i in order[:9000]])
    numbers_csv(tmp_path / "b2.csv", [int(i) for i in order[9000:]])
    out2, _ = prepare(tmp_path, "out2", input=str(tmp_path / "b*.csv"), label="y", num_shards=3)
    ids2 = {s: {e["id"][0] for e in examples(out2, s)} for s in NAMES}
    for s in NAMES:
        assert ids[s] <= ids2[s], s
    assert len(glob.glob(f"{out2}/train-*-of-00003.tfrecord")) == 3
    # Re-running writes the same files, byte for byte.
    out3, _ = prepare(tmp_path, "out3", input=path, label="y")
    for s in NAMES:
        assert raw_records(out3, s) == raw_records(out, s)
    # Another seed is another split.
    out4, _ = prepare(tmp_path, "out4", input=path, label="y", seed=1)
    assert {e["id"][0] for e in examples(out4, "test")} != ids["test"]


def test_key_column_decides_the_split(tmp_path):
    numbers_csv(tmp_path / "a.csv", range(500))
    write_csv(tmp_path / "b.csv", ["id", "x", "y"], [[i, -1.0, 0] for i in range(500)])
    a, _ = prepare(tmp_path, "a", input=str(tmp_path / "a.csv"), label="y", key="id")
    b, _ = prepare(tmp_path, "b", input=str(tmp_path / "b.csv"), label="y", key="id")
    for s in NAMES:  # other values, same ids: same splits
        assert {e["id"][0] for e in examples(a, s)} == {e["id"][0] for e in examples(b, s)}


def test_stratified_split_cuts_every_class(tmp_path):
    # Classes of 1,000, 100 and 10 rows: each split gets its fraction of each, +-1 row.
    label = lambda i: "a" if i < 1000 else ("b" if i < 1100 else "c")  # noqa: E731
    path = numbers_csv(tmp_path / "s.csv", range(1110), label)
    out, report = prepare(
        tmp_path, input=path, label="y", split=splits.parse("stratified:0.6,0.2,0.2")
    )
    for s, f in zip(NAMES, (0.6, 0.2, 0.2)):
        got = [e["y"][0] for e in examples(out, s)]
        for cls, size in ((b"a", 1000), (b"b", 100), (b"c", 10)):
            assert abs(got.count(cls) - f * size) <= 1, (s, cls)
    assert report["rows"]["train"] + report["rows"]["validation"] + report["rows"]["test"] == 1110


def test_timestamp_split_puts_the_latest_rows_in_test(tmp_path):
    start = datetime.datetime(2024, 1, 1)
    order = np.random.default_rng(1).permutation(1000)
    rows = [
        [int(i), (start + datetime.timedelta(hours=int(i))).isoformat(" "), i % 2] for i in order
    ]
    path = write_csv(tmp_path / "t.csv", ["id", "when", "y"], rows)
    out, report = prepare(
        tmp_path, input=path, label="y", split=splits.parse("timestamp:when:0.8,0.1,0.1")
    )
    times = {s: sorted(e["when"][0] for e in examples(out, s)) for s in NAMES}
    assert [len(times[s]) for s in NAMES] == [800, 100, 100]
    assert times["train"][-1] < times["validation"][0] <= times["validation"][-1] < times["test"][0]


def test_predefined_split_column(tmp_path):
    values = ["TRAIN", "validate", "Test", "training", "VALIDATION", "test"]
    rows = [[i, float(i), values[i % 6], i % 2] for i in range(60)]
    path = write_csv(tmp_path / "p.csv", ["id", "x", "which", "y"], rows)
    out, report = prepare(tmp_path, input=path, label="y", split=splits.parse("column:which"))
    assert [report["rows"][s] for s in NAMES] == [20, 20, 20]
    assert {e["id"][0] % 3 for e in examples(out, "validation")} == {1}
    assert all("which" not in e for e in all_examples(out))  # not a feature
    rows[7][2] = "holdout"
    write_csv(tmp_path / "p.csv", ["id", "x", "which", "y"], rows)
    with pytest.raises(PrepareError, match=r"'which' holds 'holdout'; expected TRAIN"):
        prepare(tmp_path, "bad", input=path, label="y", split=splits.parse("column:which"))
    assert not glob.glob(str(tmp_path / "bad*"))


# --- Beam -----------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["random:0.7,0.2,0.1", "stratified:0.8,0.1,0.1"])
def test_direct_runner_writes_what_the_local_runner_writes(tmp_path, split):
    table = parquet_table(300)
    pq.write_table(table.slice(0, 170), tmp_path / "p1.parquet", row_group_size=50)
    pq.write_table(table.slice(170), tmp_path / "p2.parquet", row_group_size=50)
    options = Options(
        output=str(tmp_path / "beam"),
        input=str(tmp_path / "p*.parquet"),
        label="y",
        split=splits.parse(split),
        num_shards=2,
    )
    report = beam_lib.run(
        options, STORE, beam_lib.pipeline_options("DirectRunner", None, None, None)
    )
    loc, local_report = prepare(
        tmp_path,
        "local",
        input=str(tmp_path / "p*.parquet"),
        label="y",
        split=splits.parse(split),
        num_shards=2,
    )
    for s in NAMES:
        assert raw_records(str(tmp_path / "beam"), s) == raw_records(loc, s), s
    assert report["rows"] == local_report["rows"]
    assert report["files"] == local_report["files"]


def test_dataflow_dry_run_prints_options_and_plan(tmp_path):
    numbers_csv(tmp_path / "a.csv", range(50))
    fake = tmp_path / "gcs"
    (fake / "bucket").mkdir(parents=True)
    proc = run_cli(
        f"--input={tmp_path}/a.csv",
        "--label=y",
        "--output=gs://bucket/prep",
        "--runner=DataflowRunner",
        "--project=p",
        "--region=us-central1",
        "--temp_location=gs://bucket/tmp",
        "--dry_run",
        f"--fake_gcs_root={fake}",
    )
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["pipeline_options"]["runner"] == "DataflowRunner"
    assert printed["pipeline_options"]["region"] == "us-central1"
    assert printed["plan"]["shards"] == {"train": 1, "validation": 1, "test": 1}
    assert not os.listdir(fake / "bucket")  # nothing written


# --- BigQuery, intercepted at the client boundary -------------------------------------


class FakeBigQuery:
    """bigquery.Client and BigQueryReadClient as far as trainer.prep.bigquery uses them."""

    def __init__(self, table: pa.Table, streams: int = 2) -> None:
        self.table, self.streams, self.queries, self.sessions = table, streams, [], []

    def query(self, sql, job_config):
        self.queries.append((sql, job_config.use_legacy_sql))
        dest = type("Ref", (), {"project": "p", "dataset_id": "_anon", "table_id": "res"})
        return type("Job", (), {"result": lambda self: None, "destination": dest})()

    def create_read_session(self, parent, read_session, max_stream_count):
        from google.cloud.bigquery_storage_v1 import types

        self.sessions.append((parent, read_session.table, read_session.data_format))
        return types.ReadSession(
            name="s",
            streams=[types.ReadStream(name=f"s/{i}") for i in range(self.streams)],
            estimated_row_count=self.table.num_rows,
        )

    def read_rows(self, stream):
        i = int(stream.split("/")[1])
        batches = self.table.to_batches(max_chunksize=7)[i :: self.streams]
        page = lambda b: type("Page", (), {"to_arrow": lambda self: b})()  # noqa: E731
        rows = type("Rows", (), {"pages": [page(b) for b in batches]})()
        return type("Reader", (), {"rows": lambda self, session: rows})()


@pytest.fixture
def bigquery(monkeypatch):
    fake = FakeBigQuery(parquet_table(50))
    monkeypatch.setattr(bigquery_lib, "clients", lambda project: (fake, fake))
    return fake


def test_bigquery_table_reads_every_stream(tmp_path, bigquery):
    out, report = prepare(tmp_path, bigquery_table="proj.ds.tbl", label="y")
    from google.cloud.bigquery_storage_v1 import types

    assert bigquery.sessions == [
        ("projects/proj", "projects/proj/datasets/ds/tables/tbl", types.DataFormat.ARROW)
    ]
    assert sorted(by_id(all_examples(out))) == list(range(50))
    assert report["source"] == "BigQuery proj.ds.tbl"


def test_bigquery_query_runs_as_standard_sql_billed_to_project(tmp_path, bigquery):
    out, report = prepare(tmp_path, bigquery_query="SELECT * FROM t", project="bill", label="y")
    assert bigquery.queries == [("SELECT * FROM t", False)]
    assert bigquery.sessions[0][:2] == ("projects/bill", "projects/p/datasets/_anon/tables/res")
    assert sum(report["rows"][s] for s in NAMES) == 50


# --- Bad input: one line, exit 2, nothing written -------------------------------------

BAD = {
    "ragged": (
        ["a,b,y", "1,2,0", "3,4,1", "5,6", "7,8,1"],
        [],
        r"bad\.csv:4: expected 3 columns as in the header, got 2",
    ),
    # Types come from the first file's first block, so the odd value is in a later file.
    "type": (
        {"bad.csv": ["a,b,y", "1,2,1"], "bad2.csv": ["a,b,y", "3,4,1", "x7,1,0"]},
        [],
        r"bad2\.csv:3: column 'a' holds 'x7', not a int64 like its first values; "
        r"to read it as text, pass --column_types=a:string",
    ),
    "empty": (["a,b,y"], [], r"bad\.csv: no rows under the header"),
    "label": (
        ["a,b,y", "1,2,3"],
        ["--label=price"],
        r"--label: 'price' is not a column of .*bad\.csv \(columns: a, b, y\)",
    ),
    "fractions": (
        ["a,b,y", "1,2,3"],
        ["--split=random:0.8,0.3,0.1"],
        r"--split='random:0.8,0.3,0.1': expected three fractions .* sum to 1",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, case):
    files, flags, message = BAD[case]
    files = files if isinstance(files, dict) else {"bad.csv": files}
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    proc = run_cli(f"--input={tmp_path}/bad*.csv", f"--output={tmp_path}/out", "--label=y", *flags)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    import re

    assert re.search(message, errors[0]), errors[0]
    assert sorted(os.listdir(tmp_path)) == sorted(files)
    assert "WARNING: All log messages" not in proc.stderr  # TensorFlow's start-up, hidden


def test_failure_in_a_later_file_leaves_no_output(tmp_path):
    numbers_csv(tmp_path / "a1.csv", range(100))
    write_csv(tmp_path / "a2.csv", ["id", "x", "y"], [[1, "abc", 0]])
    with pytest.raises(PrepareError, match=r"a2\.csv:2: column 'x' holds 'abc'"):
        prepare(tmp_path, input=str(tmp_path / "a*.csv"), label="y")
    assert sorted(os.listdir(tmp_path)) == ["a1.csv", "a2.csv"]


# --- Prepared data trains: the commands of docs/guide/data.md -----------------------------


def train(out: str, job: str, task: str, label: str) -> str:
    from conftest import run_task

    proc = run_task(
        [
            f"--train_data={out}/train-*",
            f"--validation_data={out}/validation-*",
            f"--label={label}",
            f"--task={task}",
            f"--job_dir={job}",
            "--train_steps=20",
            "--batch_size=16",
            "--hidden_units=8",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return os.path.join(job, "model")


def test_csv_over_gcs_prepares_trains_and_exports(tmp_path):
    fake = tmp_path / "gcs"
    (fake / "bkt" / "raw").mkdir(parents=True)
    rng = np.random.default_rng(5)
    rows = [[round(float(rng.normal()), 3), ["red", "blue", ""][i % 3], i % 2] for i in range(400)]
    write_csv(fake / "bkt" / "raw" / "part-1.csv", ["x", "color", "y"], rows[:200])
    write_csv(fake / "bkt" / "raw" / "part-2.csv", ["x", "color", "y"], rows[200:])
    proc = run_cli(
        "--input=gs://bkt/raw/*.csv",
        "--label=y",
        "--output=gs://bkt/prep",
        f"--fake_gcs_root={fake}",
    )
    assert proc.returncode == 0, proc.stderr
    out = str(fake / "bkt" / "prep")
    counts = json.load(open(f"{out}/prepare.json"))["rows"]
    assert counts["train"] + counts["validation"] + counts["test"] == 400
    model = train(out, str(tmp_path / "job"), "binary", "y")
    records = raw_records(out, "test")[:3]
    from conftest import predict_in_subprocess

    assert len(predict_in_subprocess(model, records)["probabilities"]) == 3


def test_parquet_with_lists_and_nested_columns_trains(tmp_path):
    pq.write_table(parquet_table(200), tmp_path / "t.parquet")
    out, report = prepare(tmp_path, input=str(tmp_path / "t.parquet"), label="y", exclude=("id",))
    assert sum(report["rows"][s] for s in NAMES) == 200
    model = train(out, str(tmp_path / "job"), "binary", "y")
    assert os.path.exists(os.path.join(model, "saved_model.pb"))


def test_bigquery_table_trains(tmp_path, bigquery):
    bigquery.table = (
        parquet_table(120)
        .drop_columns(["y"])
        .append_column("amount", pa.array(np.arange(120, dtype=np.float64)))
    )
    out, report = prepare(tmp_path, bigquery_table="proj.ds.sales", label="amount")
    assert sum(report["rows"][s] for s in NAMES) == 120
    model = train(out, str(tmp_path / "job"), "regression", "amount")
    assert os.path.exists(os.path.join(model, "saved_model.pb"))


def test_direct_runner_reads_bigquery_streams_like_the_local_runner(tmp_path, bigquery):
    options = Options(
        output=str(tmp_path / "beam"), bigquery_table="proj.ds.tbl", label="y", num_shards=1
    )
    report = beam_lib.run(
        options, STORE, beam_lib.pipeline_options("DirectRunner", None, None, None)
    )
    loc, local_report = prepare(
        tmp_path, "local", bigquery_table="proj.ds.tbl", label="y", num_shards=1
    )
    for s in NAMES:
        assert raw_records(str(tmp_path / "beam"), s) == raw_records(loc, s), s
    assert report["rows"] == local_report["rows"]
