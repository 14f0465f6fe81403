"""Entry point of the training image: install the staged package, then run trainer.task.

`trainer-submit` stages the sdist of the code being submitted and names it in
$TRAINER_PACKAGE_URI; the image carries TensorFlow, the package's dependencies and a copy
of the package, which runs as it is when nothing is staged. So a code change costs an
upload and seconds of `pip install` at start, not an image build (docs/guide/containers.md).
Dependencies come from the image: a new one needs an image rebuild.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from trainer.base import cli, contracts
from trainer.base import storage as storage_lib


def fake_gcs_root(args: list[str]) -> str | None:
    """The trainer's --fake_gcs_root among its flags: the staged package is read from
    the same place as the data."""
    for arg in args:
        if arg.startswith("--fake_gcs_root="):
            return arg.split("=", 1)[1]
    return None


def install(uri: str, storage: storage_lib.Storage) -> None:
    """Copies the sdist at `uri` here and installs it over the image's copy.

    Raises:
      storage.StorageError: if it cannot be read; RuntimeError if pip fails (its output
      shown).
    """
    with tempfile.TemporaryDirectory(prefix="trainer-package-") as folder:
        local = os.path.join(folder, uri.rstrip("/").rsplit("/", 1)[-1])
        with open(local, "wb") as f:
            f.write(storage.read_bytes(uri))
        # --no-deps: the image has them; --no-build-isolation: no download of setuptools.
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--force-reinstall",
                "--no-build-isolation",
                local,
            ],
            capture_output=True,
            text=True,
        )
    if proc.returncode:
        raise RuntimeError(
            f"pip could not install {uri}: {(proc.stderr or proc.stdout).strip()[-2000:]}"
        )


def main(args: list[str]) -> int:
    uri = os.environ.get(contracts.PACKAGE_ENV)
    if uri:
        try:
            install(uri, storage_lib.Storage(fake_gcs_root(args)))
        except (storage_lib.StorageError, RuntimeError) as e:
            return cli.fail(f"${contracts.PACKAGE_ENV}: {e}")
        cli.say(f"installed the staged package {uri}")
    # A new process imports the package just installed, not the one loaded here.
    os.execv(sys.executable, [sys.executable, "-m", "trainer.task", *args])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
