"""Builds, runs or submits the Vertex AI pipeline: `trainer-pipeline`
(trainer/vertex/pipeline_command.py), run from the checkout."""

import os
import sys

# The checkout's own package, whether or not it is installed.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer.vertex.pipeline_command import run  # noqa: E402

if __name__ == "__main__":
    run()
