"""All file I/O of the package, with `gs://` paths optionally served from a local folder.

On Vertex AI, `gs://` paths go straight to TensorFlow's GCS filesystem. Locally,
`Storage(fake_gcs_root=DIR)` serves every `gs://BUCKET/PATH` from `DIR/BUCKET/PATH`,
so a job runs with the very command line it will have in the cloud. The mapping has to
live here rather than in an emulator: TensorFlow's built-in GCS filesystem talks to
fixed Google endpoints and ignores `STORAGE_EMULATOR_HOST`.

`/gcs/BUCKET/PATH`, where Vertex AI mounts buckets with Cloud Storage FUSE, names the
same object as `gs://BUCKET/PATH` and is read and written as that (`canonical`): through
Cloud Storage's API, not the mount, whose renames are copies and whose every close is
an upload, so the writes below that must be atomic stay as atomic as on `gs://`.

Code that hands a path to TensorFlow (`tf.data`, checkpoints, SavedModel) calls
`Storage.path()` first; everything else uses the methods below.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar


class _TensorFlowOnFirstUse:
    """`tensorflow`, imported when a file is first touched, not with this module:
    config.py checks flags with the path helpers below before TensorFlow starts, so a
    bad flag costs no TensorFlow import (seconds, and C++ start-up lines before the error)."""

    def __getattr__(self, name: str):
        import tensorflow

        return getattr(tensorflow, name)


tf = _TensorFlowOnFirstUse()
GCS_SCHEME = "gs://"
# Vertex AI's Cloud Storage FUSE mount point: /gcs/BUCKET/PATH is gs://BUCKET/PATH.
FUSE_MOUNT = "/gcs/"
# Cloud Storage's bucket names (dotted names up to 222 characters are left out: the
# fake root takes the common kind).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]")
# The suffix of a folder being published (`Storage.publishing`), before its random part.
PARTIAL = ".partial-"


class StorageError(Exception):
    """A path that cannot be read or written; the message names it."""


def canonical(uri: str) -> str:
    """`gs://BUCKET/PATH` for Vertex's mount path `/gcs/BUCKET/PATH`; any other path as
    it is."""
    return GCS_SCHEME + uri[len(FUSE_MOUNT) :] if uri.startswith(FUSE_MOUNT) else uri


def is_gcs(uri: str) -> bool:
    """True for `gs://...` and for Vertex's mount paths `/gcs/...`."""
    return uri.startswith((GCS_SCHEME, FUSE_MOUNT))


def split_gcs(uri: str) -> tuple[str, str]:
    """Splits `gs://BUCKET/PATH` (or `/gcs/BUCKET/PATH`) into (BUCKET, PATH).

    Raises:
      StorageError: if `uri` has no bucket name.
    """
    rest = canonical(uri)[len(GCS_SCHEME) :]
    bucket, _, path = rest.partition("/")
    if not bucket:
        raise StorageError(f"bad Cloud Storage path {uri!r}: expected gs://BUCKET/PATH")
    return bucket, path


def _check_fake_name(uri: str, bucket: str, path: str) -> None:
    """Names the fake root can hold as Cloud Storage would: a valid bucket, and an
    object name that stays inside it as a path. On Cloud Storage `..` is no bucket and
    `a/../b` an object of that name; as paths they would leave the root, so they are
    refused rather than read or written elsewhere.

    Raises:
      StorageError: naming `uri`.
    """
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise StorageError(
            f"{uri!r}: {bucket!r} is not a Cloud Storage bucket name (3-63 lower-case "
            "letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
        )
    if any(part in (".", "..") for part in path.split("/")):
        raise StorageError(
            f"{uri!r}: an object name with '.' or '..' segments cannot be kept under "
            "--fake_gcs_root (on Cloud Storage it is a name, not a path up)"
        )


def join(base: str, *parts: str) -> str:
    """Joins path parts with '/', which both local paths and `gs://` URIs accept."""
    return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])


@dataclasses.dataclass(frozen=True)
class Storage:
    """File access for one job. Immutable and cheap: pass it wherever files are touched.

    Attributes:
      fake_gcs_root: local folder that stands in for Cloud Storage, or None for the real one.
    """

    fake_gcs_root: str | None = None

    def path(self, uri: str) -> str:
        """Returns the path TensorFlow should open for `uri` (local or `gs://`; a `/gcs/`
        path as its `gs://` twin)."""
        if self.fake_gcs_root and is_gcs(uri):
            bucket, path = split_gcs(uri)
            _check_fake_name(uri, bucket, path)
            return os.path.join(os.path.abspath(self.fake_gcs_root), bucket, path)
        return canonical(uri)

    def uri(self, path: str) -> str:
        """Inverse of `path()`: names a real path the way the user wrote it."""
        if self.fake_gcs_root:
            root = os.path.abspath(self.fake_gcs_root) + os.sep
            if path.startswith(root):
                return GCS_SCHEME + path[len(root) :].replace(os.sep, "/")
        return path

    def check_bucket(self, uri: str) -> None:
        """Fails like Cloud Storage would when the bucket of `uri` does not exist.

        Only the fake root can be checked without network calls; real buckets fail on
        first access with TensorFlow's own error, which `describe_error` turns into a line.
        """
        if self.fake_gcs_root and is_gcs(uri):
            bucket, path = split_gcs(uri)
            _check_fake_name(uri, bucket, path)
            bucket_dir = os.path.join(os.path.abspath(self.fake_gcs_root), bucket)
            if not os.path.isdir(bucket_dir):
                raise StorageError(
                    f"bucket {bucket!r} of {uri!r} does not exist under --fake_gcs_root "
                    f"(expected a folder {bucket_dir})"
                )

    def glob(self, pattern: str) -> list[str]:
        """Returns the sorted URIs that match `pattern`.

        Raises:
          StorageError: if the bucket is missing or nothing matches; the message names
            the pattern and, on Cloud Storage, the bucket.
        """
        matches = self.matches(pattern)
        if not matches:
            where = f" in bucket {split_gcs(pattern)[0]!r}" if is_gcs(pattern) else ""
            raise StorageError(f"no file matches {pattern!r}{where}")
        return matches

    def matches(self, pattern: str) -> list[str]:
        """Like `glob`, but an empty list when nothing matches."""
        self.check_bucket(pattern)
        try:
            found = tf.io.gfile.glob(self.path(pattern))
        except tf.errors.OpError as e:
            raise StorageError(f"cannot list {pattern!r}: {first_line(e)}") from None
        return sorted(self.uri(m) for m in found if not tf.io.gfile.isdir(m))

    def open_input(self, uri: str):
        """`uri` for a reader that takes a path or a file (Arrow): the local path itself
        (fastest), or a TensorFlow file object on Cloud Storage."""
        path = self.path(uri)
        if is_gcs(path):
            return tf.io.gfile.GFile(path, "rb")
        if not os.path.isfile(path):
            raise StorageError(f"cannot read {uri!r}: no such file")
        return path

    def open_text(self, uri: str):
        """`uri` opened for reading text (UTF-8); `.gz` files are decompressed. A Cloud
        Storage file is read whole first (TensorFlow's files are not `io` streams)."""
        path = self.path(uri)
        # The caller closes what this returns, and with it the file under it.
        raw: Any = io.BytesIO(self.read_bytes(uri)) if is_gcs(path) else open(path, "rb")  # noqa: SIM115
        if uri.endswith(".gz"):
            import gzip

            raw = gzip.GzipFile(fileobj=raw)
        return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")

    def record_writer(self, uri: str):
        """A TFRecord writer of `uri` (its folder is created)."""
        self.makedirs(uri.rsplit("/", 1)[0])
        return tf.io.TFRecordWriter(self.path(uri))

    def exists(self, uri: str) -> bool:
        return tf.io.gfile.exists(self.path(uri))

    def size(self, uri: str) -> int:
        """Bytes in the file `uri`."""
        try:
            return tf.io.gfile.stat(self.path(uri)).length
        except tf.errors.OpError as e:
            raise StorageError(f"cannot read {uri!r}: {first_line(e)}") from None

    def listdir(self, uri: str) -> list[str]:
        return sorted(n.rstrip("/") for n in tf.io.gfile.listdir(self.path(uri)))

    def makedirs(self, uri: str) -> None:
        self.check_bucket(uri)
        tf.io.gfile.makedirs(self.path(uri))

    def read_bytes(self, uri: str) -> bytes:
        """The file's bytes; a transient failure is retried (`retrying`)."""
        path = self.path(uri)

        def read() -> bytes:
            with tf.io.gfile.GFile(path, "rb") as f:
                return f.read()

        return retrying(f"cannot read {uri!r}", read)

    def read_json(self, uri: str) -> Any:
        try:
            return json.loads(self.read_bytes(uri))
        except json.JSONDecodeError as e:
            raise StorageError(f"{uri!r} is not valid JSON: {e}") from None

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Writes `data` to `uri` atomically: to a temporary name first, then renamed.

        Readers see the old file or the whole new one, never a part. A transient
        failure is retried (`retrying`); any other is a StorageError.
        """
        parent = uri.rsplit("/", 1)[0] if "/" in uri else "."
        self.makedirs(parent)
        tmp = f"{uri}.tmp-{uuid.uuid4().hex[:8]}"

        def write() -> None:
            with tf.io.gfile.GFile(self.path(tmp), "wb") as f:
                f.write(data)
            self.rename(tmp, uri)

        retrying(f"cannot write {uri!r}", write)

    def write_json(self, uri: str, obj: Any) -> None:
        self.write_bytes(uri, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())

    def rename(self, src: str, dst: str) -> None:
        """Moves a file, replacing `dst`; atomic on local (and fake) filesystems."""
        tf.io.gfile.rename(self.path(src), self.path(dst), overwrite=True)

    def create_bucket(self, name: str) -> None:
        """Creates a bucket of the fake root (a folder), as `gcloud storage buckets create`
        would on Cloud Storage.

        Raises:
          StorageError: without a fake root: real buckets are not this package's to make.
        """
        if not self.fake_gcs_root:
            raise StorageError(f"cannot create bucket {name!r} without --fake_gcs_root")
        tf.io.gfile.makedirs(os.path.join(os.path.abspath(self.fake_gcs_root), name))

    def remove_tree(self, uri: str) -> None:
        if tf.io.gfile.exists(self.path(uri)):
            tf.io.gfile.rmtree(self.path(uri))

    @contextlib.contextmanager
    def publishing(self, dst: str) -> Iterator[str]:
        """A sibling folder of `dst` to write a whole output into: moved into place
        (`replace_dir`) when the block ends, removed if it fails, so `dst` appears whole
        or not at all. Leftovers of a publish that crashed are removed first."""
        parent, name = dst.rsplit("/", 1) if "/" in dst else (".", dst)
        self.makedirs(parent)
        for stale in self.listdir(parent):
            if stale.startswith(f"{name}{PARTIAL}"):
                self.remove_tree(join(parent, stale))
        partial = f"{dst}{PARTIAL}{uuid.uuid4().hex[:8]}"
        try:
            yield partial
            self.replace_dir(partial, dst)
        finally:
            self.remove_tree(partial)

    def replace_dir(self, src: str, dst: str) -> None:
        """Moves the finished folder `src` to `dst`, replacing what was there.

        On a local (or fake) filesystem each rename is atomic, so `dst` holds either the
        old folder or the whole new one. On Cloud Storage a folder rename copies objects;
        the old folder is moved aside first so `dst` never mixes two exports.
        """
        src_path, dst_path = self.path(src), self.path(dst)
        old = None
        if tf.io.gfile.exists(dst_path):
            old = f"{dst_path.rstrip('/')}.old-{uuid.uuid4().hex[:8]}"
            tf.io.gfile.rename(dst_path, old)
        tf.io.gfile.rename(src_path, dst_path)
        if old:
            tf.io.gfile.rmtree(old)


def human_bytes(n: float) -> str:
    """`n` bytes in bytes, KiB, MiB or GiB, for a log line."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return ""


def first_line(error: BaseException) -> str:
    """The first line of an error's message, without TensorFlow's op and node details."""
    text = getattr(error, "message", None) or str(error)
    text = re.sub(r"\{\{[^}]*\}\}|\[Op:\w+\]( name: \S*)?|Name: <unknown>, ", "", text).strip()
    return text.splitlines()[0].strip() if text else type(error).__name__


# Retries. Cloud Storage answers 429 (too many requests) and 503 (backend unavailable)
# from time to time; TensorFlow's GCS filesystem retries a request a few times itself and
# then raises UnavailableError (as it does for 5xx and timeouts). A job of hours should
# not die of a minute's outage: checkpoint writes, exports and this module's own reads
# and writes go through `retrying`, with exponential backoff (1, 2, 4, 8 s), each retry
# logged. Any other failure, or the last attempt's, is a StorageError of one line naming
# what was being done; earlier checkpoints and exports are left as they were (each is
# written whole or not at all).
RETRY_ATTEMPTS = 5
RETRY_BASE_DELAY_S = 1.0
T = TypeVar("T")


def retrying(
    what: str, fn: Callable[[], T], *, attempts: int = RETRY_ATTEMPTS, sleep=time.sleep
) -> T:
    """`fn()`, retried on transient storage errors.

    Args:
      what: what `fn` does, for the log and the error ("saving checkpoint 300 to gs://...").

    Raises:
      StorageError: naming `what`, when `fn` fails with another TensorFlow or OS error (a
        full disk, a permission) or keeps failing.
    """
    transient = (
        tf.errors.UnavailableError,
        tf.errors.DeadlineExceededError,
        tf.errors.AbortedError,
    )
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except transient as e:
            if attempt == attempts:
                tries = f"{attempts} attempt{'s' if attempts > 1 else ''}"
                raise StorageError(f"{what}: {first_line(e)} (after {tries})") from None
            delay = RETRY_BASE_DELAY_S * 2 ** (attempt - 1)
            logging.warning(
                "%s failed (%s); retrying in %.0f s (attempt %d of %d)",
                what,
                first_line(e),
                delay,
                attempt + 1,
                attempts,
            )
            sleep(delay)
        except (tf.errors.OpError, OSError) as e:  # a full disk, a permission: for good
            raise StorageError(f"{what}: {first_line(e)}") from None
    raise AssertionError("unreachable")  # the loop returns or raises
