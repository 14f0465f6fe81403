"""Property-based fuzzing (Hypothesis) of every parser of outside input: prediction
bodies (in-process and through the HTTP server), serialized Examples, TF_CONFIG and
CLUSTER_SPEC, schema.json, CSV tables for trainer.prepare and TFRecord files.

The property is the same everywhere: a good answer, or the parser's own error with one
line; never another exception, a 5xx or a dropped connection. Each test is bounded (a
few dozen to a few hundred examples, derandomized so CI is repeatable);
TRAINER_FUZZ_EXAMPLES=N runs N per test with fresh randomness.
"""

from __future__ import annotations

import base64
import http.client
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_predict import predict

from trainer.data import schema as schema_lib
from trainer.prep import errors as prep_errors
from trainer.prep import local as prep_local
from trainer.prep import options as prep_options
from trainer.prep import splits as prep_splits
from trainer.serving import bodies
from trainer.train import distribution

from conftest import data_globs, read_records

LONG = int(os.environ.get("TRAINER_FUZZ_EXAMPLES", "0"))


def bounded(examples: int):
    """Hypothesis settings: `examples` per test in CI (repeatable), or the long run's."""
    return settings(
        max_examples=LONG or examples,
        derandomize=not LONG,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def one_line(error: Exception) -> None:
    text = str(error)
    assert text and "\n" not in text, repr(text)


# JSON values: what json.loads can hand a parser.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["instances", "inputs", "parameters", "signature_name", "b64", "examples", "x", "c"]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def model_and_records(store, exported):
    """The binary export, loaded, and a few of its serialized test Examples."""
    return (
        tf.saved_model.load(exported["binary"]),
        read_records(store, data_globs("binary")[1], 8),
        exported["binary"],
    )


def mutate(record: bytes, positions: list[int], values: list[int], cut: int) -> bytes:
    data = bytearray(record)
    for at, value in zip(positions, values):
        data[at % len(data)] = value
    return bytes(data[: max(1, len(data) - cut)])


mutations = st.tuples(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=8),
    st.lists(st.integers(0, 255), min_size=8, max_size=8),
    st.integers(0, 40),
)


@bounded(300)
@given(body=json_values)
def test_any_json_body_is_answered_or_one_line(model_and_records, body):
    model, _, _ = model_and_records
    try:
        answer = bodies.answer(body, model)
    except bodies.BodyError as e:
        one_line(e)
    else:
        assert isinstance(answer["predictions"], list)


@bounded(300)
@given(mutation=mutations, which=st.integers(0, 7))
def test_corrupted_serialized_examples_are_answered_or_named(model_and_records, mutation, which):
    model, records, _ = model_and_records
    bad = mutate(records[which], *mutation)
    body = {"instances": [{"b64": base64.b64encode(r).decode()} for r in (records[0], bad)]}
    try:
        answer = bodies.answer(body, model)
    except bodies.BodyError as e:
        one_line(e)
        assert str(e).startswith("instances[1]"), str(e)  # the good one is never blamed
    else:
        assert len(answer["predictions"]) == 2


@pytest.fixture(scope="module")
def server(exported):
    from test_serve import Server

    started = Server(f"--model_dir={exported['binary']}", "--port=0", "--processes=1")
    try:
        started.wait_ready()
        yield started
    finally:
        started.stop()


def raw_bodies(records: list[bytes], model_dir: str, model) -> st.SearchStrategy[bytes]:
    """Bodies as bytes: random bytes, cut or flipped good JSON, nesting, wrong types."""
    good = [
        json.dumps(predict.vertex_body(records[:2])).encode(),
        json.dumps(predict.raw_body(records[:2], model_dir, model)).encode(),
    ]

    def flip(i: int, positions: list[int], values: list[int], cut: int) -> bytes:
        return mutate(good[i % 2], positions, values, cut)

    return st.one_of(
        st.binary(max_size=200),
        st.builds(flip, st.integers(0, 1), *mutations.wrapped_strategy.element_strategies),
        st.builds(lambda depth: b"[" * depth + b"]" * depth, st.integers(1, 50_000)),
        json_values.map(lambda v: json.dumps(v).encode()),
    )


@bounded(200)
@given(data=st.data())
def test_the_server_answers_every_body_with_a_4xx_line_or_a_200(server, model_and_records, data):
    model, records, model_dir = model_and_records
    body = data.draw(raw_bodies(records, model_dir, model))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("POST", "/predict", body=body)
        response = conn.getresponse()  # a dropped connection raises here
        answer = json.loads(response.read())
    finally:
        conn.close()
    assert response.status == 200 or 400 <= response.status < 500, (response.status, answer)
    if response.status != 200:
        assert set(answer) == {"error"} and "\n" not in answer["error"], answer


def test_after_the_fuzzing_a_good_body_is_answered_as_before(server, model_and_records):
    model, records, _ = model_and_records
    body = predict.vertex_body(records[:4])
    expected = bodies.answer(body, model)
    status, answer = server.request("POST", "/predict", body)
    assert status == 200
    got = np.array([p["probabilities"] for p in answer["predictions"]])
    want = np.array([p["probabilities"] for p in expected["predictions"]])
    assert np.max(np.abs(got - want)) <= 1e-6


@bounded(300)
@given(
    value=json_values | st.text(max_size=60), name=st.sampled_from(["TF_CONFIG", "CLUSTER_SPEC"])
)
def test_cluster_variables_are_read_or_one_line(value, name):
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        distribution.read_cluster({name: text})
    except distribution.ClusterError as e:
        one_line(e)


@bounded(300)
@given(obj=json_values, task=st.sampled_from(["regression", "binary", "multiclass"]))
def test_schema_json_is_read_or_one_line(obj, task):
    try:
        schema_lib.from_json(obj, "gs://b/schema.json", "label", task)
    except schema_lib.SchemaError as e:
        one_line(e)
        assert str(e).startswith("schema gs://b/schema.json")


cells = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "NA", "null", "1e309", "-0", "nan", '"quoted, comma"', '"line\nbreak"']),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True).map(str),
    st.just("x" * 100_000),  # a huge field
)


@bounded(40)
@given(
    header=st.lists(st.sampled_from(["a", "b", "y", "", "a ", "ü"]), min_size=1, max_size=4),
    rows=st.lists(st.lists(cells, min_size=0, max_size=5), max_size=12),
    bom=st.booleans(),
    encoding=st.sampled_from(["utf-8", "latin-1", "utf-16"]),
)
def test_csv_tables_prepare_or_fail_in_one_line(
    tmp_path_factory, store, header, rows, bom, encoding
):
    folder = tmp_path_factory.mktemp("csv")
    text = "\n".join(",".join(r) for r in [header, *rows]) + "\n"
    data = ("\ufeff" if bom else "") + text
    (folder / "t.csv").write_bytes(data.encode(encoding, errors="replace"))
    prepared_or_one_line(store, folder / "t.csv")


def prepared_or_one_line(store, table) -> None:
    """trainer.prepare's local run on the file `table`: done, or its one-line error."""
    options = prep_options.Options(
        output=str(table.parent / "out"),
        input=str(table),
        label="y",
        split=prep_splits.parse("random:0.8,0.1,0.1"),
    )
    try:
        prep_local.run(options, store)
    except prep_errors.PrepareError as e:
        one_line(e)


@bounded(60)
@given(mutation=mutations)
def test_corrupt_tfrecord_files_are_one_line_errors_naming_the_file(
    tmp_path_factory, store, mutation
):
    from trainer.data import inputs, records, scan

    good = store.read_bytes(store.glob(data_globs("binary")[1])[0])
    path = str(tmp_path_factory.mktemp("tfrecord") / "part-0.tfrecord")
    with open(path, "wb") as f:
        f.write(mutate(good, *mutation))
    try:
        # What the job does when it counts its records: TensorFlow's error, named.
        with scan.naming_bad_records(store, [path], None):
            assert records.count([path], skip_corrupt=False) >= 0
    except inputs.DataError as e:
        one_line(e)
        assert str(e).startswith(f"{path}: ") or str(e).startswith(f"{path} record ")


parquet_columns = st.lists(
    st.tuples(
        st.sampled_from(["y", "y", "y", "a", "b", "c.d", "", "ü"]),
        st.sampled_from(
            [
                "int64",
                "float64",
                "string",
                "bool",
                "list<int64>",
                "struct",
                "null",
                "timestamp",
                "binary",
                "decimal",
                "dictionary",
                "list<list<float64>>",
            ]
        ),
        st.integers(0, 2**31),
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda column: column[0],
)


def parquet_column(kind: str, rows: int, seed: int):
    import datetime
    import decimal

    import pyarrow as pa

    rng = np.random.default_rng(seed)
    holes = rng.random(rows) < 0.2
    pick = lambda values: [None if h else v for h, v in zip(holes, values)]  # noqa: E731
    if kind == "int64":
        return pa.array(pick(rng.integers(-(2**62), 2**62, rows).tolist()), pa.int64())
    if kind == "float64":
        return pa.array(pick(rng.choice([0.5, np.inf, -np.inf, np.nan, 1e308], rows).tolist()))
    if kind == "string":
        return pa.array(pick(rng.choice(["x", "", "é", "a\nb", "z" * 1000], rows).tolist()))
    if kind == "bool":
        return pa.array(pick(rng.random(rows) < 0.5))
    if kind == "list<int64>":
        return pa.array(pick([list(range(int(n))) for n in rng.integers(0, 4, rows)]))
    if kind == "list<list<float64>>":
        return pa.array(pick([[[1.0] * int(n)] for n in rng.integers(0, 3, rows)]))
    if kind == "struct":
        return pa.array(pick([{"p": int(n), "q": "s"} for n in rng.integers(0, 9, rows)]))
    if kind == "timestamp":
        return pa.array(pick([datetime.datetime(2020, 1, 1)] * rows), pa.timestamp("us"))
    if kind == "binary":
        return pa.array(pick([bytes(rng.integers(0, 256, 4).tolist())] * rows), pa.binary())
    if kind == "decimal":
        return pa.array(pick([decimal.Decimal("1.25")] * rows), pa.decimal128(5, 2))
    if kind == "dictionary":
        return pa.array(pick(rng.choice(["u", "v"], rows).tolist())).dictionary_encode()
    return pa.nulls(rows)


@bounded(40)
@given(columns=parquet_columns, rows=st.integers(0, 30))
def test_parquet_tables_prepare_or_fail_in_one_line(tmp_path_factory, store, columns, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("parquet")
    names = [name for name, _, _ in columns]
    arrays = [parquet_column(kind, rows, seed) for _, kind, seed in columns]
    try:
        table = pa.table(dict(zip(names, arrays)))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        table = None
    if table is None:  # a table Arrow itself cannot make: nothing to prepare
        return
    try:
        pq.write_table(table, folder / "t.parquet")
    except pa.ArrowNotImplementedError:  # e.g. a dictionary of nulls: Parquet cannot hold it
        return
    prepared_or_one_line(store, folder / "t.parquet")


FLAG_LINES = [
    "--label=y",
    "--task=binary",
    "--task=ranking",
    "--train_steps=abc",
    "--batch_size=-5",
    "--unknown_flag=1",
    "--label",
    "--noshuffle",
    "--flagfile=/nonexistent/flags.txt",
    "--hidden_units=1,,2",
    "# a comment",
    "",
    "--learning_rate=1e999",
]


def test_flag_files_are_read_or_one_line(tmp_path):
    """absl's flag parser on generated --flagfile contents, in a process of its own (the
    job's flags are process-wide): exit 0 or 2 with one line, never a traceback."""
    import subprocess
    import sys

    from conftest import REPO, subprocess_env

    script = f"""
import os, sys, tempfile
from absl import flags
from hypothesis import given, settings, strategies as st
import trainer.task
from trainer.base import cli

lines = st.sampled_from({FLAG_LINES!r}) | st.text(max_size=30).map(lambda t: "--" + t)

@settings(max_examples={LONG or 150}, derandomize={not LONG}, deadline=None, database=None)
@given(st.lists(lines, max_size=6))
def check(content):
    path = os.path.join({str(tmp_path)!r}, "job.flags")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.write("\\n".join(content))
    try:
        cli.parse_flags(["task", "--flagfile=" + path])
    except SystemExit as e:
        assert e.code in (0, 2), (content, e.code)
    finally:
        flags.FLAGS.unparse_flags()

check()
print("ok")
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors  # the bad lines were seen and named, each in one line
