"""Storage: gs:// served from a fake root: paths, globs, listing, atomic writes."""

import errno
import logging
import os

import pytest
import tensorflow as tf

from trainer.base import storage as storage_lib


@pytest.fixture
def root(tmp_path):
    os.makedirs(tmp_path / "bkt" / "data")
    for name in ("b.txt", "a.txt", "c.bin"):
        (tmp_path / "bkt" / "data" / name).write_text(name)
    return str(tmp_path)


def test_gcs_paths_map_into_the_root_and_back(root):
    s = storage_lib.Storage(root)
    assert s.path("gs://bkt/data/a.txt") == os.path.join(root, "bkt", "data", "a.txt")
    assert s.uri(s.path("gs://bkt/data/a.txt")) == "gs://bkt/data/a.txt"
    assert s.path("/local/file") == "/local/file"
    assert storage_lib.Storage().path("gs://bkt/x") == "gs://bkt/x"  # real GCS untouched


def test_gcs_mount_paths_name_the_same_objects(root):
    s = storage_lib.Storage(root)
    assert s.path("/gcs/bkt/data/a.txt") == s.path("gs://bkt/data/a.txt")
    assert s.glob("/gcs/bkt/data/*.txt") == ["gs://bkt/data/a.txt", "gs://bkt/data/b.txt"]
    s.write_json("/gcs/bkt/out/m.json", {"a": 1})
    assert s.read_json("gs://bkt/out/m.json") == {"a": 1}
    with pytest.raises(storage_lib.StorageError, match="bucket 'nope' of '/gcs/nope/x'"):
        s.makedirs("/gcs/nope/x")
    # Without a fake root, through Cloud Storage's API (atomic object writes), not the
    # mount (whose renames are copies).
    assert storage_lib.Storage().path("/gcs/bkt/x") == "gs://bkt/x"
    assert storage_lib.split_gcs("/gcs/bkt/a/b") == ("bkt", "a/b")
    assert not storage_lib.is_gcs("/gcsx/bkt") and not storage_lib.is_gcs("gcs/bkt")


@pytest.mark.parametrize(
    "uri, fragment",
    [
        ("gs://../etc/passwd", "'..' is not a Cloud Storage bucket name"),
        ("gs://./x", "'.' is not a Cloud Storage bucket name"),
        ("/gcs/../x", "'..' is not a Cloud Storage bucket name"),
        ("gs://Bkt/x", "'Bkt' is not a Cloud Storage bucket name"),
        ("gs://ab/x", "'ab' is not a Cloud Storage bucket name"),
        ("gs://bkt-/x", "'bkt-' is not a Cloud Storage bucket name"),
        ("gs://bk..t/x", "'bk..t' is not a Cloud Storage bucket name"),
        ("gs://bkt/../../x", "an object name with '.' or '..' segments"),
        ("gs://bkt/data/../../../x", "an object name with '.' or '..' segments"),
        ("gs://bkt/./data/a.txt", "an object name with '.' or '..' segments"),
        ("gs://bkt/data/*/../../x", "an object name with '.' or '..' segments"),
    ],
)
def test_names_that_would_leave_the_fake_root_are_refused(root, uri, fragment):
    outside = sorted(os.listdir(os.path.dirname(root)))
    s = storage_lib.Storage(root)
    for touch in (
        s.path,
        s.exists,
        s.read_bytes,
        s.glob,
        s.makedirs,
        lambda u: s.write_bytes(u, b"x"),
        lambda u: s.record_writer(u),
    ):
        with pytest.raises(storage_lib.StorageError) as e:
            touch(uri)
        # The URI (or its folder, for a write) is named first.
        assert str(e.value).startswith(repr(uri)[: len(uri) // 2]) and fragment in str(e.value)
    assert sorted(os.listdir(os.path.dirname(root))) == outside  # nothing made outside
    assert storage_lib.Storage().path(uri) == storage_lib.canonical(uri)  # real GCS decides


def test_glob_returns_sorted_gcs_uris(root):
    s = storage_lib.Storage(root)
    assert s.glob("gs://bkt/data/*.txt") == ["gs://bkt/data/a.txt", "gs://bkt/data/b.txt"]


def test_glob_without_match_names_pattern_and_bucket(root):
    s = storage_lib.Storage(root)
    with pytest.raises(
        storage_lib.StorageError, match=r"no file matches 'gs://bkt/data/\*.csv' in bucket 'bkt'"
    ):
        s.glob("gs://bkt/data/*.csv")


def test_missing_bucket_is_an_error_like_on_gcs(root):
    s = storage_lib.Storage(root)
    with pytest.raises(storage_lib.StorageError, match="bucket 'nope' of 'gs://nope/x/\\*'"):
        s.glob("gs://nope/x/*")
    with pytest.raises(storage_lib.StorageError, match="bucket 'nope'"):
        s.write_json("gs://nope/out.json", {})


def test_bad_gcs_path_is_named():
    with pytest.raises(storage_lib.StorageError, match="expected gs://BUCKET/PATH"):
        storage_lib.Storage("/tmp").path("gs:///x")


def test_write_is_atomic_and_leaves_no_temporary(root):
    s = storage_lib.Storage(root)
    s.write_json("gs://bkt/out/deep/m.json", {"a": 1})
    assert s.read_json("gs://bkt/out/deep/m.json") == {"a": 1}
    s.write_json("gs://bkt/out/deep/m.json", {"a": 2})
    assert s.read_json("gs://bkt/out/deep/m.json") == {"a": 2}
    assert s.listdir("gs://bkt/out/deep") == ["m.json"]


def test_read_errors_name_the_file(root):
    s = storage_lib.Storage(root)
    with pytest.raises(storage_lib.StorageError, match="cannot read 'gs://bkt/none.json'"):
        s.read_json("gs://bkt/none.json")
    s.write_bytes("gs://bkt/bad.json", b"{not json")
    with pytest.raises(storage_lib.StorageError, match="'gs://bkt/bad.json' is not valid JSON"):
        s.read_json("gs://bkt/bad.json")


def test_replace_dir_swaps_whole_folders(root):
    s = storage_lib.Storage(root)
    s.write_bytes("gs://bkt/new/f1", b"new")
    s.write_bytes("gs://bkt/dst/old_only", b"old")
    s.replace_dir("gs://bkt/new", "gs://bkt/dst")
    assert s.listdir("gs://bkt/dst") == ["f1"]
    assert not s.exists("gs://bkt/new")
    assert [n for n in s.listdir("gs://bkt") if n.startswith("dst.old")] == []


def test_tensorflow_reads_what_storage_writes(root):
    s = storage_lib.Storage(root)
    s.write_bytes("gs://bkt/x.bin", b"hello")
    with tf.io.gfile.GFile(s.path("gs://bkt/x.bin"), "rb") as f:
        assert f.read() == b"hello"


def test_cloud_storage_failures_name_the_path(monkeypatch):
    """Real GCS refusals (403, 404, network) cannot be produced offline: TensorFlow's
    filesystem is mocked at its boundary to raise what it raises then."""
    s = storage_lib.Storage()
    denied = tf.errors.PermissionDeniedError(
        None, None, "Error executing an HTTP request: HTTP response code 403\nmore"
    )
    monkeypatch.setattr(tf.io.gfile, "glob", lambda pattern: (_ for _ in ()).throw(denied))
    with pytest.raises(storage_lib.StorageError) as e:
        s.glob("gs://private/data/*")
    assert str(e.value) == (
        "cannot list 'gs://private/data/*': Error executing an HTTP request: HTTP response code 403"
    )

    def unavailable(*args, **kwargs):
        raise tf.errors.UnavailableError(None, None, "network unreachable")

    monkeypatch.setattr(storage_lib, "RETRY_BASE_DELAY_S", 0.0)  # retried, then given up on

    monkeypatch.setattr(tf.io.gfile, "GFile", unavailable)
    with pytest.raises(
        storage_lib.StorageError, match="cannot read 'gs://b/schema.json': network unreachable"
    ):
        s.read_json("gs://b/schema.json")


def test_buckets_are_created_only_under_a_fake_root(tmp_path):
    s = storage_lib.Storage(str(tmp_path))
    s.create_bucket("fresh")
    s.write_bytes("gs://fresh/a", b"1")
    s.rename("gs://fresh/a", "gs://fresh/b")
    assert s.listdir("gs://fresh") == ["b"]
    with pytest.raises(storage_lib.StorageError, match="cannot create bucket 'x' without"):
        storage_lib.Storage().create_bucket("x")


def test_publishing_puts_a_folder_in_place_whole_or_not_at_all(root):
    store = storage_lib.Storage(root)
    out = "gs://bkt/run/model"
    store.write_bytes("gs://bkt/run/model.partial-dead/x", b"left by a crash")
    with store.publishing(out) as partial:
        store.write_bytes(f"{partial}/a", b"1")
        assert not store.exists(out)  # nothing there until the block ends
    assert store.read_bytes(f"{out}/a") == b"1"
    with pytest.raises(RuntimeError), store.publishing(out) as partial:
        store.write_bytes(f"{partial}/a", b"2")
        raise RuntimeError("the export failed")
    assert store.read_bytes(f"{out}/a") == b"1"  # the earlier folder, untouched
    assert store.listdir("gs://bkt/run") == ["model"]  # no partial folder left


# Retries (storage.retrying): transient errors retried with backoff and logged, the rest
# one line.
def flaky(failures: list[Exception], result="done"):
    """A call that raises `failures` in turn, then returns `result`."""
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return result

    return fn, calls


def unavailable(text: str = "503 Service Unavailable") -> Exception:
    return tf.errors.UnavailableError(None, None, text)


def test_transient_errors_are_retried_with_backoff_and_logged(caplog):
    fn, calls = flaky([unavailable(), tf.errors.DeadlineExceededError(None, None, "timeout")])
    sleeps: list[float] = []
    with caplog.at_level(logging.WARNING):
        assert storage_lib.retrying("saving x", fn, sleep=sleeps.append) == "done"
    assert (len(calls), sleeps) == (3, [1.0, 2.0])
    assert "saving x failed (503 Service Unavailable); retrying in 1 s (attempt 2 of 5)" in (
        caplog.text
    )


def test_an_outage_longer_than_the_retries_is_one_line():
    fn, calls = flaky([unavailable("429 Too Many Requests\nmore")] * 9)
    sleeps: list[float] = []
    with pytest.raises(storage_lib.StorageError) as e:
        storage_lib.retrying("saving x", fn, sleep=sleeps.append)
    assert str(e.value) == "saving x: 429 Too Many Requests (after 5 attempts)"
    assert (len(calls), sleeps) == (5, [1.0, 2.0, 4.0, 8.0])


@pytest.mark.parametrize(
    "error, line",
    [
        (
            tf.errors.ResourceExhaustedError(None, None, "No space left on device"),
            "saving x: No space left on device",
        ),
        (tf.errors.PermissionDeniedError(None, None, "403 Forbidden"), "saving x: 403 Forbidden"),
        (OSError(errno.ENOSPC, "No space left on device"), "saving x: [Errno 28] No space left"),
    ],
)
def test_other_failures_are_not_retried_and_are_one_line(error, line):
    fn, calls = flaky([error])
    sleeps: list[float] = []
    with pytest.raises(storage_lib.StorageError) as e:
        storage_lib.retrying("saving x", fn, sleep=sleeps.append)
    assert str(e.value).startswith(line) and (len(calls), sleeps) == (1, [])


def test_one_attempt_in_a_cluster_still_names_the_failure():
    fn, calls = flaky([unavailable()])
    with pytest.raises(storage_lib.StorageError, match=r"saving x: 503 .*\(after 1 attempt\)"):
        storage_lib.retrying("saving x", fn, attempts=1, sleep=lambda s: None)
    assert len(calls) == 1
