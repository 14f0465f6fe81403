"""Rebuilds model_dir/report.html from the files in model_dir:

    python -m trainer.report MODEL_DIR [--fake_gcs_root=DIR]

(the page itself: trainer.evaluate.report).
"""

from __future__ import annotations

import argparse
import sys

from trainer.base import cli, contracts
from trainer.base import storage as storage_lib


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.report", description=f"Rebuilds model_dir/{contracts.REPORT_FILE}."
    )
    parser.add_argument("model_dir")
    parser.add_argument("--fake_gcs_root", default=None)
    args = parser.parse_args(argv)
    from trainer.base.quiet import quiet_stderr

    with quiet_stderr():  # TensorFlow (file access) prints its C++ start-up lines
        import tensorflow  # noqa: F401

        from trainer.evaluate import report
    try:
        print(report.write(storage_lib.Storage(args.fake_gcs_root), args.model_dir))
    except (report.ReportError, storage_lib.StorageError) as e:
        return cli.fail(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
