#!/usr/bin/env bash
# Runs the core tests against the TensorFlow and Keras of Vertex AI's prebuilt TF 2.17
# training images (TF 2.17.1, Keras 3.4.1), in .venv-tf217 (created on first use).
# Keras 3.4 behaves differently under tf.distribute: this is where that shows.
# The streamed (--cache=off) resume runs here in the cluster SIGTERM test only, not in the
# SIGKILL one too: 31 s of a CI run that is near its 30 minutes (1,746 s fresh, 2026-12-04).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-tf217"
source "$root/scripts/make_venv.sh"
make_venv "$venv" "TensorFlow 2.17.1, Keras 3.4.1" "tensorflow==2.17.1" "keras==3.4.1" \
  "absl-py>=1.0" "tensorboard>=2.16" "matplotlib>=3.7" "lightgbm>=4.3" "pytest>=7"
cd "$root"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec "$venv/bin/python" -m pytest tests/test_training.py tests/test_optimizers.py \
  tests/test_export.py tests/test_model.py tests/test_inputs.py tests/test_schema.py \
  tests/test_metrics.py tests/test_weights.py tests/test_variable_length.py \
  tests/test_plan.py tests/test_controller.py tests/test_ensemble.py tests/test_trees.py \
  tests/test_forest.py tests/test_precision.py \
  "tests/test_end_to_end.py::test_three_workers_match_one_process" \
  "tests/test_faults.py::test_sigkill_then_restart_ends_with_the_uninterrupted_weights[auto]" \
  "tests/test_faults.py::test_sigterm_to_one_worker_stops_the_whole_cluster_and_resumes_exactly" \
  "$@"
