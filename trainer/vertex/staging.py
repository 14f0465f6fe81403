"""The package's sdist: build it, check it, and stage it on Cloud Storage.

Cloud Storage is reached with google-cloud-storage (not TensorFlow's filesystem), which
honours STORAGE_EMULATOR_HOST: the tests run it against a local emulator.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import subprocess
import sys
import tarfile
import tempfile

from google.api_core import exceptions as gexc

from trainer.vertex import jobs

# The checkout of this code (an editable install, or scripts/ run in place); an
# installed copy (trainer-submit) stages the checkout it is run from instead.
_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPO = _HERE if os.path.exists(os.path.join(_HERE, "setup.py")) else os.getcwd()


def build_sdist(repo: str = REPO, out_dir: str | None = None) -> str:
    """Builds the sdist with setup.py and checks it holds every module of trainer/.

    Returns:
      The path of the .tar.gz.

    Raises:
      JobError: if the build fails or a module is missing from the archive.
    """
    if not os.path.exists(os.path.join(repo, "setup.py")):
        raise jobs.JobError(
            f"{repo} is not the package's checkout (no setup.py): run from it to stage its "
            "code, or pass --nostage_package to run the code of --image"
        )
    out_dir = out_dir or tempfile.mkdtemp(prefix="trainer-sdist-")
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--formats=gztar", f"--dist-dir={out_dir}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    archives = glob.glob(os.path.join(out_dir, "*.tar.gz"))
    if proc.returncode or len(archives) != 1:
        raise jobs.JobError(f"building the sdist failed: {proc.stderr.strip()[-500:]}")
    check_sdist(archives[0], repo)
    return archives[0]


def check_sdist(archive: str, repo: str = REPO) -> None:
    """Every module of trainer/ but the Vertex clients (trainer/vertex, which a job never
    imports) must be in the archive: a module missing from the sdist fails on Vertex
    only, after the VMs started."""
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    modules = {
        os.path.relpath(p, repo)
        for p in glob.glob(os.path.join(repo, "trainer", "**", "*.py"), recursive=True)
        if not os.path.relpath(p, repo).startswith(os.path.join("trainer", "vertex", ""))
    }
    missing = sorted(modules - names)
    if missing:
        raise jobs.JobError(
            f"the sdist {os.path.basename(archive)} lacks {', '.join(missing)}; "
            "check packages= in setup.py"
        )


def _split(uri: str) -> tuple[str, str]:
    if not uri.startswith("gs://") or "/" not in uri[5:]:
        raise jobs.JobError(f"{uri!r}: expected gs://BUCKET/PATH")
    bucket, _, path = uri[5:].partition("/")
    return bucket, path


def _explain(error: Exception, action: str) -> jobs.JobError:
    """One line for a Cloud Storage failure, naming what was attempted."""
    if isinstance(error, gexc.Forbidden):
        why = (
            "permission denied (403): check the account's roles on the bucket "
            "(gcloud auth application-default login, or the service account)"
        )
    elif isinstance(error, gexc.NotFound):
        why = "not found (404): check the bucket name and that it exists"
    elif isinstance(error, gexc.GoogleAPICallError):
        why = f"{type(error).__name__}: {getattr(error, 'message', error)}"
    else:
        why = f"network error ({type(error).__name__}): {error}"
    return jobs.JobError(f"{action}: {why}")


def upload(client, local_path: str, staging_dir: str) -> str:
    """Copies `local_path` into `staging_dir`; returns its gs:// URI."""
    uri = f"{staging_dir.rstrip('/')}/{os.path.basename(local_path)}"
    bucket, path = _split(uri)
    try:
        client.bucket(bucket).blob(path).upload_from_filename(local_path)
    except Exception as e:  # google-cloud-storage raises api_core and requests errors
        raise _explain(e, f"cannot upload the package to {uri}") from None
    return uri


def glob_matches(client, pattern: str, limit: int = 1000) -> list[str]:
    """Objects matching a gs:// glob (*, ?, [..]), listed under its literal prefix."""
    bucket, path = _split(pattern)
    prefix = path[: min([path.find(c) for c in "*?[" if c in path] or [len(path)])]
    try:
        names = [b.name for b in client.list_blobs(bucket, prefix=prefix, max_results=limit)]
    except Exception as e:
        raise _explain(e, f"cannot list {pattern}") from None
    return [f"gs://{bucket}/{n}" for n in names if fnmatch.fnmatchcase(n, path)]


def check_data(client, pattern: str) -> int:
    """Fails unless the training data glob matches objects; returns how many."""
    found = glob_matches(client, pattern)
    if not found:
        raise jobs.JobError(
            f"no object matches --train_data={pattern} in bucket {_split(pattern)[0]!r}"
        )
    return len(found)
